// Package registrydev runs a CNCF registry 2.8 (Debian's docker-registry) on 127.0.0.1 that
// demands a password — the agent's registry-auth path only means something when an anonymous
// pull fails. The docker engine trusts 127.0.0.0/8 registries over plain HTTP, so no TLS is
// involved. The dev stack and the integration tests share it.
package registrydev

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/crypto/bcrypt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// DefaultBin is where Debian's docker-registry package puts the registry.
const DefaultBin = "/usr/bin/docker-registry"

// Options configure Start.
type Options struct {
	// Bin is the registry binary (DefaultBin when empty).
	Bin string
	// Dir holds the storage, htpasswd, config and log. Required; it must exist.
	Dir string
}

// Registry is a running registry.
type Registry struct {
	Addr     string       // 127.0.0.1:PORT, the host part of every image reference
	User     string       // random per registry
	Password secret.Value // random per registry; Reveal() only where a credential is written

	dir  string
	proc *process.Process

	mu           sync.Mutex
	dockerConfig string // logged-in DOCKER_CONFIG, made on first use
}

// Start runs a registry with htpasswd auth (a random user and password, bcrypt made here) and
// storage in opts.Dir, and checks that /v2/ answers 401 without credentials. A port taken
// between choosing and binding is retried twice. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Registry, error) {
	if opts.Dir == "" {
		return nil, errors.New("registrydev: Dir is required")
	}
	if opts.Bin == "" {
		opts.Bin = DefaultBin
	}
	r := &Registry{User: "monky-" + randomHex(4), Password: secret.New(randomHex(16)), dir: opts.Dir}
	// MinCost: the registry checks the hash on every request, and this password is random.
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password.Reveal()), bcrypt.MinCost)
	if err != nil {
		return nil, fmt.Errorf("registrydev: bcrypt: %w", err)
	}
	htpasswd := filepath.Join(opts.Dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte(r.User+":"+string(hash)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("registrydev: %w", err)
	}
	redact := &secret.Redactor{}
	redact.Add(r.Password.Reveal())
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, addr, err := startOnce(ctx, opts.Bin, opts.Dir, htpasswd, redact)
		if err == nil {
			r.Addr, r.proc = addr, p
			return r, nil
		}
		lastErr = err
		if !errors.Is(err, process.ErrExited) {
			break
		}
	}
	return nil, fmt.Errorf("registrydev: %w", lastErr)
}

func startOnce(ctx context.Context, bin, dir, htpasswd string, redact *secret.Redactor) (*process.Process, string, error) {
	port, err := process.FreePort()
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
    realm: monky-dev
    path: %s
`, filepath.Join(dir, "data"), addr, randomHex(16), htpasswd)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, "", err
	}
	p, err := process.Start("docker-registry", filepath.Join(dir, "registry.log"), nil, redact, bin, "serve", cfgPath)
	if err != nil {
		return nil, "", err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = p.WaitReady(wctx, func(ctx context.Context) (bool, error) {
		code, err := process.HTTPStatus(ctx, "http://"+addr+"/v2/")
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
		_ = p.Stop()
		return nil, "", fmt.Errorf("%w\n%s", err, p.LogTail())
	}
	return p, addr, nil
}

// Stop stops the registry.
func (r *Registry) Stop() error {
	if err := r.proc.Stop(); err != nil {
		return fmt.Errorf("registrydev: %w\n%s", err, r.proc.LogTail())
	}
	return nil
}

// Dir is the registry's directory (storage, htpasswd, config, log).
func (r *Registry) Dir() string { return r.dir }

// Pid is the registry's process id.
func (r *Registry) Pid() int { return r.proc.Pid() }

// DockerConfig returns a DOCKER_CONFIG directory (inside the registry's Dir) logged in to this
// registry with `docker login --password-stdin`: the password never reaches argv. The same
// directory is returned on every call.
func (r *Registry) DockerConfig(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dockerConfig != "" {
		return r.dockerConfig, nil
	}
	d := filepath.Join(r.dir, "docker-config")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("registrydev: %w", err)
	}
	if _, err := dockercli.Run(ctx, d, []byte(r.Password.Reveal()), "login", "--username", r.User, "--password-stdin", r.Addr); err != nil {
		return "", fmt.Errorf("registrydev: %w", err)
	}
	r.dockerConfig = d
	return d, nil
}

// Credential is the pull credential as the agent reads it from OpenBao (a manifest entry with
// `use: registry-auth`): {"registry","username","password"}. It holds the password: store it,
// never print it.
func (r *Registry) Credential() secret.Value {
	b, _ := json.Marshal(map[string]string{"registry": r.Addr, "username": r.User, "password": r.Password.Reveal()})
	return secret.New(string(b))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
