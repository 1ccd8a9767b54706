package demo

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDockerWithoutCompose is a docker CLI whose engine answers but which has no compose plugin,
// in the real CLI's words; fakeDockerCompose1 one whose compose is v1.
const (
	fakeDockerWithoutCompose = `#!/bin/sh
case "$*" in
  "info --format {{json .}}") echo '{"ServerVersion": "29.0.1", "DockerRootDir": "/var/lib/docker"}' ;;
  "context inspect --format {{.Endpoints.docker.Host}}") echo "tcp://127.0.0.1:2375" ;;
  compose*) echo "docker: 'compose' is not a docker command." >&2; echo "See 'docker --help'" >&2; exit 1 ;;
  *) echo "fake docker: unexpected: $*" >&2; exit 1 ;;
esac
`
	fakeDockerCompose1 = `#!/bin/sh
case "$*" in
  "info --format {{json .}}") echo '{"ServerVersion": "20.10.24", "DockerRootDir": "/var/lib/docker"}' ;;
  "context inspect --format {{.Endpoints.docker.Host}}") echo "tcp://127.0.0.1:2375" ;;
  "compose version --short") echo "1.29.2" ;;
  *) echo "fake docker: unexpected: $*" >&2; exit 1 ;;
esac
`
	fakeDockerNoEngine = `#!/bin/sh
echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
exit 1
`
)

// pathWith puts a docker CLI made of script first on a PATH of nothing else: the machine's own
// docker and compose plugin are out of reach.
func pathWith(t *testing.T, script string) {
	t.Helper()
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("DOCKER_HOST", "")
}

// On a machine whose docker has no compose v2 the demo stops at once, before it builds a
// control plane, with the fix: where a Debian box gets compose v2.
func TestPreflightStopsWithoutComposeV2(t *testing.T) {
	for _, tc := range []struct{ name, script, detail string }{
		{"no plugin", fakeDockerWithoutCompose, "`docker compose` does not exist"},
		{"compose v1", fakeDockerCompose1, "is compose v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pathWith(t, tc.script)
			dir := t.TempDir()
			var out bytes.Buffer
			engine, err := Preflight(context.Background(), dir, &out)
			if err == nil || !engine {
				t.Fatalf("Preflight = %v, %v; want an error with the engine up\n%s", engine, err, out.String())
			}
			for _, want := range []string{tc.detail, "docker-compose-plugin from Docker's apt repository", "Debian's own docker-compose on releases that ship v2"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			if !strings.Contains(out.String(), "OK   docker ") || !strings.Contains(out.String(), "FAIL compose ") {
				t.Errorf("doctor's lines:\n%s", out.String())
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("the preflight left %v", ents)
			}
			// Run stops there too, having started nothing and printed no step of the demo.
			out.Reset()
			if err := Run(context.Background(), Options{Dir: dir, Stdout: &out}); err == nil || !strings.Contains(err.Error(), "docker-compose-plugin") {
				t.Fatalf("Run = %v\n%s", err, out.String())
			}
			if strings.Contains(out.String(), "onboarding") || strings.Contains(out.String(), "cleaning up") {
				t.Errorf("Run went past the preflight:\n%s", out.String())
			}
		})
	}
}

// No engine at all is the demo's documented fallback: the preflight says so and lets it run.
func TestPreflightWithoutAnEngineLetsTheDemoRun(t *testing.T) {
	pathWith(t, fakeDockerNoEngine)
	var out bytes.Buffer
	engine, err := Preflight(context.Background(), t.TempDir(), &out)
	if err != nil || engine {
		t.Fatalf("Preflight = %v, %v\n%s", engine, err, out.String())
	}
	for _, want := range []string{"FAIL docker ", "systemctl enable --now docker", "the demo runs without one"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
