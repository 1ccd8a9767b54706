package ziti

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// keyPair makes a self-signed EC certificate and its key, as PEM.
func keyPair(t testing.TB) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "ops"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}))
}

func doc(t testing.TB, id map[string]string, ztAPI string) []byte {
	t.Helper()
	m := map[string]any{"id": id, "ztAPIs": []string{ztAPI}, "configTypes": nil, "enableHa": false}
	if ztAPI != "" {
		m["ztAPI"] = ztAPI
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// docAPIs is an identity file with the given ztAPI ("" leaves it out) and ztAPIs.
func docAPIs(t testing.TB, id map[string]string, ztAPI string, ztAPIs ...string) []byte {
	t.Helper()
	m := map[string]any{"id": id, "ztAPIs": ztAPIs}
	if ztAPI != "" {
		m["ztAPI"] = ztAPI
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseIdentity(t *testing.T) {
	cert, key := keyPair(t)
	inline := map[string]string{"cert": "pem:" + cert, "key": "pem:" + key}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ops.cert"), []byte(cert), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ops.key"), []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		body    []byte
		baseDir string
		wantErr string
		wantURL string
		wantAt  string
		wantCA  bool
	}{
		{name: "inline pem", body: doc(t, map[string]string{"cert": "pem:" + cert, "key": "pem:" + key, "ca": "pem:" + cert}, "https://ctrl.example:1280/edge/client/v1"),
			wantURL: "https://ctrl.example:1280", wantAt: "ztAPI", wantCA: true},
		{name: "relative files", body: doc(t, map[string]string{"cert": "file://ops.cert", "key": "ops.key"}, ""), baseDir: dir},
		{name: "files not allowed", body: doc(t, map[string]string{"cert": "file://ops.cert", "key": "ops.key"}, ""), wantErr: "id.cert: file references are not allowed"},
		{name: "missing file", body: doc(t, map[string]string{"cert": "file://nope", "key": "ops.key"}, ""), baseDir: dir, wantErr: "id.cert:"},
		{name: "no id", body: []byte(`{"ztAPI":"https://x"}`), wantErr: `"id" is missing`},
		{name: "not json", body: []byte(`ziti`), wantErr: "not a ziti identity"},
		{name: "empty key", body: doc(t, map[string]string{"cert": "pem:" + cert, "key": ""}, ""), wantErr: "id.key: empty"},
		{name: "engine", body: doc(t, map[string]string{"cert": "pem:" + cert, "key": "engine:pkcs11?id=1"}, ""), wantErr: "hardware engines"},
		{name: "garbage key", body: doc(t, map[string]string{"cert": "pem:" + cert, "key": "pem:-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"}, ""), wantErr: "id.cert/id.key"},
		{name: "bad ca", body: doc(t, map[string]string{"cert": "pem:" + cert, "key": "pem:" + key, "ca": "pem:nothing"}, ""), wantErr: "id.ca: no PEM"},
		{name: "http ztAPI", body: doc(t, map[string]string{"cert": "pem:" + cert, "key": "pem:" + key}, "http://ctrl"), wantErr: "ztAPI"},
		// HA identities list their controllers in ztAPIs; the first one named is used.
		{name: "ztAPIs only", body: docAPIs(t, inline, "", "", "https://ha-1.example:8441/edge/client/v1", "https://ha-2.example:8441/edge/client/v1"),
			wantURL: "https://ha-1.example:8441", wantAt: "ztAPIs[1]"},
		{name: "ztAPI beats ztAPIs", body: docAPIs(t, inline, "https://main.example/edge/client/v1", "https://ha-1.example:8441/edge/client/v1"),
			wantURL: "https://main.example", wantAt: "ztAPI"},
		{name: "bad ztAPIs entry", body: docAPIs(t, inline, "", "", "ctrl.example:8441"), wantErr: `ztAPIs[1]: "ctrl.example:8441" is not an https URL`},
		{name: "no controller named", body: docAPIs(t, inline, ""), wantURL: ""},
		// The controller address is checked as the URL it is (review fd-6, fd-7).
		{name: "empty host", body: doc(t, inline, "https://:1280/edge/client/v1"), wantErr: `ztAPI: "https://:1280/edge/client/v1" has no host`},
		{name: "port out of range", body: doc(t, inline, "https://ctrl.example:99999"), wantErr: "ztAPI: \"https://ctrl.example:99999\": port 99999 is not 1-65535"},
		{name: "password in ztAPI", body: doc(t, inline, "https://user:s3cret@ctrl.example:1280/edge/client/v1"), wantErr: "ztAPI: \"https://user:xxxxx@ctrl.example:1280/edge/client/v1\" carries a user or password"},
		{name: "query and fragment", body: doc(t, inline, "https://ctrl.example:1280?x=1#f"), wantErr: "ztAPI: \"https://ctrl.example:1280?x=1#f\" has a query or fragment"},
		{name: "a prefix is kept", body: doc(t, inline, "https://gw.example/prefix/edge/client/v1"), wantURL: "https://gw.example/prefix", wantAt: "ztAPI"},
		{name: "not the client API", body: doc(t, inline, "https://ctrl.example:1280/edge/management/v1"), wantErr: "ztAPI: \"https://ctrl.example:1280/edge/management/v1\": path \"/edge/management/v1\" is not the client API"},
		{name: "upper-case scheme", body: doc(t, inline, "HTTPS://ctrl.example"), wantURL: "https://ctrl.example", wantAt: "ztAPI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := ParseIdentity(tc.body, tc.baseDir)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("error quotes a secret: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.ControllerURL != tc.wantURL || id.ControllerField != tc.wantAt || (id.CA != nil) != tc.wantCA || len(id.Certificate.Certificate) == 0 {
				t.Errorf("identity %+v", id)
			}
		})
	}
}

func FuzzParseIdentity(f *testing.F) {
	cert, key := keyPair(f)
	f.Add(doc(f, map[string]string{"cert": "pem:" + cert, "key": "pem:" + key, "ca": "pem:" + cert}, "https://c:1280/edge/client/v1"))
	f.Add([]byte(`{"id":{"cert":"pem:x","key":"pem:y"}}`))
	f.Add([]byte(`{"id":{"cert":"engine:x"}}`))
	f.Add([]byte(`{"id":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		// No base dir: fuzzed input must never make the parser read a file. It must not panic
		// either — the SDK's own loader does, on a garbage key.
		id, err := ParseIdentity(b, "")
		if err == nil && len(id.Certificate.Certificate) == 0 {
			t.Fatal("accepted an identity without a certificate")
		}
	})
}

func TestAttributes(t *testing.T) {
	for _, tc := range []struct {
		have, missing, merged []string
	}{
		{nil, []string{"monky-deploy-agent", "openbao-client"}, []string{"monky-deploy-agent", "openbao-client"}},
		{[]string{"#monky-deploy-agent", "site-cbs"}, []string{"openbao-client"}, []string{"#monky-deploy-agent", "site-cbs", "openbao-client"}},
		{[]string{"openbao-client", "monky-deploy-agent"}, nil, []string{"openbao-client", "monky-deploy-agent"}},
	} {
		if got := MissingAttributes(tc.have); strings.Join(got, ",") != strings.Join(tc.missing, ",") {
			t.Errorf("MissingAttributes(%v) = %v, want %v", tc.have, got, tc.missing)
		}
		if got := MergeAttributes(tc.have); strings.Join(got, ",") != strings.Join(tc.merged, ",") {
			t.Errorf("MergeAttributes(%v) = %v, want %v", tc.have, got, tc.merged)
		}
	}
	if env, ok := EnvOf("monky-host.env-dev-08"); !ok || env != "env-dev-08" {
		t.Errorf("EnvOf: %q %v", env, ok)
	}
	for _, n := range []string{"monky-host.", "router-1", "old-monky-host.x"} {
		if _, ok := EnvOf(n); ok {
			t.Errorf("EnvOf(%q) accepted", n)
		}
	}
}
