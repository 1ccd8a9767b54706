package ziti_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
)

// Every identity's certificate comes from the authenticators in pages, a few calls for the whole
// fleet and never one per identity; a certPem that does not parse is kept with its error.
func TestListCertificates(t *testing.T) {
	z := newFake(t)
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	want := map[string]time.Time{}
	for i := range 23 {
		at := base.Add(time.Duration(i) * 24 * time.Hour)
		id := z.AddIdentity(zititest.Identity{Name: fmt.Sprintf("monky-host.env-%02d", i), CertNotAfter: at})
		want[id] = at
	}
	pending := z.AddIdentity(zititest.Identity{Name: "monky-host.pending", EnrollmentJWT: "x.y.z", CertNotAfter: base})
	bad := z.AddIdentity(zititest.Identity{Name: "monky-host.bad", CertPEM: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"})
	z.SetMaxLimit(5)
	c, err := dial(t, z, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := len(z.Requests())
	certs, err := c.ListCertificates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, r := range z.Requests()[before:] {
		if strings.HasSuffix(r.Path, "/authenticators") {
			calls++
			if f := r.Query.Get("filter"); f != `method = "cert"` {
				t.Errorf("filter %q", f)
			}
		}
	}
	if calls != 5 { // 24 authenticators, 5 a page
		t.Errorf("%d calls to list 24 certificates 5 a page", calls)
	}
	for id, at := range want {
		if got := certs[id]; !got.NotAfter.Equal(at) || got.Err != nil || !got.IssuedByNetwork || len(got.Fingerprint) != 40 {
			t.Errorf("identity %s: %+v, want until %s", id, got, at)
		}
	}
	if _, ok := certs[pending]; ok {
		t.Error("an identity still to enrol has a certificate")
	}
	if got := certs[bad]; got.Err == nil || !strings.Contains(got.Err.Error(), "certPem") || !got.NotAfter.IsZero() {
		t.Errorf("a garbage certPem: %+v", got)
	}
	if len(certs) != 24 {
		t.Errorf("%d certificates, want 24", len(certs))
	}
}

func TestListCertificatesFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    zititest.Failure
		want string
	}{
		{"a page fails", zititest.Failure{After: 1, Status: 500}, "HTTP 500"},
		{"a malformed answer", zititest.Failure{Malformed: true}, "list authenticators (offset 0)"},
		{"refused", zititest.Failure{Status: 401}, "401"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := newFake(t)
			for i := range 12 {
				z.AddIdentity(zititest.Identity{Name: fmt.Sprintf("monky-host.env-%02d", i), CertNotAfter: time.Now().Add(time.Hour)})
			}
			z.SetMaxLimit(5)
			c, err := dial(t, z, nil)
			if err != nil {
				t.Fatal(err)
			}
			z.Fail(zititest.OpAuthenticators, tc.f)
			if _, err := c.ListCertificates(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
