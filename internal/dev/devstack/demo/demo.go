// Package demo is `make demo`: five agents deploy an example app against the local control plane
// (internal/dev/devstack), then one agent stops ticking on a live host and another is handed a
// privileged bundle, and `fleetctl status` catches both. Everything it starts is stopped and
// removed when it ends, whether it succeeds, fails or is interrupted.
package demo

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
)

// Options configure Run.
type Options struct {
	// Dir is the demo's work directory; Run removes what it put there. Required.
	Dir string
	// The binaries: the agent and fleetctl under demonstration, the demo app (static), and
	// optionally a bao server binary (else OpenBao is the in-process fake) and the registry.
	AgentBin, FleetctlBin, AppBin, BaoBin, RegistryBin string
	// ZitiBin is a ziti binary (scripts/build-ziti.sh): when set the demo runs the real OpenZiti
	// controller and router, and its agents reach the control plane over that mesh, each box's
	// identity held by its own `monky-deployd proxy`; else the in-process fake controller.
	ZitiBin string
	// Boxes is how many agents (5 when zero, at least 4: two of them are broken on purpose).
	Boxes int
	// Interval is the check-in interval and tick period (5 s when zero).
	Interval time.Duration
	// Converge bounds the wait for every agent's first report (4 min when zero).
	Converge time.Duration
	// RulesFile is the alert rules file the package ships; PrometheusBin the Prometheus server
	// that evaluates it (promdev.PrometheusBin when empty). Without either, the demo shows the
	// exporter's series and no alert.
	RulesFile, PrometheusBin string
	Stdout                   io.Writer
	// SkipPreflight: the caller ran Preflight already (scripts/demo.sh does, before it builds).
	SkipPreflight bool
}

// A demo step failed to happen (not the breakage it stages, which is the point).
var errDemo = errors.New("demo")

