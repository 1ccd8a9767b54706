// Package zitidev runs a real OpenZiti controller and edge router on loopback — `ziti edge
// quickstart` of the ziti binary scripts/build-ziti.sh builds — for the mesh tests and `make demo`,
// and drives it with the ziti CLI: services hosted by the router, identities and their enrolment.
//
// The quickstart's admin password is random and given on its command line (quickstart has no
// other way to take it); the controller listens on 127.0.0.1 only and lives as long as the test
// or demo that started it.
package zitidev

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// RouterName is the quickstart router's name, and the name of its tunneller identity: the
// identity Bind policies name to have the router host a service.
const RouterName = "monky-dev-router"

// Options configure Start.
type Options struct {
	// Bin is the ziti binary. Required.
	Bin string
	// Dir is the controller's home (PKI, database, configs, logs). Required; it must exist.
	Dir string
}

// Controller is a running quickstart: a controller (management and client API on one port) and
// an edge router with its tunneller enabled, both on 127.0.0.1.
type Controller struct {
	// Addr is host:port of the controller's API; URL is https://Addr.
	Addr, URL string
	// RouterAddr is host:port of the router's edge listener.
	RouterAddr string
	// User is the admin user; Password its password.
	User     string
	Password secret.Value

	bin, dir, cliHome string
	ctrlPort, rtrPort int

	mu   sync.Mutex
	proc *process.Process
}

// Start runs the quickstart on two free loopback ports and waits until the controller answers
// and the router listens. On error nothing is left running.
func Start(ctx context.Context, o Options) (*Controller, error) {
	if o.Bin == "" || o.Dir == "" {
		return nil, errors.New("zitidev: Options need Bin and Dir")
	}
	c := &Controller{User: "admin", Password: secret.New(randomHex(16)), bin: o.Bin, dir: o.Dir,
		cliHome: filepath.Join(o.Dir, "cli-home")}
	if err := os.MkdirAll(c.cliHome, 0o700); err != nil {
		return nil, fmt.Errorf("zitidev: %w", err)
	}
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if c.ctrlPort, err = process.FreePort(); err != nil {
			return nil, fmt.Errorf("zitidev: %w", err)
		}
		if c.rtrPort, err = process.FreePort(); err != nil {
			return nil, fmt.Errorf("zitidev: %w", err)
		}
		if c.ctrlPort == c.rtrPort {
			continue
		}
		c.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.ctrlPort))
		c.URL = "https://" + c.Addr
		c.RouterAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(c.rtrPort))
		if err = c.start(ctx); err == nil {
			break
		}
		if !errors.Is(err, process.ErrExited) {
			return nil, err
		}
		// A port taken between FreePort and the bind: a fresh home and other ports.
		_ = os.RemoveAll(filepath.Join(o.Dir, "home"))
	}
	if err != nil {
		return nil, err
	}
	if _, err := c.CLI(ctx, "edge", "login", c.Addr, "-u", c.User, "-p", c.Password.Reveal(), "-y"); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Controller) start(ctx context.Context) error {
	home := filepath.Join(c.dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return fmt.Errorf("zitidev: %w", err)
	}
	red := &secret.Redactor{}
	red.Add(c.Password.Reveal())
	p, err := process.Start("ziti quickstart", filepath.Join(c.dir, "quickstart.log"),
		[]string{"ZITI_ROUTER_NAME=" + RouterName, "HOME=" + c.cliHome}, red, c.bin,
		"edge", "quickstart", "--home", home, "--ctrl-address", "127.0.0.1", "--ctrl-port", strconv.Itoa(c.ctrlPort),
		"--router-address", "127.0.0.1", "--router-port", strconv.Itoa(c.rtrPort),
		"--username", c.User, "--password", c.Password.Reveal())
	if err != nil {
		return fmt.Errorf("zitidev: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // readiness probe only
		Timeout: 2 * time.Second}
	err = p.WaitReady(wctx, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.URL+"/edge/client/v1/version", nil)
		if err != nil {
			return false, err
		}
		resp, err := insecure.Do(req)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("controller answers %d", resp.StatusCode)
		}
		conn, err := net.DialTimeout("tcp", c.RouterAddr, time.Second)
		if err != nil {
			return false, err
		}
		conn.Close()
		return true, nil
	})
	if err != nil {
		_ = p.Stop()
		return fmt.Errorf("zitidev: %w\n%s", err, p.LogTail())
	}
	c.mu.Lock()
	c.proc = p
	c.mu.Unlock()
	return nil
}

// Pid is the quickstart's process id (0 when stopped).
func (c *Controller) Pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return 0
	}
	return c.proc.Pid()
}

// Stop stops the controller and the router.
func (c *Controller) Stop() error {
	c.mu.Lock()
	p := c.proc
	c.proc = nil
	c.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Stop()
}

// Restart stops the controller and the router and starts them again on the same ports from the
// same home: the identities, services and policies survive; every session and connection does
// not.
func (c *Controller) Restart(ctx context.Context) error {
	if err := c.Stop(); err != nil {
		return err
	}
	return c.start(ctx)
}

// LogTail is the end of the quickstart's output, the password masked.
func (c *Controller) LogTail() string {
	c.mu.Lock()
	p := c.proc
	c.mu.Unlock()
	if p == nil {
		b, _ := os.ReadFile(filepath.Join(c.dir, "quickstart.log"))
		return clip.Tail(strings.TrimSpace(strings.ReplaceAll(string(b), c.Password.Reveal(), "***")), 4000)
	}
	return p.LogTail()
}

