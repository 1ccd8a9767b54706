package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/appimage"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/registrydev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// WorldOptions describe a whole local fleet: the control plane, the example app's image, and
// boxes onboarded with `fleetctl onboard`.
type WorldOptions struct {
	// Dir holds everything: the stack's files, kits/, boxes/<env>/, registry/. Required; it
	// must exist.
	Dir string
	// AgentBin and FleetctlBin are the binaries under test. Required.
	AgentBin, FleetctlBin string
	// AppBin is the demo app, built static (appimage.BuildApp): the image every example runs.
	// Without it, or without a docker engine, no image is made.
	AppBin string
	// ImageTag names the image (hello:1 when empty; the repository is monky-demo/hello).
	ImageTag string
	// BaoBin runs the real OpenBao dev server when set (Options.BaoBin).
	BaoBin string
	// ZitiBin runs the real OpenZiti controller and router when set (Options.ZitiBin): every
	// box's identity is then made on it by `fleetctl onboard`, enrolled, and held by the box's
	// own `monky-deployd proxy`, through which its agent reaches tenancy and OpenBao.
	ZitiBin string
	// RegistryBin is the registry binary; registrydev.DefaultBin when empty. When it is not
	// there, the image is only built into the engine and bundles say pull: missing.
	RegistryBin string
	// Site is every backend's site ("demo" when empty).
	Site string
	// Interval is the check-in interval tenancy hands out and the boxes' tick period (5 s).
	Interval time.Duration
	// PackageVersion is what kits install (Options.PackageVersion).
	PackageVersion string
	// Log receives the stack's lines; nil discards.
	Log *slog.Logger
}

// World is a running local fleet.
type World struct {
	Stack    *Stack
	Fleetctl *Fleetctl
	// Docker is the engine's version, "" when there is none; DockerErr says why.
	Docker    string
	DockerErr error
	// Registry is the local registry, nil when there is none.
	Registry *registrydev.Registry
	// Image is what the examples run; Params fill the examples.
	Image  string
	Params ExampleParams
	// Kits is where `fleetctl onboard` writes kits (Kits/<env>/bootstrap.jwt).
	Kits string

	opts WorldOptions

	mu    sync.Mutex
	boxes []*Box
	// pulled is every image ref the engine may hold because of this world, removed at Close.
	pulled []string
}

