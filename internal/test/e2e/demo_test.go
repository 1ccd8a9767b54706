//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/demo"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

// runDemo plays `make demo`'s script (what scripts/demo.sh runs after building) and returns
// its output; afterwards nothing of it may remain.
func runDemo(t *testing.T, o demo.Options) string {
	t.Helper()
	bins := build(t)
	o.Dir, o.AgentBin, o.FleetctlBin, o.AppBin, o.Interval = t.TempDir(), bins.agent[oldVersion], bins.fleetctl, bins.app, 3*time.Second
	var out bytes.Buffer
	o.Stdout = &out
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := demo.Run(ctx, o); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	if ents, _ := os.ReadDir(o.Dir); len(ents) != 0 {
		t.Errorf("the demo's directory is not empty: %v", ents)
	}
	// The ziti quickstart (--home), the proxies and the agents (--config) name the directory.
	if ps := procsNaming(o.Dir); len(ps) > 0 {
		t.Errorf("processes left running: %v", ps)
	}
	return out.String()
}

func mustContain(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !regexp.MustCompile(w).MatchString(out) {
			t.Errorf("demo output lacks %q", w)
		}
	}
}

// TestDemo: the demo with the docker engine, the registry, the real OpenBao and the real
// OpenZiti controller and router — every agent on the mesh through its own proxy, fleetctl
// reading the controller's management API — catches the silent box (its proxy keeps it online)
// and the refused one, and leaves no container, network, volume, image or process behind.
func TestDemo(t *testing.T) {
	itest.Require(t, itest.PartDocker, itest.PartCompose, itest.PartRegistry, itest.PartBao, itest.PartGo, itest.PartPrometheus, itest.PartZiti)
	out := runDemo(t, demo.Options{BaoBin: itest.BaoBin(t), ZitiBin: itest.ZitiBin(t), RegistryBin: itest.RegistryBin,
		RulesFile: filepath.Join(itest.ModuleRoot(t), "packaging", "prometheus", "monky-deployd.rules.yml")})
	mustContain(t, out,
		`ziti controller: real \(ziti v\d+\.\d+\.\d+ quickstart at https://127\.0\.0\.1:\d+\)`,
		`onboarding 5 boxes with .fleetctl onboard --transport proxy.`,
		`(?m)^   env-demo-03  kit written; identity monky-host\.env-demo-03 \(#monky-deploy-agent, #openbao-client\) made on the controller .* proxy pid \d+`,
		`env-demo-03  its timer stops .* its proxy \(pid \d+\) keeps the host on the mesh`,
		`OpenBao dev server \(pid \d+\)`,
		`registry 127\.0\.0\.1:\d+ \(password required\)`,
		`(?m)^5 envs: 5 OK$`, `\(exit 0: every env OK\)`,
		`(?m)^env-demo-03 .* SILENT .*systemctl status monky-deployd\.timer on the box`,
		`env-demo-03  SILENT: mesh online, .*systemctl enable --now monky-deployd\.timer`,
		`(?m)^env-demo-04 .* FAILING .*PRIVILEGED_REFUSED`,
		`(?m)^5 envs: 3 OK, 1 SILENT, 1 FAILING$`, `\(exit 1: something is not OK\)`,
		`the release it ran before is still up: .*healthy.*healthy`,
		`fleetctl exporter --stale \S+: the same verdicts as Prometheus series, http://127\.0\.0\.1:\d+/metrics`,
		`monky_fleet_envs\{verdict="[A-Z_]+"\} \d`,
		`ALERT MonkyAgentSilent firing \(pending since \S+\)  env=env-demo-03 site=\S+ severity=critical`,
		`summary: env-demo-03: agent silent on a live host: fleetctl describe env-demo-03 gives the next step`,
		`nothing left running`)
	checkNothingLeft(t, "", "monky-env-demo-")
}

// checkNothingLeft: no container, network or volume of a compose project whose name starts with
// projectPrefix and no image of the demo (…monky-demo/hello) is on the engine; when dir is set, no
// process names dir in its argv (the agents' --config, OpenBao's and the registry's config files
// live there) and dir is empty.
func checkNothingLeft(t *testing.T, dir, projectPrefix string) {
	t.Helper()
	ctx := context.Background()
	for _, what := range [][]string{
		{"ps", "-a", "--filter", "label=" + dockercli.ProjectLabel, "--format", `{{.Label "com.docker.compose.project"}}`},
		{"network", "ls", "--format", "{{.Name}}"},
		{"volume", "ls", "--format", "{{.Name}}"},
		{"image", "ls", "--format", "{{.Repository}}"},
	} {
		got, err := dockercli.Run(ctx, "", nil, what...)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(got, projectPrefix) || demoImage(got) {
			t.Errorf("left behind (docker %s):\n%s", strings.Join(what[:2], " "), got)
		}
	}
	if dir == "" {
		return
	}
	if ps := procsNaming(dir); len(ps) > 0 {
		t.Errorf("processes left running: %v", ps)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
		t.Errorf("the directory %s is not empty (%v): %v", dir, err, ents)
	}
}