// CAFile is the controller's root CA (PEM): what a client of the management API trusts.
func (c *Controller) CAFile() string {
	return filepath.Join(c.dir, "home", "pki", "root-ca", "certs", "root-ca.cert")
}

// CLI runs `ziti ARGS…` as the logged-in admin and returns its output.
func (c *Controller) CLI(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, c.bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+c.cliHome)
	out, err := cmd.CombinedOutput()
	text := strings.ReplaceAll(string(out), c.Password.Reveal(), "***")
	if err != nil {
		shown := make([]string, len(args))
		for i, a := range args {
			shown[i] = strings.ReplaceAll(a, c.Password.Reveal(), "***")
		}
		return text, fmt.Errorf("zitidev: ziti %s: %w\n%s", strings.Join(shown, " "), err, clip.Tail(strings.TrimSpace(text), 2000))
	}
	return text, nil
}

// HostService creates a service hosted by the router, forwarding to target (host:port on the
// router's side, loopback here), with role attribute role; it returns nothing but an error.
// Identities carrying #dialRole may dial it.
func (c *Controller) HostService(ctx context.Context, name, target, dialRole string) error {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("zitidev: service %s: %w", name, err)
	}
	hostCfg, _ := json.Marshal(map[string]any{"protocol": "tcp", "address": host, "port": mustAtoi(port)})
	steps := [][]string{
		{"edge", "create", "config", name + ".host", "host.v1", string(hostCfg)},
		{"edge", "create", "service", name, "--configs", name + ".host"},
		{"edge", "create", "service-policy", name + ".bind", "Bind", "--service-roles", "@" + name, "--identity-roles", "@" + RouterName},
		{"edge", "create", "service-policy", name + ".dial", "Dial", "--service-roles", "@" + name, "--identity-roles", "#" + dialRole},
	}
	for _, s := range steps {
		if _, err := c.CLI(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// UnhostedService creates a service anyone with #dialRole may dial and nothing hosts.
func (c *Controller) UnhostedService(ctx context.Context, name, dialRole string) error {
	for _, s := range [][]string{
		{"edge", "create", "service", name},
		{"edge", "create", "service-policy", name + ".dial", "Dial", "--service-roles", "@" + name, "--identity-roles", "#" + dialRole},
	} {
		if _, err := c.CLI(ctx, s...); err != nil {
			return err
		}
	}
	return nil
}

// CreateIdentity creates a device identity with the role attributes and writes its one-time
// enrolment JWT to jwtPath (0600).
func (c *Controller) CreateIdentity(ctx context.Context, name string, attrs []string, jwtPath string) error {
	args := []string{"edge", "create", "identity", name, "-o", jwtPath}
	if len(attrs) > 0 {
		args = append(args, "--role-attributes", strings.Join(attrs, ","))
	}
	if _, err := c.CLI(ctx, args...); err != nil {
		return err
	}
	return os.Chmod(jwtPath, 0o600)
}

// Enroll enrols the JWT at jwtPath into the identity file out (what ziti-edge-tunnel enroll
// does on a box).
func (c *Controller) Enroll(ctx context.Context, jwtPath, out string) error {
	_, err := c.CLI(ctx, "edge", "enroll", jwtPath, "-o", out)
	return err
}

// Identity creates and enrols an identity in one go and returns the identity file's path in dir.
func (c *Controller) Identity(ctx context.Context, name string, attrs []string, dir string) (string, error) {
	jwt := filepath.Join(dir, name+".jwt")
	out := filepath.Join(dir, name+".json")
	if err := c.CreateIdentity(ctx, name, attrs, jwt); err != nil {
		return "", err
	}
	if err := c.Enroll(ctx, jwt, out); err != nil {
		return "", err
	}
	// A used JWT is worth nothing; `ziti edge enroll` may have removed it already.
	if err := os.Remove(jwt); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("zitidev: %w", err)
	}
	return out, nil
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// eventsFile is where EnableEvents has the controller write its API session events.
func (c *Controller) eventsFile() string { return filepath.Join(c.dir, "events.json") }

// EnableEvents makes the controller log every API session event (one JSON object a line) to a
// file of its own, and restarts it so that the setting takes: APISessionsCreated reads it.
func (c *Controller) EnableEvents(ctx context.Context) error {
	cfg := filepath.Join(c.dir, "home", "ctrl.yaml")
	f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("zitidev: %w", err)
	}
	_, err = fmt.Fprintf(f, "\nevents:\n  monkyApiSessions:\n    subscriptions:\n      - type: apiSession\n"+
		"    handler:\n      type: file\n      format: json\n      path: %s\n", c.eventsFile())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("zitidev: %w", err)
	}
	return c.Restart(ctx)
}

// APISessionsCreated counts the API sessions the controller created for the identity named
// name since EnableEvents: one per authentication.
func (c *Controller) APISessionsCreated(ctx context.Context, name string) (int, error) {
	out, err := c.CLI(ctx, "edge", "list", "identities", fmt.Sprintf(`name="%s"`, name), "-j")
	if err != nil {
		return 0, err
	}
	var ids struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &ids); err != nil || len(ids.Data) != 1 {
		return 0, fmt.Errorf("zitidev: identity %s: %v (%d found)", name, err, len(ids.Data))
	}
	b, err := os.ReadFile(c.eventsFile())
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("zitidev: %w", err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Namespace  string `json:"namespace"`
			EventType  string `json:"event_type"`
			IdentityID string `json:"identity_id"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if ev.Namespace == "apiSession" && ev.EventType == "created" && ev.IdentityID == ids.Data[0].ID {
			n++
		}
	}
	return n, nil
}
