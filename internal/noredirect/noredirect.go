// Package noredirect keeps a credential from following a redirect. Go's http.Client resends
// Authorization to the same host on another port or scheme, and custom headers (ziti's
// zt-session) and a 307/308's body (a password) to any host at all. The agent's clients of
// tenancy and OpenBao and fleetctl's clients of tenancy's admin API and the ziti controller all
// authenticate every call, and none of those services redirects a call it serves, so a redirect
// is an error that names where it pointed.
package noredirect

import (
	"errors"
	"net/http"
	"net/url"
)

// Error is a redirect that was not followed. Location is the target without user info, query
// or fragment: a redirect may carry a token in its query, and the message goes to the journal.
type Error struct {
	Status   int
	Location string
}

func (e *Error) Error() string {
	status := ""
	if e.Status != 0 {
		status = " (" + http.StatusText(e.Status) + ")"
	}
	return "refusing to send the token to " + e.Location + ": the server answered with a redirect" + status
}

// Client returns a shallow copy of hc (a client with no timeout when nil) that follows no
// redirect: every request that would have been redirected fails with a *url.Error wrapping an
// *Error; nothing is sent to the target. The *url.Error quotes the target's whole URL, query
// included: a caller reports the *Error (errors.As), not the *url.Error.
func Client(hc *http.Client) *http.Client {
	var c http.Client
	if hc != nil {
		c = *hc
	}
	c.CheckRedirect = Refuse
	return &c
}

// Refuse is an http.Client CheckRedirect that refuses every redirect with an *Error.
func Refuse(req *http.Request, via []*http.Request) error {
	status := 0
	if req.Response != nil {
		status = req.Response.StatusCode
	}
	return &Error{Status: status, Location: Where(req.URL)}
}

// FromResponse returns an *Error for a 3xx answer, nil for any other: for clients whose library
// is handed the redirect itself (http.ErrUseLastResponse).
func FromResponse(resp *http.Response) error {
	if resp == nil || resp.StatusCode < 300 || resp.StatusCode > 399 {
		return nil
	}
	where := "(no Location)"
	if loc, err := resp.Location(); err == nil {
		where = Where(loc)
	} else if !errors.Is(err, http.ErrNoLocation) {
		where = "(an unreadable Location)"
	}
	return &Error{Status: resp.StatusCode, Location: where}
}

// Where is u as a redirect error names it: scheme, host and path.
func Where(u *url.URL) string {
	if u == nil {
		return "(nowhere)"
	}
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}
	return v.String()
}
