package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
)

// BoxOptions describe one backend box: an env with its own config, state dir and compose project.
type BoxOptions struct {
	Env  string
	Site string // "dev" unless set
	// Bin is the monky-deployd binary the box runs (SetBin changes it: an upgrade).
	Bin string
	// Dir is the box's directory: config.yaml, state/, home/, journal.log. Created 0700.
	Dir string
	// BootstrapFile is where the agent reads its kit's grant: point it at the bootstrap.jwt of
	// the kit `fleetctl onboard --out KITS` wrote (KITS/<env>/bootstrap.jwt). Dir/bootstrap.jwt
	// when empty.
	BootstrapFile string
	// Interval is interval_s in the config and the period of Start's ticking (5 s when zero).
	Interval time.Duration
	// RegistryHost is registry_host (the host a `username:password` credential is for).
	RegistryHost string
	// HealthyTimeout is healthy_timeout_s (60 s when zero).
	HealthyTimeout time.Duration
	// Mesh, set with the stack's real controller, has the box reach tenancy and OpenBao through
	// the mesh (transport proxy) rather than directly (transport system).
	Mesh *BoxMesh
}

// BoxMesh is how a box is on the real mesh: its enrolled identity and the loopback addresses
// its `monky-deployd proxy` listens on (StartProxy runs it).
type BoxMesh struct {
	// Identity is the enrolled identity file (ziti edge enroll of the kit's token).
	Identity string
	// TenancyProxy and BaoProxy are tenancy.proxy_addr and bao.proxy_addr (127.0.0.1:PORT).
	TenancyProxy, BaoProxy string
}

// Tick is one run of `monky-deployd tick`.
type Tick struct {
	Bin        string
	Exit       int
	Output     string // the journal lines of this tick (stderr and stdout)
	Start, End time.Time
}

// Box is one agent. Its methods are safe for concurrent use.
type Box struct {
	Env, Site  string
	Dir        string
	ConfigPath string
	// Project is the compose project, monky-<env>.
	Project       string
	BootstrapFile string
	Interval      time.Duration
	// TextfileDir is textfile_dir: node_exporter's directory, where every tick leaves its metrics.
	TextfileDir string

	// Mesh is BoxOptions.Mesh (nil: transport system, no proxy).
	Mesh *BoxMesh

	mu      sync.Mutex
	proxy   *process.Process // the box's `monky-deployd proxy`, when StartProxy ran it
	bin     string
	ticks   []Tick
	stop    chan struct{} // closes to end the ticking loop
	stopped chan struct{} // closed when the loop has ended
	tickMu  sync.Mutex    // one tick at a time, as the agent's own lock would enforce
}

