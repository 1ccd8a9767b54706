//go:build integration

package e2e

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/devstack/demo"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/itest"
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

// TestDemo: the demo with the docker engine, the registry and the real OpenBao catches the
// silent and the refused box, and leaves no container, network, volume or image behind.
func TestDemo(t *testing.T) {
	itest.Require(t, itest.PartDocker, itest.PartCompose, itest.PartRegistry, itest.PartBao, itest.PartGo)
	out := runDemo(t, demo.Options{BaoBin: itest.BaoBin(t), RegistryBin: itest.RegistryBin})
	mustContain(t, out,
		`OpenBao dev server \(pid \d+\)`,
		`registry 127\.0\.0\.1:\d+ \(password required\)`,
		`(?m)^5 envs: 5 OK$`, `\(exit 0: every env OK\)`,
		`(?m)^env-demo-03 .* SILENT .* online .*systemctl enable --now monky-deployd\.timer`,
		`(?m)^env-demo-04 .* FAILING .*PRIVILEGED_REFUSED`,
		`(?m)^5 envs: 3 OK, 1 SILENT, 1 FAILING$`, `\(exit 1: something is not OK\)`,
		`the release it ran before is still up: .*healthy.*healthy`,
		`nothing left running`)
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
		if strings.Contains(got, "monky-env-demo-") || strings.Contains(got, "monky-demo/") {
			t.Errorf("left behind (docker %s):\n%s", strings.Join(what[:2], " "), got)
		}
	}
}

// TestDemoWithoutDocker: with no engine (DOCKER_HOST pointing nowhere) the demo says so, the
// agents report that they cannot deploy, and fleetctl still catches the silent and the refused
// box. OpenBao is the in-process fake here: the demo's fallback without a bao binary.
func TestDemoWithoutDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	out := runDemo(t, demo.Options{})
	mustContain(t, out,
		`NO docker engine \(docker engine does not answer`,
		`in-process OpenBao fake`,
		`env-demo-01  failed .*Cannot connect to the Docker daemon`,
		`(?m)^5 envs: 5 FAILING$`,
		`(?m)^env-demo-03 .* SILENT .* online`,
		`(?m)^env-demo-04 .* FAILING .*PRIVILEGED_REFUSED`,
		`without a docker engine every apply failed`,
		`nothing left running`)
}
