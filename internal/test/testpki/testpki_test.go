package testpki

import (
	"crypto/x509"
	"testing"
)

func TestNewCA(t *testing.T) {
	ca := NewCA(t, "test CA")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM) || !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test CA" {
		t.Fatalf("CA = %+v", ca.Cert.Subject)
	}
	if _, err := ca.Cert.Verify(x509.VerifyOptions{Roots: pool}); err != nil {
		t.Errorf("the CA does not verify against itself: %v", err)
	}
	if other := NewCA(t, "other"); string(other.PEM) == string(ca.PEM) {
		t.Error("two CAs are the same")
	}
}
