package neterr_test

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
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/neterr"
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
		want neterr.Class
	}{
		{"redirect", live, ue(&noredirect.Error{}), neterr.Redirect},
		{"unknown CA", live, ue(x509.UnknownAuthorityError{}), neterr.TLS},
		{"hostname", live, ue(x509.HostnameError{}), neterr.TLS},
		{"TLS before cancel", canceled, ue(x509.UnknownAuthorityError{}), neterr.TLS},
		{"canceled", canceled, ue(context.Canceled), neterr.Canceled},
		{"unmapped", live, ue(transport.ErrUnmapped), neterr.NoRoute},
		{"not visible", live, fmt.Errorf("dial: %w", transport.ErrServiceNotVisible), neterr.NoRoute},
		{"refused", live, ue(errors.New("connection refused")), neterr.Network},
		{"deadline", live, context.DeadlineExceeded, neterr.Network},
		{"cut short", live, io.ErrUnexpectedEOF, neterr.Network},
		{"bad body", live, errors.New("invalid character 'x'"), neterr.Other},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := neterr.Classify(tc.ctx, tc.err); got != tc.want {
				t.Errorf("Classify = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestStatusError(t *testing.T) {
	unknown := &neterr.Status{Status: http.StatusNotFound, Code: "BACKEND_UNKNOWN", Text: "backend unknown"}
	notFound := &neterr.Status{Status: http.StatusNotFound, Text: "not found"}
	err := fmt.Errorf("wrapped: %w", &neterr.StatusError{Service: "tenancy", Op: "reveal kit", Status: 404, Code: "BACKEND_UNKNOWN", Message: "no such env"})
	if got, want := err.Error(), "wrapped: tenancy: reveal kit: HTTP 404 BACKEND_UNKNOWN: no such env"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, unknown) || !errors.Is(err, notFound) {
		t.Error("a 404 BACKEND_UNKNOWN must match both the coded and the plain 404 sentinel")
	}
	other := &neterr.StatusError{Service: "ziti", Op: "get", Status: 404, Code: "OTHER"}
	if errors.Is(other, unknown) || errors.Is(other, &neterr.Status{Status: 401}) {
		t.Error("a sentinel matched another code or status")
	}
}