// Run plays the demo and cleans up. Its error says what did not go as the script expects.
func Run(ctx context.Context, o Options) (err error) {
	if o.Boxes == 0 {
		o.Boxes = 5
	}
	if o.Boxes < 4 {
		return fmt.Errorf("%w: at least 4 boxes", errDemo)
	}
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	if o.Converge == 0 {
		o.Converge = 4 * time.Minute
	}
	p := &printer{w: o.Stdout}
	started := time.Now()
	p.line("monky-deployd demo: %d agents, one control plane, fleetctl watching — all on this machine, on loopback", o.Boxes)
	if !o.SkipPreflight {
		p.line("preflight: monky-deployd doctor's docker and compose checks, as the agents will run docker")
		if _, err := Preflight(ctx, o.Dir, o.Stdout); err != nil {
			return err
		}
	}

	w, err := devstack.NewWorld(ctx, o.world())
	if err != nil {
		return err
	}
	defer func() {
		// A fresh context: an interrupted demo must still clean up.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		p.line("")
		proxies, ctrl := "", ""
		if w.Stack.RealZiti != nil {
			proxies, ctrl = " and their proxies", " with the ziti controller and router"
		}
		p.line("cleaning up: stopping %d agents%s, removing their compose projects (down -v), images, registry, OpenBao, control plane%s", len(w.Boxes()), proxies, ctrl)
		if cerr := w.Close(cctx); cerr != nil {
			p.line("  cleanup FAILED: %v", cerr)
			err = errors.Join(err, cerr)
			return
		}
		p.line("  done: nothing left running (%s in all)", time.Since(started).Round(time.Second))
	}()
	p.intro(w)

	envs := make([]string, o.Boxes)
	for i := range envs {
		envs[i] = fmt.Sprintf("env-demo-%02d", i+1)
	}
	silent, broken := envs[2], envs[3]

	p.step("onboarding %d boxes with `fleetctl onboard --transport %s` (kits in %s)", o.Boxes, w.Fleetctl.Transport, w.Kits)
	for _, env := range envs {
		b, err := w.AddBox(ctx, env)
		if err != nil {
			return err
		}
		if b.Mesh != nil {
			p.line("   %s  kit written; identity monky-host.%s (#%s, #%s) made on the controller by fleetctl, enrolled (ziti edge enroll); monky-deployd proxy pid %d holds it",
				env, env, ziti.AttrDeployAgent, ziti.AttrOpenBaoClient, b.ProxyPid())
			continue
		}
		p.line("   %s  kit written (bootstrap.jwt, enrolment token, install command); identity monky-host.%s made by the broker", env, env)
	}

	p.step("deploying the example app \"hello\" (web + worker, secrets from OpenBao) to every env; agents tick every %s", o.Interval)
	for _, env := range envs {
		if _, err := w.Deploy(env, "hello"); err != nil {
			return err
		}
	}
	for _, b := range w.Boxes() {
		b.Start(ctx)
	}
	cctx, cancel := context.WithTimeout(ctx, o.Converge)
	_, err = w.WaitReports(cctx, envs, func(oc devstack.Outcome) {
		p.line("   %s  %-8s %.12s after %s%s", oc.Env, oc.Report.Result, oc.Sha, oc.After.Round(100*time.Millisecond), detail(oc))
	})
	cancel()
	if err != nil {
		return err
	}
	if w.Docker == "" {
		p.line("   (no docker engine: every apply fails, and each agent says so in its report — nothing is faked)")
	}

	p.step("fleetctl status")
	if _, err := p.fleetctl(ctx, w, "status"); err != nil {
		return err
	}

	stale := 3 * o.Interval
	mon, err := startMonitoring(ctx, w, o, stale)
	if err != nil {
		return err
	}
	defer mon.stop()
	p.step("fleetctl exporter --stale %s: the same verdicts as Prometheus series, http://%s/metrics", stale, mon.exporter.Addr)
	p.line("   %s", strings.Join(mon.envCounts(ctx), "\n   "))
	if mon.prom != nil {
		p.line("   Prometheus %s scrapes it every second and evaluates the package's alert rules (%s)", mon.prom.Addr, filepath.Base(o.RulesFile))
	} else {
		p.line("   %s", mon.why)
	}
	p.line("   every agent also leaves its own metrics for node_exporter after each tick: <box>/textfile/%s", "monky_deployd.prom")

	p.step("two things go wrong")
	w.Stack.SetOnline(silent, true) // the fake's pin; the real mesh sees the proxy still running
	sb, _ := w.Box(silent)
	sb.Stop()
	if sb.Mesh != nil {
		p.line("   %s  its timer stops (what 0.1.8's prerm did: systemctl disable --now); its proxy (pid %d) keeps the host on the mesh", silent, sb.ProxyPid())
	} else {
		p.line("   %s  its timer stops (what 0.1.8's prerm did: systemctl disable --now); the host stays on the mesh", silent)
	}
	sha, err := w.Deploy(broken, "hello-privileged")
	if err != nil {
		return err
	}
	p.line("   %s  is handed bundle hello-privileged %.12s: a privileged worker with the docker socket", broken, sha)
	cctx, cancel = context.WithTimeout(ctx, o.Converge)
	refusal, err := w.WaitReports(cctx, []string{broken}, nil)
	cancel()
	if err != nil {
		return err
	}
	p.line("   %s  agent: %s: %s", broken, refusal[0].Report.Result, refusal[0].Report.Detail)
	p.line("   waiting until %s has been silent for 3 intervals (%s; fleetctl status --stale %s)…", silent, stale, stale)
	// The other agents keep ticking: OK with an engine, FAILING (honestly) without one. A
	// reading taken while a loaded machine delays one of their ticks is not the one to show.
	want := map[string]string{silent: "SILENT", broken: "FAILING"}
	for _, env := range envs {
		if want[env] == "" {
			want[env] = map[bool]string{true: "OK", false: "FAILING"}[w.Docker != ""]
		}
	}
	doc, err := waitVerdicts(ctx, w, stale, want, 2*stale+time.Minute)
	if err != nil {
		return err
	}

	p.step("fleetctl status --stale %s", stale)
	res, err := p.fleetctl(ctx, w, "status", "--stale", stale.String())
	if err != nil {
		return err
	}

	if mon.prom != nil {
		p.step("Prometheus raises the alert (MonkyAgentSilent: online on the mesh, no check-in for 3 intervals, for 1m)")
		actx, acancel := context.WithTimeout(ctx, 4*time.Minute)
		alert, err := mon.prom.WaitFiring(actx, "MonkyAgentSilent", map[string]string{"env": silent})
		acancel()
		if err != nil {
			return fmt.Errorf("%w: %w", errDemo, err)
		}
		p.line("   ALERT %s firing (pending since %s)  env=%s site=%s severity=%s", alert.Labels["alertname"],
			alert.ActiveAt.Local().Format("15:04:05"), alert.Labels["env"], alert.Labels["site"], alert.Labels["severity"])
		p.line("   summary: %s", alert.Annotations["summary"])
	}

	p.line("")
	p.line("summary")
	if w.Docker != "" {
		p.line("  %d agents, onboarded with fleetctl, deployed hello: bundle from tenancy, secrets from OpenBao (%s), image from the registry, docker compose", o.Boxes, w.Stack.Bao.Kind())
	} else {
		p.line("  %d agents, onboarded with fleetctl, were handed hello by tenancy and logged in to OpenBao (%s);", o.Boxes, w.Stack.Bao.Kind())
		p.line("  without a docker engine every apply failed, and fleetctl shows exactly that (FAILING, in the agents' own words)")
	}
	for _, e := range doc.Envs {
		switch e.EnvID {
		case silent:
			p.line("  %s  %s: mesh %s, no check-in for %ds → %s", e.EnvID, e.Verdict, mesh(e.MeshOnline), deref(e.CheckinAgeS), e.NextStep)
		case broken:
			p.line("  %s  %s: %s", e.EnvID, e.Verdict, e.NextStep)
			if w.Docker != "" {
				p.line("               nothing was started or leased; the release it ran before is still up: %s", running(ctx, broken))
			}
		}
	}
	p.line("  fleetctl status exit %d; in CI, `fleetctl gate` turns the same verdicts into a failed pipeline", res.Exit)
	return nil
}