// demoImage reports whether a line of `docker image ls --format {{.Repository}}` is the demo's
// app image (devstack's default tag, hello, pushed to the run's registry or built locally). Only
// that one: the packaging module's box tests, which CI runs beside these, build theirs from the
// same dev stack as monky-demo/boxtest-…, and the other suites have images of their own.
func demoImage(repositories string) bool {
	for _, repo := range strings.Fields(repositories) {
		if repo == "monky-demo/hello" || strings.HasSuffix(repo, "/monky-demo/hello") {
			return true
		}
	}
	return false
}

// procsNaming lists the processes (pid: argv) whose argv contains dir.
func procsNaming(dir string) []string {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		if pid == strconv.Itoa(os.Getpid()) {
			continue
		}
		out = append(out, pid+": "+strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " "))
	}
	return out
}

// waitOutput polls out until re matches, failing the test when done closes first or the wait
// runs out.
func waitOutput(t *testing.T, out *syncbuf.Buffer, re *regexp.Regexp, done <-chan error, wait time.Duration) []string {
	t.Helper()
	deadline := time.After(wait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case err := <-done:
			t.Fatalf("ended before %q: %v\n%s", re, err, out.String())
		case <-deadline:
			t.Fatalf("no %q after %s:\n%s", re, wait, out.String())
		case <-tick.C:
		}
	}
}

// runningDemo is a demo (Run or Serve) started in the background by startDemo.
type runningDemo struct {
	bins   binaries
	dir    string
	out    *syncbuf.Buffer
	cancel context.CancelFunc // the Ctrl-C
	done   chan error         // what the demo returned
}

// startDemo builds the binaries and starts run (demo.Run or demo.Serve) with boxes agents (0:
// the demo's default) ticking every 2 s, on the real OpenZiti controller; the test ends it with
// cancel.
func startDemo(t *testing.T, run func(context.Context, demo.Options) error, boxes int) runningDemo {
	t.Helper()
	itest.Require(t, itest.PartDocker, itest.PartCompose, itest.PartRegistry, itest.PartBao, itest.PartGo, itest.PartZiti)
	d := runningDemo{bins: build(t), dir: t.TempDir(), out: &syncbuf.Buffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	d.cancel = cancel
	opts := demo.Options{Dir: d.dir, Boxes: boxes, AgentBin: d.bins.agent[oldVersion], FleetctlBin: d.bins.fleetctl,
		AppBin: d.bins.app, BaoBin: itest.BaoBin(t), ZitiBin: itest.ZitiBin(t), RegistryBin: itest.RegistryBin,
		Interval: 2 * time.Second, Stdout: d.out}
	go func() { d.done <- run(ctx, opts) }()
	return d
}

// TestDemoInterrupted: Ctrl-C once the agents have converged (the demo is between its steps,
// its agents ticking) — the demo stops, and nothing of it is left: no container, network,
// volume or image, no process, nothing in its directory.
func TestDemoInterrupted(t *testing.T) {
	d := startDemo(t, demo.Run, 0)
	dir, out, cancel, done := d.dir, d.out, d.cancel, d.done
	waitOutput(t, out, regexp.MustCompile(`\$ fleetctl status\n`), done, 5*time.Minute)
	// The check below must be able to see something: the demo's processes name its directory.
	if ps := procsNaming(dir); len(ps) < 8 {
		t.Fatalf("the running demo shows %d processes naming %s, want OpenBao, the registry, the ziti quickstart and the proxies at least: %v", len(ps), dir, ps)
	}
	if running, _ := dockercli.Run(context.Background(), "", nil, "ps", "-q", "--filter", "label="+dockercli.ProjectLabel+"=monky-env-demo-01"); strings.TrimSpace(running) == "" {
		t.Fatal("no container of env-demo-01 runs before the interrupt: the check below would prove nothing")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("interrupted demo returned %v, want context.Canceled", err)
		}
	case <-time.After(4 * time.Minute):
		t.Fatalf("the demo did not end within 4 min of the interrupt:\n%s", out.String())
	}
	t.Log("\n" + out.String())
	if !strings.Contains(out.String(), "nothing left running") {
		t.Errorf("the demo's cleanup did not say it finished")
	}
	checkNothingLeft(t, dir, "monky-env-demo-")
}

