//go:build integration

package itest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

// The parts Require knows.
const (
	PartDocker   = "docker"   // a docker CLI whose engine answers
	PartCompose  = "compose"  // docker compose v2 from a SYSTEM plugin dir (seen with an empty DOCKER_CONFIG)
	PartRegistry = "registry" // Debian's /usr/bin/docker-registry
	PartBao      = "bao"      // an OpenBao server binary (MONKY_BAO_BIN, else scripts/build-bao.sh)
	PartGo       = "go"       // the go command, to build the test app
	PartZiti     = "ziti"     // the OpenZiti CLI (MONKY_ZITI_BIN, else scripts/build-ziti.sh)
	// Debian's prometheus and prometheus-node-exporter packages (scripts/prometheus-deps.sh).
	PartPromtool     = "promtool"      // /usr/bin/promtool
	PartPrometheus   = "prometheus"    // /usr/bin/prometheus
	PartNodeExporter = "node-exporter" // /usr/bin/prometheus-node-exporter
)

// Where Debian's packages put the Prometheus binaries.
const (
	PromtoolBin     = "/usr/bin/promtool"
	PrometheusBin   = "/usr/bin/prometheus"
	NodeExporterBin = "/usr/bin/prometheus-node-exporter"
)

// registryBin is where Debian's docker-registry package puts the CNCF registry 2.8.
const registryBin = "/usr/bin/docker-registry"

// environment is everything this package reads from the process environment, read in one place.
type environment struct {
	ci     bool   // CI set (InCI): missing parts fail instead of skipping
	baoBin string // MONKY_BAO_BIN: a prebuilt bao binary, instead of running scripts/build-bao.sh
	// zitiBin is MONKY_ZITI_BIN: a prebuilt ziti binary, instead of running scripts/build-ziti.sh.
	zitiBin string
}

var env = sync.OnceValue(func() environment {
	return environment{
		ci:      InCI(os.Getenv("CI")),
		baoBin:  os.Getenv("MONKY_BAO_BIN"),
		zitiBin: os.Getenv("MONKY_ZITI_BIN"),
	}
})

// Require stops the test unless every named part (PartDocker, PartCompose, …) is usable:
// t.Fatal when the tests run in CI (InCI of $CI), t.Skip otherwise. An unknown part name is a
// t.Fatal everywhere. Probes run once per test process; their results are shared.
func Require(t testing.TB, parts ...string) {
	t.Helper()
	require(t, env().ci, parts...)
}

func require(t testing.TB, ci bool, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if _, err := probe(p); err != nil {
			missingIn(t, ci, p, err)
		}
	}
}

// missing is where a missing part becomes a skip or, in CI, a failure.
func missing(t testing.TB, part string, err error) {
	t.Helper()
	missingIn(t, env().ci, part, err)
}

func missingIn(t testing.TB, ci bool, part string, err error) {
	t.Helper()
	if errors.Is(err, errUnknownPart) {
		t.Fatalf("itest: %v", err)
	}
	unavailableIn(t, ci, fmt.Sprintf("itest: part %q missing: %v (run scripts/integration-setup.sh and scripts/prometheus-deps.sh)", part, err))
}

var errUnknownPart = errors.New("unknown part")

type probeResult struct {
	once sync.Once
	val  string
	err  error
}

var (
	probeMu    sync.Mutex // guards the map only: a probe may probe another part
	probeCache = map[string]*probeResult{}
)

func probeFunc(part string) func() (string, error) {
	switch part {
	case PartDocker:
		return probeDocker
	case PartCompose:
		return probeCompose
	case PartRegistry:
		return func() (string, error) { return probeExecutable(registryBin) }
	case PartBao:
		return probeBao
	case PartGo:
		return func() (string, error) { return exec.LookPath("go") }
	case PartPromtool:
		return func() (string, error) { return probeExecutable(PromtoolBin) }
	case PartPrometheus:
		return func() (string, error) { return probeExecutable(PrometheusBin) }
	case PartNodeExporter:
		return func() (string, error) { return probeExecutable(NodeExporterBin) }
	case PartZiti:
		return probeZiti
	}
	return nil
}

