package neterr

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
)

func TestClassify(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	ue := func(err error) error { return &url.Error{Op: "Get", URL: "https://x/", Err: err} }
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want Class
	}{
		{"redirect", live, ue(&noredirect.Error{}), Redirect},
		{"unknown CA", live, ue(x509.UnknownAuthorityError{}), TLS},
		{"hostname", live, ue(x509.HostnameError{}), TLS},
		{"TLS before cancel", canceled, ue(x509.UnknownAuthorityError{}), TLS},
		{"canceled", canceled, ue(context.Canceled), Canceled},
		{"unmapped", live, ue(transport.ErrUnmapped), NoRoute},
		{"not visible", live, fmt.Errorf("dial: %w", transport.ErrServiceNotVisible), NoRoute},
		{"refused", live, ue(errors.New("connection refused")), Network},
		{"deadline", live, context.DeadlineExceeded, Network},
		{"cut short", live, io.ErrUnexpectedEOF, Network},
		{"bad body", live, errors.New("invalid character 'x'"), Other},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.ctx, tc.err); got != tc.want {
				t.Errorf("Classify = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStatusError(t *testing.T) {
	unknown := &Status{Status: http.StatusNotFound, Code: "BACKEND_UNKNOWN", Text: "backend unknown"}
	notFound := &Status{Status: http.StatusNotFound, Text: "not found"}
	err := fmt.Errorf("wrapped: %w", &StatusError{Service: "tenancy", Op: "reveal kit", Status: 404, Code: "BACKEND_UNKNOWN", Message: "no such env"})
	if got, want := err.Error(), "wrapped: tenancy: reveal kit: HTTP 404 BACKEND_UNKNOWN: no such env"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, unknown) || !errors.Is(err, notFound) {
		t.Error("a 404 BACKEND_UNKNOWN must match both the coded and the plain 404 sentinel")
	}
	other := &StatusError{Service: "ziti", Op: "get", Status: 404, Code: "OTHER"}
	if errors.Is(other, unknown) || errors.Is(other, &Status{Status: 401}) {
		t.Error("a sentinel matched another code or status")
	}
}