// statusDoc is the part of `fleetctl status -o json` (schema 1) the demo reads.
type statusDoc struct {
	Schema int `json:"schema"`
	Envs   []struct {
		EnvID       string `json:"env_id"`
		Verdict     string `json:"verdict"`
		NextStep    string `json:"next_step"`
		CheckinAgeS *int64 `json:"checkin_age_s"`
		MeshOnline  *bool  `json:"mesh_online"`
	} `json:"envs"`
}

// waitVerdicts polls `fleetctl status -o json --stale S` every second until every env in want
// has its verdict, or the wait runs out.
func waitVerdicts(ctx context.Context, w *devstack.World, stale time.Duration, want map[string]string, wait time.Duration) (*statusDoc, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last string
	for {
		res, err := w.Fleetctl.Run(ctx, "status", "-o", "json", "--stale", stale.String())
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		var doc statusDoc
		if err == nil && json.Unmarshal([]byte(res.Stdout), &doc) == nil {
			got := map[string]string{}
			for _, e := range doc.Envs {
				got[e.EnvID] = e.Verdict
			}
			ok := true
			for env, v := range want {
				ok = ok && got[env] == v
			}
			if ok {
				return &doc, nil
			}
			last = fmt.Sprint(got)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: fleetctl did not show %v in time (last: %s): %w", errDemo, want, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// running describes the compose project's containers as the engine sees them.
func running(ctx context.Context, env string) string {
	out, err := dockercli.Run(ctx, "", nil, "ps", "--filter", "label="+dockercli.ProjectLabel+"=monky-"+env,
		"--format", "{{.Label \"com.docker.compose.service\"}} {{.Status}}")
	if err != nil {
		return "(docker ps failed: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return "no container running"
	}
	return strings.Join(lines, ", ")
}

func detail(oc devstack.Outcome) string {
	if oc.Converged() {
		return ""
	}
	d := oc.Report.Detail
	if len(d) > 140 {
		d = d[:140] + "…"
	}
	return ": " + d
}

func mesh(b *bool) string {
	switch {
	case b == nil:
		return "unknown"
	case *b:
		return "online"
	}
	return "offline"
}

func deref(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

type printer struct {
	w io.Writer
	n int // steps so far
}

func (p *printer) line(format string, args ...any) { fmt.Fprintf(p.w, format+"\n", args...) }

func (p *printer) step(format string, args ...any) {
	p.n++
	fmt.Fprintf(p.w, "\n%d. "+format+"\n", append([]any{p.n}, args...)...)
}

func (p *printer) intro(w *devstack.World) {
	s := w.Stack
	p.line("")
	p.line("control plane (127.0.0.1 only; its files are in %s)", s.Dir())
	p.line("  tenancy agent API   %-28s the agents check in, fetch bundles, lease grants, report", s.Tenancy.URL)
	p.line("  tenancy admin API   %-28s fleetctl reads the agents' check-ins; kits are revealed here", s.Admin.URL)
	if s.RealZiti != nil {
		p.line("  ziti management     %-28s host identities as the controller has them: attributes, online or not", s.ZitiURL())
		p.line("ziti controller: real (%s at %s); the router hosts %s and %s, the agents reach them only through the mesh", zitiVersion(w.ZitiBin()), s.ZitiURL(), devstack.TenancyService, devstack.BaoService)
	} else {
		p.line("  ziti management     %-28s host identities: attributes, online or not — the in-process fake (no controller or router: the agents reach tenancy directly)", s.ZitiURL())
		p.line("ziti controller: fake (no ziti binary; run scripts/build-ziti.sh — unless MONKY_DEMO_ZITI=off asked for the fake)")
	}
	p.line("  OpenBao             %-28s %s, configured like production (jwt-tenancy, see-env)", s.Bao.Addr(), s.Bao.Kind())
	switch {
	case w.Docker == "":
		p.line("NO docker engine (%v)", w.DockerErr)
		p.line("  the demo runs anyway: the agents cannot deploy, and they report exactly that")
	case w.Registry != nil:
		p.line("docker engine %s; registry %s (password required); image %s built and pushed", w.Docker, w.Registry.Addr, w.Image)
	default:
		p.line("docker engine %s; no registry binary, so image %s is imported locally (bundles say pull: missing)", w.Docker, w.Image)
	}
	p.line("fleetctl: %s --config %s", filepath.Base(w.Fleetctl.Bin), s.FleetctlConfig())
}

// fleetctl runs fleetctl and shows its table and exit code.
func (p *printer) fleetctl(ctx context.Context, w *devstack.World, args ...string) (devstack.Result, error) {
	res, err := w.Fleetctl.Run(ctx, args...)
	if err != nil {
		return res, err
	}
	p.line("$ fleetctl %s", strings.Join(args, " "))
	io.WriteString(p.w, res.Stdout)
	if s := strings.TrimSpace(res.Stderr); s != "" {
		p.line("%s", s)
	}
	meaning := map[int]string{0: "every env OK", 1: "something is not OK", 2: "usage or config error", 3: "a source could not be read"}[res.Exit]
	p.line("(exit %d: %s)", res.Exit, meaning)
	if res.Exit > 1 {
		return res, fmt.Errorf("%w: fleetctl %s exited %d", errDemo, strings.Join(args, " "), res.Exit)
	}
	return res, nil
}

// world is what Run and Serve both start: the same stack from the same options.
func (o Options) world() devstack.WorldOptions {
	return devstack.WorldOptions{
		Dir: o.Dir, AgentBin: o.AgentBin, FleetctlBin: o.FleetctlBin, AppBin: o.AppBin,
		BaoBin: o.BaoBin, ZitiBin: o.ZitiBin, RegistryBin: o.RegistryBin, Interval: o.Interval,
	}
}

// Serve starts the control plane and Boxes agents deploying hello, prints how to point fleetctl
// at it, and keeps it all running until ctx ends (Ctrl-C); then it cleans up like Run.
func Serve(ctx context.Context, o Options) (err error) {
	if o.Interval == 0 {
		o.Interval = 5 * time.Second
	}
	p := &printer{w: o.Stdout}
	w, err := devstack.NewWorld(ctx, o.world())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		p.line("stopping: agents (and proxies), compose projects, images, registry, OpenBao, control plane")
		if cerr := w.Close(cctx); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	p.intro(w)
	for i := range o.Boxes {
		env := fmt.Sprintf("env-dev-%02d", i+1)
		b, err := w.AddBox(ctx, env)
		if err != nil {
			return err
		}
		if _, err := w.Deploy(env, "hello"); err != nil {
			return err
		}
		b.Start(ctx)
		p.line("agent %s ticking every %s: config %s, journal %s", env, o.Interval, b.ConfigPath, filepath.Join(b.Dir, "journal.log"))
	}
	p.line("")
	p.line("try:  %s --config %s status --stale %s", w.Fleetctl.Bin, w.Stack.FleetctlConfig(), 3*o.Interval)
	p.line("Ctrl-C stops everything.")
	<-ctx.Done()
	return nil
}

// zitiVersion is "ziti vX.Y.Z quickstart": the openziti/ziti module the binary was built from
// (a build from the module proxy says v0.0.0 to `ziti version`).
func zitiVersion(bin string) string {
	if info, err := buildinfo.ReadFile(bin); err == nil {
		if info.Main.Path == zitiModule && info.Main.Version != "" && info.Main.Version != "(devel)" {
			return "ziti " + info.Main.Version + " quickstart"
		}
		for _, d := range info.Deps {
			if d.Path == zitiModule {
				return "ziti " + d.Version + " quickstart"
			}
		}
	}
	return "ziti quickstart"
}

const zitiModule = "github.com/openziti/ziti"