// probe checks a part once per process and returns what later steps need (a binary path, a
// version).
func probe(part string) (string, error) {
	probeMu.Lock()
	r, ok := probeCache[part]
	if !ok {
		if probeFunc(part) == nil {
			probeMu.Unlock()
			return "", fmt.Errorf("%w %q (known: docker, compose, registry, bao, go, promtool, prometheus, node-exporter, ziti)", errUnknownPart, part)
		}
		r = &probeResult{}
		probeCache[part] = r
	}
	probeMu.Unlock()
	r.once.Do(func() {
		if f := probeFunc(part); f != nil {
			r.val, r.err = f()
		}
	})
	return r.val, r.err
}

func probeExecutable(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", path)
	}
	return path, nil
}

func probeDocker() (string, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runDocker(ctx, "", nil, "version", "--format", "{{.Server.Version}}")
	if err != nil {
		return "", fmt.Errorf("docker engine does not answer: %w", err)
	}
	return strings.TrimSpace(out), nil
}

// probeCompose looks for compose the way the agent will: with DOCKER_CONFIG on an empty
// directory, which hides every per-user plugin (~/.docker/cli-plugins). Only a plugin in a
// system directory survives that, and a test that found compose any other way would pass on a
// machine where the agent cannot deploy. It returns "<version> <plugin path>".
func probeCompose() (string, error) {
	if _, err := probe(PartDocker); err != nil {
		return "", err
	}
	empty, err := os.MkdirTemp("", "itest-docker-config-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(empty)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runDocker(ctx, empty, nil, "info", "--format",
		`{{range .ClientInfo.Plugins}}{{if eq .Name "compose"}}{{.Version}} {{.Path}}{{end}}{{end}}`)
	if err != nil {
		return "", fmt.Errorf("docker info with an empty DOCKER_CONFIG: %w", err)
	}
	version, path, _ := strings.Cut(strings.TrimSpace(out), " ")
	version = strings.TrimPrefix(version, "v")
	switch {
	case path == "":
		return "", errors.New("no compose plugin visible with an empty DOCKER_CONFIG (install it in a system plugin dir)")
	case !strings.HasPrefix(version, "2."):
		return "", fmt.Errorf("compose plugin %s reports %q, want v2", path, version)
	}
	return version + " " + path, nil
}

func probeBao() (string, error) { return probeBuilt(env().baoBin, "build-bao.sh") }

func probeZiti() (string, error) { return probeBuilt(env().zitiBin, "build-ziti.sh") }

// probeBuilt returns the prebuilt binary at override when set, else the path scripts/<script>
// prints.
func probeBuilt(override, script string) (string, error) {
	if override != "" {
		return probeExecutable(override)
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	// The script is the one place that knows where the binary is cached; when nothing is cached
	// it builds the tool (minutes), which integration-setup.sh does ahead of the tests.
	cmd := exec.Command(filepath.Join(root, "scripts", script))
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("scripts/%s: %w: %s", script, err, clip.Tail(strings.TrimSpace(stderr.String()), 2000))
	}
	return probeExecutable(strings.TrimSpace(string(out)))
}

// moduleRoot finds the directory holding this module's go.mod, walking up from the working
// directory (the package directory under `go test`, whichever package imports itest).
var moduleRoot = sync.OnceValues(func() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module "+modulePath+"\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
})

const modulePath = "scm.tikali.ai/tikali/applications/monky/monky-deployd"

// runDocker runs the docker CLI (dockercli.Run): dockerConfig, when set, becomes DOCKER_CONFIG,
// so no test ever reads or writes root's ~/.docker.
func runDocker(ctx context.Context, dockerConfig string, stdin []byte, args ...string) (string, error) {
	return dockercli.Run(ctx, dockerConfig, stdin, args...)
}

// httpStatus is the status of GET url.
func httpStatus(ctx context.Context, url string) (int, error) { return process.HTTPStatus(ctx, url) }

// docker is runDocker for test bodies: a failure ends the test.
func docker(t testing.TB, dockerConfig string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := runDocker(ctx, dockerConfig, nil, args...)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return out
}

func firstWords(args []string, n int) string { return dockercli.FirstWords(args, n) }

// randomHex returns n random bytes as hex: user names, passwords, tokens, project names.
func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}

// BaoBin returns the OpenBao server binary (MONKY_BAO_BIN, else the path scripts/build-bao.sh
// prints), or stops the test as Require does when there is none.
func BaoBin(t testing.TB) string {
	t.Helper()
	bin, err := probe(PartBao)
	if err != nil {
		missing(t, PartBao, err)
	}
	return bin
}

// RegistryBin is the registry binary Require(PartRegistry) checks.
const RegistryBin = registryBin

// ModuleRoot returns the directory of this module's go.mod, or fails the test.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return root
}