// NewWorld starts the control plane and, when a docker engine answers, the registry and the
// image. It adds no box. On error everything started is stopped.
func NewWorld(ctx context.Context, o WorldOptions) (_ *World, err error) {
	if o.Dir == "" || o.AgentBin == "" || o.FleetctlBin == "" {
		return nil, errors.New("devstack: WorldOptions need Dir, AgentBin and FleetctlBin")
	}
	if o.Site == "" {
		o.Site = "demo"
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.ImageTag == "" {
		o.ImageTag = "hello:1"
	}
	if o.RegistryBin == "" {
		o.RegistryBin = registrydev.DefaultBin
	}
	w := &World{opts: o, Kits: filepath.Join(o.Dir, "kits")}
	defer func() {
		if err != nil {
			_ = w.Close(context.WithoutCancel(ctx))
		}
	}()
	stackDir := filepath.Join(o.Dir, "stack")
	if err := os.MkdirAll(stackDir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	if w.Stack, err = Start(ctx, Options{Dir: stackDir, BaoBin: o.BaoBin, ZitiBin: o.ZitiBin, CheckinInterval: o.Interval,
		PackageVersion: o.PackageVersion, Log: o.Log}); err != nil {
		return nil, err
	}
	w.Fleetctl = w.Stack.Fleetctl(o.FleetctlBin)

	w.Docker, w.DockerErr = dockercli.ServerVersion(ctx)
	w.Params = ExampleParams{Image: "monky-demo/" + o.ImageTag, Pull: "always"}
	w.Image = w.Params.Image
	if w.DockerErr != nil || o.AppBin == "" {
		return w, nil // the agents will say, in their reports, that there is no engine
	}
	if _, statErr := os.Stat(o.RegistryBin); statErr == nil {
		regDir := filepath.Join(o.Dir, "registry")
		if err := os.MkdirAll(regDir, 0o700); err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		if w.Registry, err = registrydev.Start(ctx, registrydev.Options{Bin: o.RegistryBin, Dir: regDir}); err != nil {
			return nil, err
		}
		if err := w.Stack.AddPid(w.Registry.Pid()); err != nil {
			return nil, err
		}
		w.Params = ExampleParams{Image: w.Registry.Addr + "/monky-demo/" + o.ImageTag, Pull: "always", RegistryAuth: true}
		w.Image = w.Params.Image
	} else {
		w.Params.Pull = "missing" // the image is on the engine; nothing to pull it from
	}
	w.addPulled(w.Image)
	if err := appimage.Build(ctx, o.AppBin, w.Image); err != nil {
		return nil, err
	}
	if w.Registry != nil {
		cfg, err := w.Registry.DockerConfig(ctx)
		if err != nil {
			return nil, err
		}
		if err := appimage.Push(ctx, cfg, w.Image); err != nil {
			return nil, err
		}
		// The agents must pull it, with the credential they read from OpenBao.
		if err := appimage.Remove(ctx, w.Image, false); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func (w *World) addPulled(ref string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pulled = append(w.pulled, ref)
}

// ZitiBin is the ziti binary of the real controller, "" with the fake.
func (w *World) ZitiBin() string { return w.opts.ZitiBin }

// Boxes returns the boxes added so far, in order.
func (w *World) Boxes() []*Box {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]*Box(nil), w.boxes...)
}

// Box returns the box of env.
func (w *World) Box(env string) (*Box, bool) {
	for _, b := range w.Boxes() {
		if b.Env == env {
			return b, true
		}
	}
	return nil, false
}

// AddBox registers env in tenancy, writes its secrets to OpenBao (greeting, db_password and,
// with a registry, the pull credential), runs `fleetctl onboard` for its kit, and writes the
// box's config with bootstrap_file pointing into that kit. It does not tick. With the real
// controller the box also enrols the kit's enrolment token (`ziti edge enroll`, what the
// installer's tunneller step does) and starts its `monky-deployd proxy`: the host is on the mesh.
func (w *World) AddBox(ctx context.Context, env string) (*Box, error) {
	if err := w.Onboard(ctx, env); err != nil {
		return nil, err
	}
	registryHost := ""
	if w.Registry != nil {
		registryHost = w.Registry.Addr
	}
	dir := filepath.Join(w.opts.Dir, "boxes", env)
	var mesh *BoxMesh
	if w.Stack.RealZiti != nil {
		var err error
		if mesh, err = w.enrol(ctx, env, dir); err != nil {
			return nil, err
		}
	}
	b, err := w.Stack.NewBox(BoxOptions{Env: env, Site: w.opts.Site, Bin: w.opts.AgentBin,
		Dir: dir, BootstrapFile: filepath.Join(w.Kits, env, "bootstrap.jwt"),
		Interval: w.opts.Interval, RegistryHost: registryHost, Mesh: mesh})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	w.boxes = append(w.boxes, b)
	w.mu.Unlock()
	if err := b.StartProxy(ctx); err != nil {
		return nil, err
	}
	if pid := b.ProxyPid(); pid > 0 {
		if err := w.Stack.AddPid(pid); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// enrol turns the enrolment token of env's kit into the box's identity file in dir and picks
// the loopback ports of the box's proxy.
func (w *World) enrol(ctx context.Context, env, dir string) (*BoxMesh, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("devstack: %w", err)
	}
	m := &BoxMesh{Identity: filepath.Join(dir, "identity.json")}
	jwt := filepath.Join(w.Kits, env, kit.EnrollmentFile(env))
	if err := w.Stack.RealZiti.Enroll(ctx, jwt, m.Identity); err != nil {
		return nil, fmt.Errorf("devstack: box %s: %w", env, err)
	}
	for _, a := range []*string{&m.TenancyProxy, &m.BaoProxy} {
		port, err := process.FreePort()
		if err != nil {
			return nil, fmt.Errorf("devstack: %w", err)
		}
		*a = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if m.TenancyProxy == m.BaoProxy {
		return nil, fmt.Errorf("devstack: box %s: the same free port twice (%s); try again", env, m.TenancyProxy)
	}
	return m, nil
}

// Onboard is AddBox without the box: env registered in tenancy, its secrets in OpenBao, its kit
// in Kits/<env>/ — for an agent installed elsewhere (a real box running the kit's install.sh).
func (w *World) Onboard(ctx context.Context, env string) error {
	s := w.Stack
	s.AddBackend(env, w.opts.Site)
	secrets := map[string]map[string]any{
		"greeting":    {"value": "hello from " + env},
		"db_password": {"value": "db-" + randomHex(8)},
	}
	if w.Registry != nil {
		secrets["registry"] = map[string]any{"value": w.Registry.Credential().Reveal()}
	}
	for path, data := range secrets {
		if err := s.PutSecret(ctx, env, path, data); err != nil {
			return err
		}
	}
	_, err := w.Fleetctl.Onboard(ctx, env, w.opts.Site, w.Kits, false)
	return err
}

// Deploy makes the example bundle env's desired state and returns its sha.
func (w *World) Deploy(env, example string) (string, error) {
	files, err := Example(Examples(), example, w.Params)
	if err != nil {
		return "", err
	}
	return w.Stack.SetDesired(env, files), nil
}

// Outcome is how an env's agent answered its current desired bundle.
type Outcome struct {
	Env    string
	Sha    string
	Report protocol.Report
	// After is how long after the bundle was set the report came.
	After time.Duration
}

// Converged reports whether the agent applied the bundle and it runs healthy.
func (o Outcome) Converged() bool {
	return o.Report.Result == protocol.ResultApplied || o.Report.Result == protocol.ResultHealthy
}

// WaitReports waits until each env's agent has reported on its desired bundle (applied, or
// failed/refused: both are an answer), calling progress once per env as it answers, polling
// tenancy's records every 250 ms. It returns the outcomes in env order, or ctx's error with
// the envs still waited for.
func (w *World) WaitReports(ctx context.Context, envs []string, progress func(Outcome)) ([]Outcome, error) {
	start := time.Now()
	pending := map[string]bool{}
	for _, e := range envs {
		pending[e] = true
	}
	got := map[string]Outcome{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for len(pending) > 0 {
		for _, env := range envs {
			if !pending[env] {
				continue
			}
			a, ok := w.Stack.Tenancy.AdminAgent(env)
			if !ok || a.DesiredSha == "" {
				continue
			}
			for _, r := range w.Stack.Tenancy.Reports(env) {
				if r.Status == 200 && r.Report.Sha == a.DesiredSha && r.Report.Result != protocol.ResultDown {
					o := Outcome{Env: env, Sha: a.DesiredSha, Report: r.Report, After: time.Since(start)}
					got[env] = o
					delete(pending, env)
					if progress != nil {
						progress(o)
					}
					break
				}
			}
		}
		if len(pending) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			var left []string
			for _, e := range envs {
				if pending[e] {
					left = append(left, e)
				}
			}
			return nil, fmt.Errorf("devstack: no report yet from %v: %w", left, ctx.Err())
		case <-tick.C:
		}
	}
	out := make([]Outcome, 0, len(envs))
	for _, e := range envs {
		out = append(out, got[e])
	}
	return out, nil
}

// Close stops every box (a running tick finishes or, when ctx ends, is interrupted), takes
// every compose project down with its volumes, removes the images this world put on the
// engine, stops the registry and the control plane, and removes what it wrote in Dir. It
// carries on past failures and returns them all.
func (w *World) Close(ctx context.Context) error {
	var errs []error
	boxes := w.Boxes()
	var wg sync.WaitGroup
	for _, b := range boxes {
		wg.Add(1)
		go func() { defer wg.Done(); b.Stop() }()
	}
	wg.Wait()
	for _, b := range boxes {
		if err := b.StopProxy(); err != nil {
			errs = append(errs, err)
		}
	}
	if w.Docker != "" {
		for _, b := range boxes {
			if err := b.Remove(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		w.mu.Lock()
		pulled := append([]string(nil), w.pulled...)
		w.mu.Unlock()
		for _, ref := range pulled {
			if err := appimage.Remove(ctx, ref, true); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if w.Registry != nil {
		if err := w.Registry.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if w.Stack != nil {
		if err := w.Stack.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	// Kits hold grants, boxes hold tokens and rendered .env files, the registry its htpasswd:
	// nothing of it outlives the world.
	for _, d := range []string{"stack", "kits", "boxes", "registry"} {
		if err := os.RemoveAll(filepath.Join(w.opts.Dir, d)); err != nil {
			errs = append(errs, fmt.Errorf("devstack: %w", err))
		}
	}
	return errors.Join(errs...)
}
