//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
)

// Registry is a CNCF registry 2.8 (Debian's docker-registry) on 127.0.0.1 that demands a
// password: the agent's registry-auth path is only tested when an anonymous pull fails. The
// docker engine trusts 127.0.0.0/8 registries over plain HTTP, so no TLS is involved.
type Registry struct {
	Addr     string       // 127.0.0.1:PORT, the host part of every image reference
	User     string       // random per registry
	Password secret.Value // random per registry; Reveal() only where a credential is written

	dir          string
	mu           sync.Mutex
	dockerConfig string // logged-in DOCKER_CONFIG, made on first use
}

// StartRegistry runs a registry for this test with htpasswd auth (a random user and password,
// bcrypt made here) and storage in t.TempDir, checks that /v2/ answers 401 without credentials,
// and stops it when the test ends.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	Require(t, PartRegistry)
	dir := t.TempDir()
	r := &Registry{
		User:     "itest-" + randomHex(4),
		Password: secret.New(randomHex(16)),
		dir:      dir,
	}
	// MinCost: the registry checks the hash on every request, and this password is random.
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password.Reveal()), bcrypt.MinCost)
	if err != nil {
		t.Fatalf("itest: registry: bcrypt: %v", err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(r.User+":"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatalf("itest: registry: %v", err)
	}
	redact := &secret.Redactor{}
	redact.Add(r.Password.Reveal())

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, addr, err := startRegistryOnce(dir, htpasswd, redact)
		if err == nil {
			r.Addr = addr
			t.Cleanup(func() {
				if err := p.stop(); err != nil {
					t.Errorf("itest: registry: %v\n%s", err, p.logTail())
				}
			})
			return r
		}
		lastErr = err
		if !errors.Is(err, errExited) {
			break
		}
	}
	t.Fatalf("itest: registry: %v", lastErr)
	return nil
}

func startRegistryOnce(dir, htpasswd string, redact *secret.Redactor) (*process, string, error) {
	port, err := freePort()
	if err != nil {
		return nil, "", err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
  secret: %s
auth:
  htpasswd:
    realm: monky-itest
    path: %s
`, filepath.Join(dir, "data"), addr, randomHex(16), htpasswd)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	p, err := startProcess("docker-registry", filepath.Join(dir, "registry.log"), nil, redact, registryBin, "serve", cfgPath)
	if err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = p.waitReady(ctx, func(ctx context.Context) (bool, error) {
		code, err := httpStatus(ctx, "http://"+addr+"/v2/")
		switch {
		case err != nil:
			return false, err
		case code == http.StatusUnauthorized:
			return true, nil
		default:
			return true, fmt.Errorf("GET /v2/ without credentials answered %d, want 401: auth is not enforced", code)
		}
	})
	if err != nil {
		_ = p.stop()
		return nil, "", fmt.Errorf("%w\n%s", err, p.logTail())
	}
	return p, addr, nil
}

func httpStatus(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// DockerConfig returns a DOCKER_CONFIG directory (inside the test's temp dir) logged in to this
// registry with `docker login --password-stdin`: the password never reaches argv. The same
// directory is returned on every call.
func (r *Registry) DockerConfig(t testing.TB) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dockerConfig != "" {
		return r.dockerConfig
	}
	d := filepath.Join(r.dir, "docker-config")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatalf("itest: registry: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := runDocker(ctx, d, []byte(r.Password.Reveal()),
		"login", "--username", r.User, "--password-stdin", r.Addr); err != nil {
		t.Fatalf("itest: registry: %v", err)
	}
	r.dockerConfig = d
	return d
}