// NewBox writes the box's config (transport system, against this stack on loopback) and
// directories. It does not tick.
func (s *Stack) NewBox(o BoxOptions) (*Box, error) {
	if o.Env == "" || o.Bin == "" || o.Dir == "" {
		return nil, errors.New("devstack: BoxOptions need Env, Bin and Dir")
	}
	if o.Site == "" {
		o.Site = "dev"
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.HealthyTimeout == 0 {
		o.HealthyTimeout = time.Minute
	}
	if o.BootstrapFile == "" {
		o.BootstrapFile = filepath.Join(o.Dir, "bootstrap.jwt")
	}
	b := &Box{Env: o.Env, Site: o.Site, Dir: o.Dir, ConfigPath: filepath.Join(o.Dir, "config.yaml"),
		Project: "monky-" + o.Env, BootstrapFile: o.BootstrapFile, Interval: o.Interval, bin: o.Bin,
		TextfileDir: filepath.Join(o.Dir, "textfile"), Mesh: o.Mesh}
	for _, d := range []string{o.Dir, filepath.Join(o.Dir, "home"), b.TextfileDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("devstack: box %s: %w", o.Env, err)
		}
	}
	registry := ""
	if o.RegistryHost != "" {
		registry = "registry_host: " + o.RegistryHost + "\n"
	}
	// ca_file names a file that does not exist: OpenBao is plain HTTP on loopback here, and
	// an absent CA file means "system roots", never "no verification".
	// With the real mesh: transport proxy, the box's own proxy dialling the router's services;
	// bao.addr stays the address tenancy hands out (the proxy maps that one).
	transport := fmt.Sprintf("transport: system\ntenancy:\n  base_url: %s\nbao:\n  addr: %s\n", s.Tenancy.URL, s.Bao.Addr())
	if o.Mesh != nil {
		transport = fmt.Sprintf("transport: proxy\nidentity: %s\ntenancy:\n  service: %s\n  host: monky.tenancy.deploy\n  port: 443\n"+
			"  proxy_addr: %s\nbao:\n  service: %s\n  addr: %s\n  proxy_addr: %s\n",
			o.Mesh.Identity, TenancyService, o.Mesh.TenancyProxy, BaoService, s.Bao.Addr(), o.Mesh.BaoProxy)
	}
	cfg := fmt.Sprintf(`# monky-deployd config of a dev-stack box (internal/dev/devstack)
env_id: %s
site: %s
%s  ca_file: %s
interval_s: %d
state_dir: %s
bootstrap_file: %s
compose_project: %s
healthy_timeout_s: %d
textfile_dir: %s
disk:
  headroom_bytes: 1048576
%s`, o.Env, o.Site, transport, filepath.Join(o.Dir, "no-openbao-ca.pem"),
		int(o.Interval/time.Second), filepath.Join(o.Dir, "state"), o.BootstrapFile, b.Project,
		int(o.HealthyTimeout/time.Second), b.TextfileDir, registry)
	if err := os.WriteFile(b.ConfigPath, []byte(cfg), 0o640); err != nil {
		return nil, fmt.Errorf("devstack: box %s: %w", o.Env, err)
	}
	return b, nil
}

// Bin is the binary the next tick runs.
func (b *Box) Bin() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bin
}

// SetBin makes the next ticks run another binary: what `dpkg -i` of a new package does.
func (b *Box) SetBin(bin string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.bin = bin
}

// Tick runs `monky-deployd --config <box> tick` once, waits for it, appends its output to
// Dir/journal.log and returns it. Ending ctx sends the tick SIGTERM (then a kill after 20 s).
// The error is only for a binary that could not be run at all.
func (b *Box) Tick(ctx context.Context) (Tick, error) {
	b.tickMu.Lock()
	defer b.tickMu.Unlock()
	bin := b.Bin()
	t := Tick{Bin: bin, Start: time.Now()}
	cmd := exec.CommandContext(ctx, bin, "--config", b.ConfigPath, "tick")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	cmd.Env = append(cleanEnv(os.Environ(), "MONKY_DEPLOYD_CONFIG"), "HOME="+filepath.Join(b.Dir, "home"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.End, t.Output = time.Now(), out.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		t.Exit = ee.ExitCode()
	case errors.As(err, &ee):
		t.Exit = -1 // killed by a signal (the stack is shutting down)
	default:
		return t, fmt.Errorf("devstack: box %s: run %s: %w", b.Env, bin, err)
	}
	b.mu.Lock()
	b.ticks = append(b.ticks, t)
	n := len(b.ticks)
	b.mu.Unlock()
	if err := b.appendJournal(n, t); err != nil {
		return t, err
	}
	return t, nil
}

func (b *Box) appendJournal(n int, t Tick) error {
	f, err := os.OpenFile(filepath.Join(b.Dir, "journal.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("devstack: box %s: journal: %w", b.Env, err)
	}
	defer f.Close()
	_, err = fmt.Fprintf(f, "--- tick %d %s exit %d (%s, %s)\n%s", n, t.Start.UTC().Format(time.RFC3339),
		t.Exit, t.End.Sub(t.Start).Round(time.Millisecond), filepath.Base(t.Bin), t.Output)
	return err
}

// Journal is everything the box's ticks printed so far, each tick under a `--- tick N` line.
func (b *Box) Journal() string {
	raw, _ := os.ReadFile(filepath.Join(b.Dir, "journal.log"))
	return string(raw)
}

// Ticks returns the ticks run so far, in order.
func (b *Box) Ticks() []Tick {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Tick(nil), b.ticks...)
}

// LastTick is the latest tick, false before the first.
func (b *Box) LastTick() (Tick, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ticks) == 0 {
		return Tick{}, false
	}
	return b.ticks[len(b.ticks)-1], true
}

