// Package noredirect keeps a credential from following a redirect: Go's http.Client resends
// custom headers (zt-session) and a 307's body (a password) to any host. None of our services
// redirects a call it serves, so a redirect is an error naming where it pointed.
package noredirect

import (
	"errors"
	"net/http"
	"net/url"
)

// Error is a redirect not followed; Location drops user info, query and fragment (a token may
// ride in the query, and the message goes to the journal).
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

// Client returns a copy of hc (nil: no timeout) that follows no redirect. Report the wrapped
// *Error (errors.As), not the *url.Error: it quotes the target's whole URL.
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

// FromResponse returns an *Error for a 3xx answer, for clients using http.ErrUseLastResponse.
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
