//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openbao/openbao/api/v2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// TestFiveAgentsConverge: five agents onboarded with fleetctl deploy the example app; fleetctl
// status says OK for each and exits 0, and its JSON is the agents' real state.
func TestFiveAgentsConverge(t *testing.T) {
	f := newFleet(t, "conv", 5, 5*time.Second)
	shas := f.converge()
	// Hold the agents still (a running tick finishes), so that what fleetctl shows and what each
	// box holds are read from the same last check-in.
	for _, b := range f.boxes {
		b.Stop()
	}

	doc, r := f.status()
	if r.Exit != 0 {
		t.Fatalf("fleetctl status exit %d, want 0\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	if doc.Summary["OK"] != 5 || len(doc.Envs) != 5 {
		t.Fatalf("summary %v over %d envs, want 5 OK", doc.Summary, len(doc.Envs))
	}
	host, _ := os.Hostname()
	for _, b := range f.boxes {
		t.Run(b.Env, func(t *testing.T) {
			e, ok := doc.env(b.Env)
			if !ok {
				t.Fatalf("%s missing from fleetctl's JSON", b.Env)
			}
			st, err := b.State()
			if err != nil {
				t.Fatal(err)
			}
			// What fleetctl reports is what the box holds: state.json, the binary, the engine.
			checks := []struct {
				what      string
				got, want any
			}{
				{"verdict", e.Verdict, "OK"},
				{"reasons", len(e.Reasons), 0},
				{"applied sha = state.json", e.AppliedSha, st.AppliedSha},
				{"applied sha = desired", e.AppliedSha, shas[b.Env]},
				{"desired sha", e.DesiredSha, shas[b.Env]},
				{"agent version = the binary's", e.AgentVersion, oldVersion},
				{"transport", e.Transport, "system"},
				{"hostname", e.Hostname, host},
				{"mesh hostname", e.MeshHostname, host},
				{"mesh online", e.MeshOnline != nil && *e.MeshOnline, true},
				{"site", e.Site, "demo"},
				{"checked in", e.LastCheckinAt != nil, true},
				{"role attributes", slices.Equal(e.RoleAttributes, ziti.RequiredAttributes()), true},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
				}
			}
			// The agent's own last result: the healthy heartbeat converge waited for.
			if e.LastResult != st.LastResult || e.LastResult != protocol.ResultHealthy {
				t.Errorf("last result %q, state.json %q, want both %q", e.LastResult, st.LastResult, protocol.ResultHealthy)
			}
			checkFacts(t, f, b.Env, e, st, filepath.Join(b.Dir, "state"))
			cs := itest.Containers(t, b.Project)
			if len(cs) != 2 {
				t.Fatalf("%d containers in %s, want web and worker", len(cs), b.Project)
			}
			for _, c := range cs {
				if c.State != "running" || c.Health != "healthy" || !strings.HasPrefix(c.Image, f.w.Registry.Addr+"/") {
					t.Errorf("container %s: %s/%s from %s", c.Name, c.State, c.Health, c.Image)
				}
			}
			got, err := itest.AppGet(t, b.Project+"-web-1", "/env?name=GREETING")
			if err != nil || got != "hello from "+b.Env {
				t.Errorf("web's GREETING = %q (%v): the secret did not come from this env's OpenBao path", got, err)
			}
		})
	}
}

