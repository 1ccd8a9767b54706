package transport

import (
	"crypto/tls"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBaoTLSThroughSDK is the OpenBao path end to end: https://bao.cbs.tikali.net:8200 dialled
// as ziti service openbao (here an injected dialer to a loopback TLS server), the certificate
// checked against bao.ca_file and the intercept name.
func TestBaoTLSThroughSDK(t *testing.T) {
	pki := newPKI(t)
	_, _, serverPair := pki.leaf(t, "bao.cbs.tikali.net")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"initialized":true}`)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{serverPair}}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	rightCA := filepath.Join(dir, "openbao-ca.pem")
	otherCA := filepath.Join(dir, "other-ca.pem")
	notPEM := filepath.Join(dir, "not-pem.pem")
	for path, data := range map[string][]byte{rightCA: pki.caPEM, otherCA: newPKI(t).caPEM, notPEM: []byte("hello")} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	tr, err := New(Options{Mode: ModeSDK, BaoService: baoSvc, BaoHostPort: baoHP,
		Dialer: &fakeDialer{routes: map[string]string{baoSvc: srv.Listener.Addr().String()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	cases := []struct {
		name       string
		caFile     string
		serverName string
		wantErr    string // "" = the request succeeds
	}{
		{"right CA", rightCA, "bao.cbs.tikali.net", ""},
		{"no CA file: system roots", filepath.Join(dir, "absent.pem"), "bao.cbs.tikali.net", "certificate signed by unknown authority"},
		{"empty ca_file: system roots", "", "bao.cbs.tikali.net", "certificate signed by unknown authority"},
		{"another CA", otherCA, "bao.cbs.tikali.net", "certificate signed by unknown authority"},
		{"right CA, wrong name", rightCA, "vault.example.net", "not vault.example.net"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := BaoTLSConfig(tc.caFile, tc.serverName)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.InsecureSkipVerify || cfg.MinVersion < tls.VersionTLS12 {
				t.Fatalf("weak TLS config: %+v", cfg)
			}
			ht := tr.HTTPTransport()
			ht.TLSClientConfig = cfg
			client := &http.Client{Transport: ht, Timeout: 10 * time.Second}
			resp, err := client.Get("https://" + baoHP + "/v1/sys/health")
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(body) != `{"initialized":true}` {
					t.Fatalf("body %q", body)
				}
				return
			}
			if err == nil {
				resp.Body.Close()
				t.Fatal("the request succeeded")
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q lacks %q", err, tc.wantErr)
			}
		})
	}

	t.Run("ca_file without a certificate", func(t *testing.T) {
		_, err := BaoTLSConfig(notPEM, "bao.cbs.tikali.net")
		if err == nil || !strings.Contains(err.Error(), "bao: ca_file "+notPEM+" holds no PEM certificate") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unreadable ca_file", func(t *testing.T) {
		read := fakeFS{errs: map[string]error{"/etc/monky-deployd/openbao-ca.pem": fs.ErrPermission}}.read
		_, err := baoTLSConfig("/etc/monky-deployd/openbao-ca.pem", "bao.cbs.tikali.net", read)
		if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "bao: ca_file /etc/monky-deployd/openbao-ca.pem") {
			t.Fatalf("got %v", err)
		}
	})
}

// TestBaoTLSWithHTTPTestServer uses httptest's own TLS server (certificate for example.com and
// 127.0.0.1) over the system transport, with and without its certificate as the CA.
func TestBaoTLSWithHTTPTestServer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := New(Options{Mode: ModeSystem})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, tc := range []struct {
		name   string
		caFile string
		ok     bool
	}{
		{"with the CA", caFile, true},
		{"without the CA", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := BaoTLSConfig(tc.caFile, "example.com")
			if err != nil {
				t.Fatal(err)
			}
			ht := tr.HTTPTransport()
			ht.TLSClientConfig = cfg
			resp, err := (&http.Client{Transport: ht, Timeout: 10 * time.Second}).Get(srv.URL)
			if tc.ok != (err == nil) {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
			if err == nil {
				resp.Body.Close()
			} else if !strings.Contains(err.Error(), "certificate signed by unknown authority") {
				t.Fatalf("unexpected error %v", err)
			}
		})
	}
}