// Start ticks now and then every Interval after each tick ends — the systemd timer — until Stop
// or ctx ends (which also interrupts a running tick). Starting a running box does nothing.
func (b *Box) Start(ctx context.Context) {
	b.mu.Lock()
	if b.stop != nil {
		b.mu.Unlock()
		return
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	b.stop, b.stopped = stop, stopped
	b.mu.Unlock()
	go func() {
		defer close(stopped)
		timer := time.NewTimer(0)
		defer timer.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			_, _ = b.Tick(ctx) // the tick's own result is in Ticks and the journal
			timer.Reset(b.Interval)
		}
	}()
}

// Stop ends the ticking, as `systemctl disable --now monky-deployd.timer` does: a tick that is
// running finishes first. The host stays up. Stopping a box that is not ticking does nothing.
func (b *Box) Stop() {
	b.mu.Lock()
	stop, stopped := b.stop, b.stopped
	b.stop, b.stopped = nil, nil
	b.mu.Unlock()
	if stop == nil {
		return
	}
	close(stop)
	<-stopped
}

// Ticking reports whether Start's loop is running.
func (b *Box) Ticking() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stop != nil
}

// StartProxy runs the box's `monky-deployd proxy` (what monky-deployd-proxy.service runs): it
// holds the box's ziti context, so the host is on the mesh whether the agent ticks or not. Its
// log is Dir/proxy.log. It does nothing without a mesh or when the proxy runs already.
func (b *Box) StartProxy(ctx context.Context) error {
	if b.Mesh == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proxy != nil {
		return nil
	}
	p, err := process.Start("monky-deployd proxy", filepath.Join(b.Dir, "proxy.log"),
		[]string{"HOME=" + filepath.Join(b.Dir, "home")}, nil, b.bin, "--config", b.ConfigPath, "proxy")
	if err != nil {
		return fmt.Errorf("devstack: box %s: %w", b.Env, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitReady(wctx, func(context.Context) (bool, error) {
		conn, err := net.DialTimeout("tcp", b.Mesh.TenancyProxy, time.Second)
		if err != nil {
			return false, err
		}
		conn.Close()
		return true, nil
	}); err != nil {
		_ = p.Stop()
		return fmt.Errorf("devstack: box %s: proxy: %w\n%s", b.Env, err, p.LogTail())
	}
	b.proxy = p
	return nil
}

// ProxyPid is the proxy's process id, 0 when none runs.
func (b *Box) ProxyPid() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.proxy == nil {
		return 0
	}
	return b.proxy.Pid()
}

// StopProxy stops the box's proxy: the host leaves the mesh.
func (b *Box) StopProxy() error {
	b.mu.Lock()
	p := b.proxy
	b.proxy = nil
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.Stop(); err != nil {
		return fmt.Errorf("devstack: box %s: proxy: %w", b.Env, err)
	}
	return nil
}

// State reads the agent's state.json.
func (b *Box) State() (*state.State, error) {
	return state.Load(filepath.Join(b.Dir, "state", "state.json"))
}

// Remove stops the ticking and takes the box's compose project down for good (containers,
// networks and volumes), reporting anything left behind.
func (b *Box) Remove(ctx context.Context) error {
	b.Stop()
	if _, err := dockercli.RemoveProject(ctx, b.Project); err != nil {
		return fmt.Errorf("devstack: box %s: %w", b.Env, err)
	}
	return nil
}

// cleanEnv drops the named variables from env.
func cleanEnv(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		keep := true
		for _, n := range names {
			if strings.HasPrefix(kv, n+"=") {
				keep = false
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}
