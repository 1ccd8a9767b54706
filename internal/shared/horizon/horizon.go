// Package horizon reads when a credential stops working: the NotAfter of a PEM certificate or
// bundle, the `exp` of a JWT. It parses outside input (identity files, CA files, grants, the
// controller's authenticators) and never panics on it; nothing here verifies a signature.
package horizon

import (
	"crypto/sha1" //nolint:gosec // ziti names a certificate by the SHA-1 of its DER, not for security
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxPEM bounds what is parsed: an identity's bundle is a few kilobytes.
const maxPEM = 1 << 20

// Cert is what one certificate says about time and who it is.
type Cert struct {
	Subject   string
	NotBefore time.Time
	NotAfter  time.Time
	// Fingerprint is the SHA-1 of the DER, lower-case hex: how the ziti controller names it.
	Fingerprint string
	IsCA        bool
	// X509 is the parsed certificate itself.
	X509 *x509.Certificate
}

// Bundle is every certificate of a PEM bundle, in file order (a chain's leaf first).
type Bundle []Cert

// ParsePEM reads every CERTIFICATE block of data. Other block types are skipped; a
// CERTIFICATE block that does not parse, or no certificate at all, is an error naming which.
func ParsePEM(data []byte) (Bundle, error) {
	var out Bundle
	err := eachCert(data, func(c *x509.Certificate) { out = append(out, FromX509(c)) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LeafNotAfter is ParsePEM(data).Leaf().NotAfter, with ParsePEM's errors, without the rest of
// each Cert (its subject and fingerprint): over 10,000 authenticators they were a third of the
// parse.
func LeafNotAfter(data []byte) (time.Time, error) {
	var leaf time.Time
	err := eachCert(data, func(c *x509.Certificate) {
		if leaf.IsZero() {
			leaf = c.NotAfter.UTC()
		}
	})
	return leaf, err
}

// eachCert parses every CERTIFICATE block of data, in order, for ParsePEM.
func eachCert(data []byte, each func(*x509.Certificate)) error {
	if len(data) > maxPEM {
		return fmt.Errorf("more than %d bytes of PEM", maxPEM)
	}
	found := false
	for rest, n := data, 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return fmt.Errorf("PEM block %d: %w", n, err)
		}
		found = true
		each(c)
	}
	if !found {
		return errors.New("no PEM CERTIFICATE block")
	}
	return nil
}

// FromX509 is c as a Cert.
func FromX509(c *x509.Certificate) Cert {
	sum := sha1.Sum(c.Raw) //nolint:gosec // see the import
	return Cert{
		Subject:     c.Subject.String(),
		NotBefore:   c.NotBefore.UTC(),
		NotAfter:    c.NotAfter.UTC(),
		Fingerprint: hex.EncodeToString(sum[:]),
		IsCA:        c.IsCA,
		X509:        c,
	}
}

// Leaf is the bundle's first certificate: a client's own, in an identity's id.cert.
func (b Bundle) Leaf() Cert {
	if len(b) == 0 {
		return Cert{}
	}
	return b[0]
}

// Earliest is the certificate that expires first: a CA bundle stops working, in part, then.
func (b Bundle) Earliest() Cert {
	var out Cert
	for i, c := range b {
		if i == 0 || c.NotAfter.Before(out.NotAfter) {
			out = c
		}
	}
	return out
}

// maxJWT bounds a grant: tenancy's are well under a kilobyte.
const maxJWT = 64 << 10

// JWTExpiry is the `exp` of a compact JWT, read without verifying it (golang-jwt's
// ParseUnverified): the agent only says when a grant it holds stops being accepted. Surrounding
// whitespace is ignored; a token with no `exp` is an error.
func JWTExpiry(token []byte) (time.Time, error) {
	s := strings.TrimSpace(string(token))
	if len(s) > maxJWT {
		return time.Time{}, fmt.Errorf("longer than %d bytes", maxJWT)
	}
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(s, &claims); err != nil {
		return time.Time{}, fmt.Errorf("not a JWT: %w", err)
	}
	if claims.ExpiresAt == nil {
		return time.Time{}, errors.New("the JWT has no exp claim")
	}
	return claims.ExpiresAt.UTC(), nil
}

// Level is how close a horizon is.
type Level int

// Levels, from fine to gone.
const (
	// Fine: more than the warning window left.
	Fine Level = iota
	// Near: within the warning window.
	Near
	// Passed: the horizon is now or past.
	Passed
)

// Judge places notAfter against now and a warning window.
func Judge(notAfter, now time.Time, within time.Duration) Level {
	switch left := notAfter.Sub(now); {
	case left <= 0:
		return Passed
	case left <= within:
		return Near
	}
	return Fine
}

// Days writes a duration as whole days left, the way the CERT column and doctor show it:
// "364d", "13d", "<1d", and for a past one "expired 3d ago".
func Days(left time.Duration) string {
	switch {
	case left <= 0:
		ago := -left
		if ago < 24*time.Hour {
			return "expired <1d ago"
		}
		return fmt.Sprintf("expired %dd ago", int(ago/(24*time.Hour)))
	case left < 24*time.Hour:
		return "<1d"
	}
	return fmt.Sprintf("%dd", int(left/(24*time.Hour)))
}
