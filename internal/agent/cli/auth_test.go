package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// tickBox is a state dir holding a token, and a config whose tenancy is base.
func tickBox(t *testing.T, base string) (cfgPath, tokenPath string) {
	t.Helper()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	tokenPath = filepath.Join(state, "bao.token")
	if err := os.WriteFile(tokenPath, []byte("s.the-agents-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "env_id: env-qa-02\ntransport: system\ntenancy:\n  base_url: " + base + "\n  timeout_s: 5\n" +
		"bao:\n  addr: http://127.0.0.1:1\n  timeout_s: 2\nstate_dir: " + state + "\nbootstrap_file: " + dir + "/bootstrap.jwt\n"
	return writeConfig(t, cfg), tokenPath
}

// An ingress's HTML 401 page for a minute is not tenancy superseding the token: the tick exits
// 75, the journal names the status and the body's first line, and the token stays.
func TestTickKeepsTheTokenOnA401FromSomethingElse(t *testing.T) {
	nginx := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte("<html>\r\n<head><title>401 Authorization Required</title></head>\r\n<body><center><h1>401 Authorization Required</h1></center><hr><center>nginx</center></body></html>\r\n"))
	}))
	defer nginx.Close()
	cfg, tokenPath := tickBox(t, nginx.URL)
	for range 2 { // and the next tick the same: nothing was lost
		code, _, stderr := runCLI(t, nil, "--config", cfg, "tick")
		if code != 75 || !strings.Contains(stderr, "HTTP 401") || !strings.Contains(stderr, `<title>401 Authorization Required</title>`) || !strings.Contains(stderr, "not tenancy") {
			t.Fatalf("exit %d, stderr:\n%s\nwant 75 naming HTTP 401 and the body's first line", code, stderr)
		}
		if strings.Contains(stderr, "s.the-agents-token") || strings.Contains(stderr, "install kit") {
			t.Fatalf("stderr:\n%s", stderr)
		}
		if b, err := os.ReadFile(tokenPath); err != nil || string(b) != "s.the-agents-token\n" {
			t.Fatalf("bao.token = %q, %v: the token was not kept", b, err)
		}
		if _, err := os.Stat(tokenPath + ".superseded"); !os.IsNotExist(err) {
			t.Fatal("the token was put aside for a 401 that was not tenancy's")
		}
	}
}

// Tenancy's own 401 AGENT_UNAUTHENTICATED (either body shape): the token is put aside, 0600,
// not deleted, and status shows it.
func TestTickPutsARefusedTokenAside(t *testing.T) {
	for name, body := range map[string]string{
		"top-level":      `{"code": "AGENT_UNAUTHENTICATED", "message": "grant superseded"}`,
		"FastAPI detail": `{"detail": {"code": "AGENT_UNAUTHENTICATED", "message": "grant superseded"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			ten := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(body))
			}))
			defer ten.Close()
			cfg, tokenPath := tickBox(t, ten.URL)
			code, _, stderr := runCLI(t, nil, "--config", cfg, "tick")
			if code != 1 || !strings.Contains(stderr, "AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside") || !strings.Contains(stderr, "re-run the install kit") {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr)
			}
			kept := tokenPath + ".superseded"
			b, err := os.ReadFile(kept)
			fi, _ := os.Stat(kept)
			if err != nil || string(b) != "s.the-agents-token\n" || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s = %q, %v", kept, b, err)
			}
			if _, err := os.Stat(tokenPath); !os.IsNotExist(err) {
				t.Fatal("bao.token is still there")
			}
			code, stdout, _ := runCLI(t, nil, "--config", cfg, "status")
			if code != 0 || !strings.Contains(stdout, "refused token:") || !strings.Contains(stdout, kept) {
				t.Fatalf("status exit %d:\n%s", code, stdout)
			}
			code, stdout, _ = runCLI(t, nil, "--config", cfg, "status", "--json")
			var doc struct {
				Superseded *struct {
					Path string `json:"path"`
				} `json:"superseded_token"`
			}
			if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Superseded == nil || doc.Superseded.Path != kept {
				t.Fatalf("status --json exit %d: %s", code, stdout)
			}
			if strings.Contains(stdout, "s.the-agents-token") {
				t.Fatal("status printed the token")
			}
		})
	}
}

// A tenancy that redirects to the same host on another port gets no token resent: the tick
// fails naming where the redirect pointed.
func TestTickFollowsNoRedirect(t *testing.T) {
	var stolen atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { stolen.Add(1) }))
	defer target.Close()
	ten := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/sso/login?return="+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer ten.Close()
	cfg, tokenPath := tickBox(t, ten.URL)
	code, _, stderr := runCLI(t, nil, "--config", cfg, "tick")
	if code != 1 || !strings.Contains(stderr, "refusing to send the token to "+target.URL+"/sso/login") || strings.Contains(stderr, "return=") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	if n := stolen.Load(); n != 0 {
		t.Fatalf("the redirect target got %d calls", n)
	}
	if _, err := os.Stat(tokenPath); err != nil {
		t.Fatalf("the token is gone: %v", err)
	}
}