// TestServe: the long-running dev stack (`go run ./internal/dev/cmd/devstack`) starts its
// agents, which deploy and report — read through the fleetctl command it prints — and a Ctrl-C
// stops and removes everything.
func TestServe(t *testing.T) {
	d := startDemo(t, demo.Serve, 2)
	bins, dir, out, cancel, done := d.bins, d.dir, d.out, d.cancel, d.done
	m := waitOutput(t, out, regexp.MustCompile(`try:\s+(\S+) --config (\S+) status`), done, 3*time.Minute)
	fleetctl, cfg := m[1], m[2]
	if fleetctl != bins.fleetctl {
		t.Errorf("Serve prints fleetctl %s, want %s", fleetctl, bins.fleetctl)
	}
	// Both agents report through tenancy, as fleetctl reads it.
	deadline := time.Now().Add(4 * time.Minute)
	for {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		raw, _ := exec.CommandContext(cctx, fleetctl, "--config", cfg, "status", "-o", "json").Output()
		ccancel()
		var doc statusDoc
		converged := 0
		if json.Unmarshal(raw, &doc) == nil {
			for _, env := range []string{"env-dev-01", "env-dev-02"} {
				if e, ok := doc.env(env); ok && (e.LastResult == protocol.ResultApplied || e.LastResult == protocol.ResultHealthy) {
					converged++
				}
			}
		}
		if converged == 2 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Serve ended on its own: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agents never reported applied:\n%s\n%s", raw, out.String())
		}
		time.Sleep(time.Second)
	}
	if ps := procsNaming(dir); len(ps) < 5 {
		t.Fatalf("Serve shows %d processes naming %s, want OpenBao, the registry, the ziti quickstart and 2 proxies at least: %v", len(ps), dir, ps)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve after Ctrl-C: %v", err)
		}
	case <-time.After(4 * time.Minute):
		t.Fatalf("Serve did not end within 4 min of the interrupt:\n%s", out.String())
	}
	t.Log("\n" + out.String())
	checkNothingLeft(t, dir, "monky-env-dev-")
}

// TestDemoWithoutDocker: with no engine the demo says so, the agents report that they cannot
// deploy, and fleetctl still catches the silent and the refused box. OpenBao is the in-process
// fake here: the demo's fallback without a bao binary.
//
// No engine is the real docker CLI, first on PATH, pointed at a socket nobody serves: the agents
// give docker an explicit environment without DOCKER_HOST (an operator's must not pick the
// engine of a tick), so the variable alone would only blind the demo, not its agents.
func TestDemoWithoutDocker(t *testing.T) {
	real, err := exec.LookPath("docker")
	if err != nil {
		itest.Unavailable(t, "docker CLI: "+err.Error())
	}
	bin := t.TempDir()
	wrapper := "#!/bin/sh\nDOCKER_HOST=unix:///nonexistent/docker.sock exec " + real + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	out := runDemo(t, demo.Options{})
	mustContain(t, out,
		`NO docker engine \(docker engine does not answer`,
		`ziti controller: fake \(no ziti binary`,
		`in-process OpenBao fake`,
		`env-demo-01  failed .*Cannot connect to the Docker daemon`,
		`(?m)^5 envs: 5 FAILING$`,
		`(?m)^env-demo-03 .* SILENT `,
		`env-demo-03  SILENT: mesh online`,
		`(?m)^env-demo-04 .* FAILING .*PRIVILEGED_REFUSED`,
		`without a docker engine every apply failed`,
		`nothing left running`)
}

func TestDemoImage(t *testing.T) {
	for list, want := range map[string]bool{
		"127.0.0.1:40135/monky-demo/hello\n<none>\n":                          true,
		"monky-demo/hello\n":                                                  true,
		"127.0.0.1:43925/monky-demo/boxtest-fd0ba3\nmonky-deployd-test/app\n": false,
		"<none>\nmonky-box\n127.0.0.1:35739/app\n":                            false,
		"127.0.0.1:1/monky-demo/hello-world\n":                                false,
		"":                                                                    false,
	} {
		if got := demoImage(list); got != want {
			t.Errorf("demoImage(%q) = %v, want %v", list, got, want)
		}
	}
}