// checkFacts: token_ttl_s, disk_free_bytes and docker_version, as fleetctl and tenancy show
// them, are what the agent sent at its last check-in, and that agrees with the box's real
// state: its state.json, OpenBao's own view of its token, the free space on docker's data-root
// and the engine's version.
func checkFacts(t *testing.T, f *fleet, env string, e statusEnv, st *state.State, stateDir string) {
	t.Helper()
	var last *tenancytest.CheckinRecord
	for _, c := range f.w.Stack.Tenancy.Checkins(env) {
		if c.Status == 200 {
			last = &c
		}
	}
	if last == nil {
		t.Fatal("tenancy recorded no successful check-in")
	}
	req := last.Request

	// docker_version: fleetctl's table has no column for it; tenancy holds what was sent.
	if req.DockerVersion == "" || req.DockerVersion != st.DockerVersion || req.DockerVersion != f.w.Docker {
		t.Errorf("docker_version: check-in %q, state.json %q, engine %q", req.DockerVersion, st.DockerVersion, f.w.Docker)
	}

	// token_ttl_s: what the lease token had left at the check-in, by state.json's clock and by
	// OpenBao's.
	if e.TokenTTLS == nil || req.TokenTTLSec == nil || *e.TokenTTLS != *req.TokenTTLSec {
		t.Errorf("token_ttl_s: fleetctl %v, check-in %v", deref(e.TokenTTLS), deref(req.TokenTTLSec))
	} else if tok := st.Token; tok == nil || tok.TTLSec <= 0 {
		t.Errorf("state.json has no token TTL: %+v", tok)
	} else {
		ttl := *e.TokenTTLS
		want := tok.TTLSec - int64(last.At.Sub(tok.ObtainedAt)/time.Second)
		if ttl <= 0 || ttl > tok.TTLSec || abs(ttl-want) > 2 {
			t.Errorf("token_ttl_s %d, want %d ± 2 (state.json: ttl %d s obtained %s; check-in at %s)", ttl, want, tok.TTLSec, tok.ObtainedAt, last.At)
		}
		baoTTL := tokenTTL(t, f.w.Stack.Bao.Addr(), stateDir)
		sinceCheckin := int64(time.Since(last.At) / time.Second)
		// The agent counts the TTL from when it sent the login, so it may say a little less than
		// OpenBao (the login's round trip), never more; 5 s of slack each way covers a loaded
		// machine (the TTL is computed before the check-in is sent, and every figure here is
		// cut to whole seconds).
		if got := int64(baoTTL / time.Second); got > ttl+5 || got < ttl-sinceCheckin-5 {
			t.Errorf("OpenBao says the token has %d s left; the check-in %d s ago said %d s", got, sinceCheckin, ttl)
		}
	}

	// disk_free_bytes: the free space on docker's data-root, measured here and now.
	if e.DiskFreeBytes == nil || req.DiskFreeBytes == nil || *e.DiskFreeBytes != *req.DiskFreeBytes {
		t.Errorf("disk_free_bytes: fleetctl %v, check-in %v", deref(e.DiskFreeBytes), deref(req.DiskFreeBytes))
	} else if st.DockerRootDir == "" {
		t.Error("state.json has no docker_root_dir")
	} else {
		var fs syscall.Statfs_t
		if err := syscall.Statfs(st.DockerRootDir, &fs); err != nil {
			t.Fatal(err)
		}
		now := int64(fs.Bavail) * fs.Bsize
		slack := max(int64(1<<30), now/20) // other work on the machine writes too
		if got := *e.DiskFreeBytes; got <= 0 || abs(got-now) > slack {
			t.Errorf("disk_free_bytes %d, but %s has %d bytes free now", got, st.DockerRootDir, now)
		}
	}
}

