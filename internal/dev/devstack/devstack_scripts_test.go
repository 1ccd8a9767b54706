package devstack

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// buildBao runs scripts/build-bao.sh with its cache in cache; GO=false makes any attempt to
// build fail at once instead of spending minutes.
func buildBao(t *testing.T, cache string, args ...string) (stdout string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "..", "..", "scripts", "build-bao.sh"), args...)
	cmd.Env = append(os.Environ(), "MONKY_TOOL_CACHE="+cache, "GO=false")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("build-bao.sh: %v", err)
	}
	return strings.TrimSpace(out.String()), code
}

// build-bao.sh alone knows where its binary is cached; the demo asks it (--print-path
// --no-build) instead of spelling the version, so a version bump cannot quietly turn the demo's
// real OpenBao into the fake.
func TestBuildBaoPrintsThePath(t *testing.T) {
	cache := t.TempDir()
	path, code := buildBao(t, cache, "--print-path", "--no-build")
	if code != 1 || filepath.Dir(path) != cache || !strings.HasPrefix(filepath.Base(path), "bao-") {
		t.Fatalf("not built: exit %d, printed %q; want exit 1 and the path in %s", code, path, cache)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Errorf("--no-build left %v in the cache", ents)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--print-path", "--no-build"}, {"--print-path"}, nil} {
		if got, code := buildBao(t, cache, args...); code != 0 || got != path {
			t.Errorf("build-bao.sh %v with the binary cached: exit %d, printed %q; want 0 and %s", args, code, got, path)
		}
	}
	if _, code := buildBao(t, cache, "--print-paht"); code != 2 {
		t.Errorf("a mistyped flag: exit %d, want 2 (usage)", code)
	}

	demo, err := os.ReadFile(filepath.Join("..", "..", "..", "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if regexp.MustCompile(`bao-[0-9]`).Match(demo) || !bytes.Contains(demo, []byte("build-bao.sh --print-path --no-build")) {
		t.Error("scripts/demo.sh spells the cached bao's path instead of asking build-bao.sh --print-path --no-build")
	}
}

// The demo finds ziti as it finds bao — MONKY_ZITI_BIN, else build-ziti.sh's cache, never a
// spelled version — and MONKY_DEMO_ZITI=off keeps the fake whatever is built; with neither (a
// fresh machine) it runs the fake and says so.
func TestDemoScriptFindsZiti(t *testing.T) {
	demo, err := os.ReadFile(filepath.Join("..", "..", "..", "scripts", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MONKY_ZITI_BIN", "build-ziti.sh --print-path --no-build", "MONKY_DEMO_ZITI", `--ziti-bin "$ziti"`} {
		if !bytes.Contains(demo, []byte(want)) {
			t.Errorf("scripts/demo.sh lacks %q", want)
		}
	}
	if regexp.MustCompile(`ziti-[0-9]`).Match(demo) {
		t.Error("scripts/demo.sh spells the cached ziti's path instead of asking build-ziti.sh")
	}
	cmd := exec.Command("bash", "-c", `sed -n '/^case \${MONKY_DEMO_ZITI/,/^esac/p' scripts/demo.sh > "$T/sel.sh"
GO=false; ziti=; MONKY_DEMO_ZITI=off; MONKY_ZITI_BIN=/bin/true; . "$T/sel.sh"; echo "off:[$ziti]"
ziti=; MONKY_DEMO_ZITI=; . "$T/sel.sh"; echo "auto:[$ziti]"
ziti=; MONKY_ZITI_BIN=; MONKY_TOOL_CACHE="$T/empty-cache"; . "$T/sel.sh"; echo "fresh:[$ziti]"
MONKY_DEMO_ZITI=bogus; . "$T/sel.sh"; echo unreachable`)
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "T="+t.TempDir())
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("MONKY_DEMO_ZITI=bogus: %v, want exit 2\n%s", err, out)
	}
	// A fresh machine (no MONKY_ZITI_BIN, nothing in build-ziti.sh's cache): the fake, and the
	// demo says so and how to get the real one.
	for _, want := range []string{"off:[]", "auto:[/bin/true]", "fresh:[]", "no ziti binary built yet (scripts/build-ziti.sh builds one",
		"MONKY_DEMO_ZITI=bogus: want off or auto"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the demo's ziti selection printed no %q:\n%s", want, out)
		}
	}
}

// `make demo` on a machine whose docker has no compose v2 (a PATH whose docker lacks the plugin)
// stops after its preflight, before it builds the agent, with the fix in doctor's words.
func TestDemoScriptStopsWithoutComposeV2(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	fake := "#!/bin/sh\ncase \"$*\" in\n" +
		"  \"info --format {{json .}}\") echo '{\"ServerVersion\": \"29.0.1\", \"DockerRootDir\": \"/var/lib/docker\"}' ;;\n" +
		"  \"context inspect --format {{.Endpoints.docker.Host}}\") echo tcp://127.0.0.1:2375 ;;\n" +
		"  compose*) echo \"docker: 'compose' is not a docker command.\" >&2; exit 1 ;;\n" +
		"  *) exit 1 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join("..", "..", "..", "scripts", "demo.sh"))
	cmd.Env = append(os.Environ(), "PATH="+bin+":/usr/local/bin:/usr/bin:/bin", "GO="+goBin, "DOCKER_HOST=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("demo.sh: %v, want exit 1\n%s", err, out)
	}
	for _, want := range []string{"demo: preflight", "FAIL compose", "docker compose v2 does not", "docker-compose-plugin from Docker's apt repository",
		"Debian's own docker-compose on releases that ship v2"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo.sh output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "building bin/monky-deployd") {
		t.Errorf("demo.sh built the agent before its preflight:\n%s", out)
	}
}
