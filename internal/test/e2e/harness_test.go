//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/appimage"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// The versions the agent is built as: the release, and the "upgrade".
const (
	oldVersion = "0.2.0"
	newVersion = "0.2.1"
)

const module = "scm.tikali.ai/tikali/applications/monky/monky-deployd"

// binaries are built once per test process into buildDir, removed by TestMain.
type binaries struct {
	agent    map[string]string // version → monky-deployd
	fleetctl string
	app      string
}

var (
	buildDir  string
	buildOnce sync.Once
	built     binaries
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func goBuild(root, out, ldflags, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// build makes the agent twice (oldVersion, newVersion: the same code, another version linked
// in — what an upgrade changes as far as fleetctl can see), fleetctl and the demo app.
func build(t testing.TB) binaries {
	t.Helper()
	itest.Require(t, itest.PartGo)
	root := itest.ModuleRoot(t)
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "monky-e2e-bin-"); buildErr != nil {
			return
		}
		built = binaries{agent: map[string]string{}, fleetctl: filepath.Join(buildDir, "fleetctl"), app: filepath.Join(buildDir, "demoapp")}
		for _, v := range []string{oldVersion, newVersion} {
			out := filepath.Join(buildDir, "monky-deployd-"+v)
			if buildErr = goBuild(root, out, "-X "+module+"/internal/shared/version.Version="+v, "./cmd/deployd"); buildErr != nil {
				return
			}
			built.agent[v] = out
		}
		if buildErr = goBuild(root, built.fleetctl, "-X "+module+"/internal/shared/version.Version="+oldVersion, "./cmd/fleetctl"); buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		buildErr = appimage.BuildApp(ctx, root, built.app, "1")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// fleet is a world with n boxes onboarded through `fleetctl onboard`, not yet ticking.
type fleet struct {
	t     testing.TB
	w     *devstack.World
	bins  binaries
	envs  []string
	boxes []*devstack.Box
}

// newFleet starts the dev stack with the real OpenBao and registry, and n boxes named
// env-<name>-01…, their agents checking in every interval. Everything is removed at the end of
// the test; a leftover fails it.
func newFleet(t testing.TB, name string, n int, interval time.Duration) *fleet {
	t.Helper()
	itest.Require(t, itest.PartDocker, itest.PartCompose, itest.PartRegistry, itest.PartBao, itest.PartGo)
	bins := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, err := devstack.NewWorld(ctx, devstack.WorldOptions{
		Dir: t.TempDir(), AgentBin: bins.agent[oldVersion], FleetctlBin: bins.fleetctl, AppBin: bins.app,
		BaoBin: itest.BaoBin(t), RegistryBin: itest.RegistryBin, Interval: interval, PackageVersion: oldVersion,
		ImageTag: name + ":1",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := w.Close(ctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	if w.Docker == "" || w.Registry == nil {
		t.Fatalf("the world has no docker engine (%v) or no registry: the parts Require checked are not used", w.DockerErr)
	}
	f := &fleet{t: t, w: w, bins: bins}
	for i := 1; i <= n; i++ {
		env := fmt.Sprintf("env-%s-%02d", name, i)
		b, err := w.AddBox(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		f.envs = append(f.envs, env)
		f.boxes = append(f.boxes, b)
	}
	return f
}

// converge deploys the hello example to every env, starts every box ticking and waits until
// each has applied it.
func (f *fleet) converge() map[string]string {
	f.t.Helper()
	shas := map[string]string{}
	for _, env := range f.envs {
		sha, err := f.w.Deploy(env, "hello")
		if err != nil {
			f.t.Fatal(err)
		}
		shas[env] = sha
	}
	for _, b := range f.boxes {
		b.Start(context.Background())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	outs, err := f.w.WaitReports(ctx, f.envs, nil)
	if err != nil {
		f.fatalWithJournals("%v", err)
	}
	for _, o := range outs {
		if !o.Converged() {
			f.fatalWithJournals("%s did not converge: %s: %s", o.Env, o.Report.Result, o.Report.Detail)
		}
	}
	// A check-in starts a tick, and an apply's tick is long: only once every agent has also
	// sent a heartbeat is each one's last check-in as recent as its interval.
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for _, env := range f.envs {
		for {
			if r, ok := f.w.Stack.Tenancy.LastReport(env); ok && r.Result == protocol.ResultHealthy {
				break
			}
			select {
			case <-ctx.Done():
				f.fatalWithJournals("%s applied but sent no healthy heartbeat: %v", env, ctx.Err())
			case <-poll.C:
			}
		}
	}
	return shas
}

func (f *fleet) fatalWithJournals(format string, args ...any) {
	f.t.Helper()
	var b strings.Builder
	for _, box := range f.boxes {
		fmt.Fprintf(&b, "\n=== journal of %s\n%s", box.Env, clip.Tail(box.Journal(), 3000))
	}
	f.t.Fatalf(format+"%s", append(args, b.String())...)
}

// statusEnv is one element of `fleetctl status -o json`, decoded with the type that writes it
// (report's golden file pins the JSON names, so the test need not spell them again).
type statusEnv = report.Env

// statusDoc is `fleetctl status -o json` (schema 1), with a lookup by env.
type statusDoc struct{ report.Document }

func (d statusDoc) env(id string) (statusEnv, bool) {
	for _, e := range d.Envs {
		if e.EnvID == id {
			return e, true
		}
	}
	return statusEnv{}, false
}

// fleetctl runs the fleetctl binary against the stack; a run that could not start fails the test.
func (f *fleet) fleetctl(ctx context.Context, args ...string) devstack.Result {
	f.t.Helper()
	r, err := f.w.Fleetctl.Run(ctx, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// status runs `fleetctl status -o json args…` and decodes it.
func (f *fleet) status(args ...string) (statusDoc, devstack.Result) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := f.fleetctl(ctx, append([]string{"status", "-o", "json"}, args...)...)
	var doc statusDoc
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
		f.t.Fatalf("fleetctl status -o json (exit %d): %v\n%s\n%s", r.Exit, err, r.Stdout, r.Stderr)
	}
	if doc.Schema != 1 {
		f.t.Fatalf("status schema %d, want 1", doc.Schema)
	}
	return doc, r
}