// tokenTTL asks OpenBao (lookup-self) what the agent's token in stateDir/bao.token has left.
func tokenTTL(t *testing.T, addr, stateDir string) time.Duration {
	t.Helper()
	tok, err := token.Read(filepath.Join(stateDir, "bao.token"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.DefaultConfig()
	cfg.Address = addr
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(tok.Reveal())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	self, err := c.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		t.Fatalf("OpenBao lookup-self with the agent's token: %v", err)
	}
	ttl, err := self.TokenTTL()
	if err != nil {
		t.Fatal(err)
	}
	return ttl
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// TestSilentAgentOnALiveHost: an agent stops ticking while its host stays on the mesh; fleetctl
// says SILENT once its last check-in is older than 3 intervals — not before — with the next
// step, exits 1, and the gate blocks on it.
func TestSilentAgentOnALiveHost(t *testing.T) {
	// 3 s: the agents that keep ticking stay two intervals clear of stale even when a loaded
	// machine slows a tick.
	const interval = 3 * time.Second
	stale := 3 * interval
	f := newFleet(t, "silent", 3, interval)
	f.converge()
	if _, r := f.status("--stale", stale.String()); r.Exit != 0 {
		t.Fatalf("before: fleetctl status exit %d\n%s", r.Exit, r.Stdout)
	}

	silent := f.boxes[1]
	f.w.Stack.SetOnline(silent.Env, true)
	silent.Stop()

	// Watch fleetctl's own reading (tenancy's clock) until the verdict flips.
	type seen struct {
		verdict string
		age     int64
	}
	var history []seen
	var last statusEnv
	var exit int
	deadline := time.Now().Add(stale + time.Minute)
	poll := time.NewTicker(500 * time.Millisecond) // reading fleetctl, as an operator's --watch would
	defer poll.Stop()
	for {
		doc, r := f.status("--stale", stale.String())
		e, _ := doc.env(silent.Env)
		if e.CheckinAgeS == nil {
			t.Fatalf("%s has no check-in age: %+v", silent.Env, e)
		}
		history = append(history, seen{e.Verdict, *e.CheckinAgeS})
		last, exit = e, r.Exit
		if e.Verdict == "SILENT" {
			for _, other := range doc.Envs {
				if other.EnvID != silent.Env && other.Verdict != "OK" {
					t.Errorf("%s is %s while its agent ticks on", other.EnvID, other.Verdict)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never SILENT: %v", history)
		}
		<-poll.C
	}

	staleS := int64(stale / time.Second)
	for _, h := range history[:len(history)-1] {
		if h.verdict != "OK" || h.age > staleS {
			t.Errorf("before SILENT: %s at age %ds (stale after %ds): %v", h.verdict, h.age, staleS, history)
		}
	}
	// SILENT exactly when the age passes 3 intervals (a poll or two of slack).
	if first := history[len(history)-1]; first.age <= staleS || first.age > staleS+3 {
		t.Errorf("SILENT at age %ds, want just past %ds: %v", first.age, staleS, history)
	}
	if exit != 1 {
		t.Errorf("fleetctl status exit %d with a SILENT env, want 1", exit)
	}
	if last.MeshOnline == nil || !*last.MeshOnline {
		t.Error("the silent env's host is not online on the mesh")
	}
	if !strings.Contains(last.NextStep, "systemctl enable --now monky-deployd.timer") || !strings.Contains(last.NextStep, oldVersion) {
		t.Errorf("next step %q: want the timer fix and the version it last ran", last.NextStep)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g := f.fleetctl(ctx, "gate", "--stale", stale.String())
	if g.Exit != 1 || !strings.Contains(g.Stdout, silent.Env) || !strings.Contains(g.Stdout, "SILENT") {
		t.Errorf("gate: exit %d, want 1 naming %s SILENT\n%s\n%s", g.Exit, silent.Env, g.Stdout, g.Stderr)
	}
	for _, b := range f.boxes {
		if b != silent && strings.Contains(g.Stdout, b.Env) {
			t.Errorf("gate lists %s, whose agent is fine\n%s", b.Env, g.Stdout)
		}
	}
	g = f.fleetctl(ctx, "gate", "--stale", stale.String(), "--allow", silent.Env)
	if g.Exit != 0 {
		t.Errorf("gate --allow %s: exit %d, want 0\n%s", silent.Env, g.Exit, g.Stdout)
	}
}

// TestUpgradeGate: agents restarted with a binary reporting a new version. `fleetctl gate
// --expect-version` lists the one that never checks in with it, and passes once every agent has.
func TestUpgradeGate(t *testing.T) {
	const interval = 2 * time.Second
	f := newFleet(t, "upgrade", 3, interval)
	f.converge()
	laggard := f.boxes[2]

	// gate starts (its first reading fixes "since the gate started"), then the upgrade happens.
	runGate := func(wait time.Duration, upgrade ...int) (exit int, out string) {
		t.Helper()
		polls := f.w.Stack.Admin.Polls()
		ctx, cancel := context.WithTimeout(context.Background(), wait+time.Minute)
		defer cancel()
		type result struct {
			exit     int
			out, err string
		}
		done := make(chan result, 1)
		go func() {
			r, err := f.w.Fleetctl.Run(ctx, "gate", "--expect-version", newVersion, "--wait", wait.String(), "--poll", "1s")
			if err != nil {
				done <- result{exit: -1, err: err.Error()}
				return
			}
			done <- result{r.Exit, r.Stdout, r.Stderr}
		}()
		for f.w.Stack.Admin.Polls() == polls {
			select {
			case r := <-done:
				t.Fatalf("gate ended before the upgrade: exit %d\n%s%s", r.exit, r.out, r.err)
			case <-time.After(50 * time.Millisecond):
			}
		}
		for _, i := range upgrade {
			f.boxes[i].SetBin(f.bins.agent[newVersion])
		}
		r := <-done
		if r.exit < 0 {
			t.Fatal(r.err)
		}
		return r.exit, r.out + r.err
	}

	t.Run("a laggard never checks in with the new version", func(t *testing.T) {
		exit, out := runGate(4*interval, 0, 1)
		if exit != 1 || !strings.Contains(out, laggard.Env) {
			t.Fatalf("gate exit %d, want 1 listing %s\n%s", exit, laggard.Env, out)
		}
		// The verdict's table and summary; the wait's progress lines ("gate: 3 envs not yet on
		// 0.2.1: waiting for …") name every box it waited for, upgraded ones too.
		var verdict []string
		for _, l := range strings.Split(out, "\n") {
			if !strings.Contains(l, "waiting for") {
				verdict = append(verdict, l)
			}
		}
		for _, b := range f.boxes[:2] {
			if strings.Contains(strings.Join(verdict, "\n"), b.Env) {
				t.Errorf("gate lists %s, which runs %s\n%s", b.Env, newVersion, out)
			}
		}
		if !strings.Contains(out, "waiting for "+laggard.Env) {
			t.Errorf("the wait never said whom it waited for\n%s", out)
		}
	})

	t.Run("passes once every agent has checked in with it", func(t *testing.T) {
		exit, out := runGate(time.Minute, 2)
		if exit != 0 {
			f.fatalWithJournals("gate exit %d, want 0\n%s", exit, out)
		}
		doc, r := f.status()
		if r.Exit != 0 {
			t.Errorf("status after the upgrade: exit %d\n%s", r.Exit, r.Stdout)
		}
		for _, e := range doc.Envs {
			if e.AgentVersion != newVersion || e.UpgradedFrom == nil || *e.UpgradedFrom != oldVersion {
				t.Errorf("%s: version %q upgraded from %v, want %s from %s", e.EnvID, e.AgentVersion, e.UpgradedFrom, newVersion, oldVersion)
			}
		}
	})
}

// TestKitReissue: `fleetctl onboard --reissue` supersedes the old grant. The running agent gets
// 401; with the new kit's bootstrap.jwt where its config says, it bootstraps again in the same
// tick; without one it exits 1 asking for the kit.
func TestKitReissue(t *testing.T) {
	f := newFleet(t, "kit", 2, 5*time.Second)
	f.converge()
	for _, b := range f.boxes {
		b.Stop() // ticks are run one by one below
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	unauthorized := func(env string) int {
		n := 0
		for _, c := range f.w.Stack.Tenancy.Checkins(env) {
			if c.Status == 401 {
				n++
			}
		}
		return n
	}

	t.Run("new bootstrap.jwt on disk: re-bootstrap in the same tick", func(t *testing.T) {
		b := f.boxes[0]
		if _, err := os.Stat(b.BootstrapFile); !os.IsNotExist(err) {
			t.Fatalf("the first kit's grant is still at %s after the first login (%v)", b.BootstrapFile, err)
		}
		if _, err := f.w.Fleetctl.Onboard(ctx, b.Env, "demo", f.w.Kits, true); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(b.BootstrapFile); err != nil {
			t.Fatalf("the reissued kit has no grant where the box reads it: %v", err)
		}
		before := unauthorized(b.Env)
		tk, err := b.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Exit != 0 {
			t.Fatalf("tick exit %d, want 0\n%s", tk.Exit, tk.Output)
		}
		if unauthorized(b.Env) != before+1 {
			t.Errorf("tenancy answered %d check-ins 401, want exactly one more", unauthorized(b.Env)-before)
		}
		for _, want := range []string{"AGENT_UNAUTHENTICATED", "bootstrap login ok"} {
			if !strings.Contains(tk.Output, want) {
				t.Errorf("journal lacks %q:\n%s", want, tk.Output)
			}
		}
		if _, err := os.Stat(b.BootstrapFile); !os.IsNotExist(err) {
			t.Errorf("the new grant was not deleted after the login: %v", err)
		}
		if a, _ := f.w.Stack.Tenancy.AdminAgent(b.Env); a.LastResult != protocol.ResultHealthy {
			t.Errorf("after the re-bootstrap: last result %q, want a healthy heartbeat", a.LastResult)
		}
		if tk, _ := b.Tick(ctx); tk.Exit != 0 || strings.Contains(tk.Output, "AGENT_UNAUTHENTICATED") {
			t.Errorf("next tick: exit %d\n%s", tk.Exit, tk.Output)
		}
	})

	t.Run("no bootstrap.jwt: exit 1 asking for the kit", func(t *testing.T) {
		b := f.boxes[1]
		// The operator reissued, but the kit went elsewhere: never to the box.
		elsewhere := filepath.Join(t.TempDir(), "kits")
		if _, err := f.w.Fleetctl.Onboard(ctx, b.Env, "demo", elsewhere, true); err != nil {
			t.Fatal(err)
		}
		before := unauthorized(b.Env)
		tk, err := b.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Exit != 1 || !strings.Contains(tk.Output, "re-run the install kit") {
			t.Fatalf("tick exit %d, want 1 asking to re-run the install kit\n%s", tk.Exit, tk.Output)
		}
		if unauthorized(b.Env) != before+1 {
			t.Errorf("tenancy answered %d check-ins 401, want one", unauthorized(b.Env)-before)
		}
		// Handing the box the new kit's grant brings it back.
		grant, err := os.ReadFile(filepath.Join(elsewhere, b.Env, "bootstrap.jwt"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.BootstrapFile, grant, 0o600); err != nil {
			t.Fatal(err)
		}
		if tk, _ := b.Tick(ctx); tk.Exit != 0 {
			t.Errorf("with the new kit's grant: exit %d\n%s", tk.Exit, tk.Output)
		}
	})
}

// TestHoldAndApplyWindowInFleetctl: a hold set on one box with the real binary and an apply
// window closed on another reach fleetctl only through what the agents check in: fleetctl status
// says HELD (who, why, until) and DEFERRED (until the window), not DRIFT; gate names both as
// blockers, apart from failures; unhold lets the held box apply.
func TestHoldAndApplyWindowInFleetctl(t *testing.T) {
	f := newFleet(t, "wait", 2, 3*time.Second)
	f.converge()
	for _, b := range f.boxes {
		b.Stop() // ticks by hand from here
	}
	held, windowed := f.boxes[0], f.boxes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	cmd := exec.CommandContext(ctx, held.Bin(), "--config", held.ConfigPath, "hold", "--reason", "e2e: db migration by hand", "--for", "2h")
	cmd.Env = append(os.Environ(), "SUDO_USER=e2e-op", "HOME="+filepath.Join(held.Dir, "home"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hold: %v\n%s", err, out)
	}
	// A window on the day after tomorrow (UTC): closed now, opening at that day's midnight.
	now := time.Now().UTC()
	day := now.AddDate(0, 0, 2)
	opens := time.Date(day.Year(), day.Month(), day.Day(), 0, 0, 0, 0, time.UTC)
	cfg, err := os.OpenFile(windowed.ConfigPath, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(cfg, "apply_windows: [\"%s 00:00-00:01\"]\napply_windows_tz: UTC\n", opens.Weekday().String()[:3])
	cfg.Close()

	files, err := devstack.Example(devstack.Examples(), "hello", f.w.Params)
	if err != nil {
		t.Fatal(err)
	}
	files["docker-compose.yml"] += "# release 2\n"
	for _, b := range f.boxes {
		f.w.Stack.SetDesired(b.Env, files)
		for range 2 { // the second check-in carries what the first tick decided
			if tk, err := b.Tick(ctx); err != nil || tk.Exit != 0 {
				t.Fatalf("%s tick: exit %d %v\n%s", b.Env, tk.Exit, err, tk.Output)
			}
		}
	}

	doc, r := f.status()
	if r.Exit != 1 {
		t.Errorf("fleetctl status exit %d with a held and a deferred env, want 1", r.Exit)
	}
	h, _ := doc.env(held.Env)
	if h.Verdict != "HELD" || h.Hold == nil || h.Hold.By != "e2e-op" || h.Hold.Reason != "e2e: db migration by hand" ||
		!strings.Contains(h.NextStep, "held by e2e-op until") || !strings.Contains(h.NextStep, "monky-deployd unhold") {
		t.Errorf("held env: %s %+v %q", h.Verdict, h.Hold, h.NextStep)
	}
	d, _ := doc.env(windowed.Env)
	if d.Verdict != "DEFERRED" || d.DeferredUntil == nil || *d.DeferredUntil != opens.Format(time.RFC3339) {
		t.Errorf("deferred env: %s %v %q", d.Verdict, d.DeferredUntil, d.NextStep)
	}
	for _, e := range []statusEnv{h, d} {
		if e.AppliedSha == e.DesiredSha {
			t.Errorf("%s applied its new release while it should wait", e.EnvID)
		}
	}
	g := f.fleetctl(ctx, "gate")
	for _, want := range []string{held.Env, windowed.Env, "HELD", "DEFERRED", "1 held by a human", "1 deferred to an apply window"} {
		if !strings.Contains(g.Stdout, want) {
			t.Errorf("gate output lacks %q (exit %d)\n%s", want, g.Exit, g.Stdout)
		}
	}
	if g.Exit != 1 {
		t.Errorf("gate exit %d, want 1", g.Exit)
	}

	cmd = exec.CommandContext(ctx, held.Bin(), "--config", held.ConfigPath, "unhold")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("unhold: %v\n%s", err, out)
	}
	if tk, err := held.Tick(ctx); err != nil || tk.Exit != 0 {
		t.Fatalf("tick after unhold: exit %d %v\n%s", tk.Exit, err, tk.Output)
	}
	doc, _ = f.status()
	if e, _ := doc.env(held.Env); e.AppliedSha != e.DesiredSha || e.Hold != nil {
		t.Errorf("after unhold: applied %s desired %s hold %+v", e.AppliedSha, e.DesiredSha, e.Hold)
	}
}
