package grant

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var t0 = time.Date(2026, 9, 5, 7, 40, 0, 0, time.UTC)

func newSigner(t testing.TB) *Signer {
	t.Helper()
	s, err := NewSigner("tenancy-test")
	if err != nil {
		t.Fatal(err)
	}
	s.Clock = func() time.Time { return t0 }
	return s
}

// signRaw signs arbitrary claims, to build the grants Sign refuses to make.
func signRaw(t *testing.T, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestSignVerifyRoundTrip(t *testing.T) {
	s := newSigner(t)
	tok, jti, err := s.Sign("env-qa-02", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(jti) != 32 {
		t.Fatalf("jti %q: want 32 hex chars", jti)
	}
	c, err := Verify(tok, s.PublicKey(), t0.Add(59*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := Claims{Issuer: "tenancy-test", Audience: []string{Audience}, Subject: "agent:env-qa-02",
		EnvID: "env-qa-02", Kind: Kind, ID: jti, IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)}
	if c.Issuer != want.Issuer || c.Subject != want.Subject || c.EnvID != want.EnvID || c.Kind != want.Kind ||
		c.ID != want.ID || !c.IssuedAt.Equal(want.IssuedAt) || !c.ExpiresAt.Equal(want.ExpiresAt) ||
		len(c.Audience) != 1 || c.Audience[0] != Audience {
		t.Fatalf("claims = %+v, want %+v", c, want)
	}
	_, jti2, err := s.Sign("env-qa-02", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if jti2 == jti {
		t.Fatal("two grants share a jti")
	}
}

func TestSignRejectsBadInput(t *testing.T) {
	s := newSigner(t)
	for _, tc := range []struct {
		name string
		env  string
		ttl  time.Duration
	}{
		{"empty env", "", time.Hour},
		{"zero ttl", "env-a", 0},
		{"negative ttl", "env-a", -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := s.Sign(tc.env, tc.ttl); err == nil {
				t.Fatal("Sign accepted it")
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	s := newSigner(t)
	other := newSigner(t)
	good := jwt.MapClaims{"iss": "x", "aud": Audience, "sub": "agent:env-a", "env_id": "env-a",
		"kind": Kind, "jti": "j1", "iat": t0.Unix(), "exp": t0.Add(time.Hour).Unix()}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	expired, _, _ := s.Sign("env-a", time.Minute)
	otherTok, _, _ := other.Sign("env-a", time.Hour)
	for _, tc := range []struct {
		name  string
		token string
		want  error
	}{
		{"control: valid", signRaw(t, jwt.SigningMethodES256, s.Key, good), nil},
		{"signed by another key", otherTok, jwt.ErrTokenSignatureInvalid},
		{"expired", expired, jwt.ErrTokenExpired},
		{"wrong audience", signRaw(t, jwt.SigningMethodES256, s.Key, with("aud", "vault")), jwt.ErrTokenInvalidAudience},
		{"no exp", signRaw(t, jwt.SigningMethodES256, s.Key, with("exp", nil)), jwt.ErrTokenRequiredClaimMissing},
		{"wrong kind", signRaw(t, jwt.SigningMethodES256, s.Key, with("kind", "bootstrap")), ErrInvalid},
		{"no env_id", signRaw(t, jwt.SigningMethodES256, s.Key, with("env_id", nil)), ErrInvalid},
		{"subject names another env", signRaw(t, jwt.SigningMethodES256, s.Key, with("sub", "agent:env-b")), ErrInvalid},
		{"HS256", signRaw(t, jwt.SigningMethodHS256, []byte("k"), good), jwt.ErrTokenSignatureInvalid},
		{"ES384", signRaw(t, jwt.SigningMethodES384, p384, good), jwt.ErrTokenSignatureInvalid},
		{"garbage", "not.a.jwt", jwt.ErrTokenMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(30 * time.Minute)
			if tc.name == "expired" {
				now = t0.Add(2 * time.Minute)
			}
			_, err := Verify(tc.token, s.PublicKey(), now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v wrapped in ErrInvalid", err, tc.want)
			}
			if strings.Contains(err.Error(), tc.token) {
				t.Fatal("error contains the grant")
			}
		})
	}
}

func TestPublicKeyPEMRoundTrip(t *testing.T) {
	s := newSigner(t)
	pemText := s.PublicKeyPEM()
	if !strings.HasPrefix(pemText, "-----BEGIN PUBLIC KEY-----") {
		t.Fatalf("PEM = %q", pemText)
	}
	k, err := ParsePublicKeyPEM(pemText)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := s.Sign("env-a", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(tok, k, t0); err != nil {
		t.Fatalf("parsed key does not verify: %v", err)
	}
	for _, bad := range []string{"", "junk", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"} {
		if _, err := ParsePublicKeyPEM(bad); err == nil {
			t.Fatalf("ParsePublicKeyPEM(%q) accepted it", bad)
		}
	}
}

func FuzzVerify(f *testing.F) {
	s := newSigner(f)
	tok, _, _ := s.Sign("env-a", time.Hour)
	f.Add(tok)
	f.Add("")
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJraW5kIjoiZGVwbG95LWdyYW50In0.")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := Verify(in, s.PublicKey(), t0)
		if err != nil {
			if len(in) >= 16 && strings.Contains(err.Error(), in) {
				t.Fatal("error echoes the token")
			}
			return
		}
		if c.Kind != Kind || c.EnvID == "" {
			t.Fatalf("accepted claims %+v", c)
		}
	})
}
