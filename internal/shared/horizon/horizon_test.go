package horizon

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"
)

var (
	t0     = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	oneDay = 24 * time.Hour
)

func TestParsePEM(t *testing.T) {
	ca := testpki.NewCAValid(t, "net CA", t0.Add(-oneDay), t0.Add(800*oneDay))
	leaf := ca.Client(t, "monky-host.env-qa-02", t0, t0.Add(365*oneDay))
	short := ca.Client(t, "short", t0, t0.Add(10*oneDay))
	key := "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"
	broken := "-----BEGIN CERTIFICATE-----\n" + base64.StdEncoding.EncodeToString([]byte("not DER")) + "\n-----END CERTIFICATE-----\n"

	tests := []struct {
		name         string
		in           string
		wantErr      string
		leafSubject  string
		leafNotAfter time.Time
		earliest     time.Time
		n            int
	}{
		{name: "one certificate", in: string(leaf.CertPEM), leafSubject: "CN=monky-host.env-qa-02", leafNotAfter: t0.Add(365 * oneDay), earliest: t0.Add(365 * oneDay), n: 1},
		{name: "a chain: leaf first, the CA expires later", in: string(leaf.CertPEM) + string(ca.PEM), leafSubject: "CN=monky-host.env-qa-02", leafNotAfter: t0.Add(365 * oneDay), earliest: t0.Add(365 * oneDay), n: 2},
		{name: "the earliest is not the first", in: string(ca.PEM) + string(short.CertPEM), leafSubject: "CN=net CA", leafNotAfter: t0.Add(800 * oneDay), earliest: t0.Add(10 * oneDay), n: 2},
		{name: "other blocks are skipped", in: key + string(leaf.CertPEM), leafSubject: "CN=monky-host.env-qa-02", leafNotAfter: t0.Add(365 * oneDay), earliest: t0.Add(365 * oneDay), n: 1},
		{name: "garbage", in: "this is not PEM", wantErr: "no PEM CERTIFICATE block"},
		{name: "empty", in: "", wantErr: "no PEM CERTIFICATE block"},
		{name: "a key alone", in: key, wantErr: "no PEM CERTIFICATE block"},
		{name: "a broken certificate block is named", in: string(leaf.CertPEM) + broken, wantErr: "PEM block 2"},
		{name: "too large", in: strings.Repeat("x", maxPEM+1), wantErr: "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ParsePEM([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(b) != tc.n {
				t.Errorf("%d certificates, want %d", len(b), tc.n)
			}
			if l := b.Leaf(); l.Subject != tc.leafSubject || !l.NotAfter.Equal(tc.leafNotAfter) {
				t.Errorf("leaf = %s until %s, want %s until %s", l.Subject, l.NotAfter, tc.leafSubject, tc.leafNotAfter)
			}
			if e := b.Earliest(); !e.NotAfter.Equal(tc.earliest) {
				t.Errorf("earliest = %s, want %s", e.NotAfter, tc.earliest)
			}
		})
	}
}

func TestFingerprintIsTheControllers(t *testing.T) {
	// The controller names a certificate by the SHA-1 of its DER in lower-case hex (what
	// `ziti edge list authenticators` prints): 40 hex digits, one per certificate.
	ca := testpki.NewCA(t, "CA")
	a, b := ca.Client(t, "a", t0, t0.Add(oneDay)), ca.Client(t, "b", t0, t0.Add(oneDay))
	pa, _ := ParsePEM(a.CertPEM)
	pb, _ := ParsePEM(b.CertPEM)
	fa, fb := pa.Leaf().Fingerprint, pb.Leaf().Fingerprint
	if len(fa) != 40 || strings.ToLower(fa) != fa || fa == fb {
		t.Errorf("fingerprints %q and %q", fa, fb)
	}
}

func jwtWith(payload string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT"}`)) + "." + enc.EncodeToString([]byte(payload)) + ".c2ln"
}

func TestJWTExpiry(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    time.Time
		wantErr string
	}{
		{name: "exp", in: jwtWith(`{"sub":"agent:env-qa-02","exp":1796292000}`), want: time.Unix(1796292000, 0).UTC()},
		{name: "with a newline, as install.sh writes it", in: jwtWith(`{"exp":1796292000}`) + "\n", want: time.Unix(1796292000, 0).UTC()},
		{name: "no exp", in: jwtWith(`{"sub":"x"}`), wantErr: "no exp"},
		{name: "exp not a number", in: jwtWith(`{"exp":"soon"}`), wantErr: "not a JWT"},
		{name: "two parts", in: "a.b", wantErr: "not a JWT"},
		{name: "payload not base64", in: "a.!!!.c", wantErr: "not a JWT"},
		{name: "payload not JSON", in: "a." + base64.RawURLEncoding.EncodeToString([]byte("nope")) + ".c", wantErr: "not a JWT"},
		{name: "empty", in: "", wantErr: "not a JWT"},
		{name: "too long", in: strings.Repeat("a", maxJWT+1), wantErr: "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := JWTExpiry([]byte(tc.in))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Fatalf("JWTExpiry = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestJudgeAndDays(t *testing.T) {
	tests := []struct {
		left  time.Duration
		level Level
		days  string
	}{
		{400 * oneDay, Fine, "400d"},
		{31 * oneDay, Fine, "31d"},
		{30 * oneDay, Near, "30d"},
		{13*oneDay + 23*time.Hour, Near, "13d"},
		{time.Hour, Near, "<1d"},
		{0, Passed, "expired <1d ago"},
		{-3*oneDay - time.Hour, Passed, "expired 3d ago"},
	}
	for _, tc := range tests {
		if got := Judge(t0.Add(tc.left), t0, 30*oneDay); got != tc.level {
			t.Errorf("Judge(%s left) = %d, want %d", tc.left, got, tc.level)
		}
		if got := Days(tc.left); got != tc.days {
			t.Errorf("Days(%s) = %q, want %q", tc.left, got, tc.days)
		}
	}
}

// FuzzParsePEM: whatever a file holds, reading it never panics, and what it returns is whole.
func FuzzParsePEM(f *testing.F) {
	ca := testpki.NewCA(f, "CA")
	f.Add(ca.PEM)
	f.Add(append(ca.Client(f, "leaf", t0, t0.Add(oneDay)).CertPEM, ca.PEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := ParsePEM(data)
		if err == nil && (len(b) == 0 || b.Earliest().NotAfter.IsZero() && b.Leaf().Fingerprint == "") {
			t.Fatalf("no error and nothing read: %+v", b)
		}
		// LeafNotAfter is the leaf's NotAfter, with the same errors.
		if at, lerr := LeafNotAfter(data); fmt.Sprint(lerr) != fmt.Sprint(err) || (err == nil && !at.Equal(b.Leaf().NotAfter)) {
			t.Fatalf("LeafNotAfter = %v, %v; ParsePEM %v, leaf %v", at, lerr, err, b.Leaf().NotAfter)
		}
	})
}

// FuzzJWTExpiry: a grant file of any content never panics the status or the tick.
func FuzzJWTExpiry(f *testing.F) {
	f.Add([]byte(jwtWith(`{"exp":1796292000}`)))
	f.Add([]byte(jwtWith(`{"exp":1e300}`)))
	f.Add([]byte("a.b.c"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		exp, err := JWTExpiry(data)
		if err == nil && exp.IsZero() && !strings.Contains(string(data), `"exp"`) {
			t.Fatalf("no error and no exp from %q", data)
		}
	})
}
