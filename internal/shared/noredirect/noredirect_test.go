package noredirect

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A redirect to the same host on another port: Go's client would resend Authorization there.
func TestClientRefusesARedirectToAnotherPort(t *testing.T) {
	var got atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
	}))
	defer target.Close()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/steal?token=abc", code)
		}))
		req, _ := http.NewRequest(http.MethodPost, origin.URL+"/v1/agent/checkin", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer s.tok")
		resp, err := Client(&http.Client{}).Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		var re *Error
		if !errors.As(err, &re) || re.Location != target.URL+"/steal" || re.Status != code {
			t.Fatalf("%d: err = %v, want an *Error naming %s/steal", code, err, target.URL)
		}
		// The *url.Error around it quotes the whole URL: callers pass on re itself.
		if msg := re.Error(); !strings.Contains(msg, "refusing to send the token to "+target.URL+"/steal") || strings.Contains(msg, "abc") {
			t.Errorf("%d: message %q", code, msg)
		}
		origin.Close()
	}
	if got.Load() != 0 {
		t.Fatalf("the redirect target was called %d times", got.Load())
	}
}

func TestFromResponse(t *testing.T) {
	for _, tc := range []struct {
		status   int
		location string
		want     string
	}{
		{200, "", ""},
		{404, "", ""},
		{307, "https://u:p@other:8200/v1/x?t=1#f", "refusing to send the token to https://other:8200/v1/x"},
		{302, "", "(no Location)"},
		{301, "/relative", "refusing to send the token to http://bao:8200/relative"},
	} {
		resp := &http.Response{StatusCode: tc.status, Header: http.Header{}, Request: httptest.NewRequest("GET", "http://bao:8200/v1/sys", nil)}
		if tc.location != "" {
			resp.Header.Set("Location", tc.location)
		}
		err := FromResponse(resp)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%d %q: %v, want %q", tc.status, tc.location, err, tc.want)
		}
	}
}
