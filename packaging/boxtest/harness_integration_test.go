//go:build integration

package boxtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/appimage"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/baodev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debpkg"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/pkgtest"
)

const module = "scm.tikali.ai/tikali/applications/monky/monky-deployd"

// interval is the timer's period on the boxes (timerDropIn) and the check-in interval tenancy
// hands out. The shipped 60 s would make every "within two intervals" wait minutes long.
const interval = 10 * time.Second

// timerDropIn shortens the shipped timer for the tests: only its timing changes (no random
// delay, so the waits below can be bounded). Unit, service, hardening and enablement are the
// package's own. One empty assignment resets EVERY monotonic trigger of the unit (OnBootSec and
// OnUnitActiveSec alike), so it comes once, before both: a second reset would drop the first
// trigger set and leave the timer without a first elapse. In a container OnBootSec counts from
// the container's start.
const timerDropIn = `[Timer]
OnBootSec=
OnBootSec=3s
OnUnitActiveSec=10s
RandomizedDelaySec=0
`

// deployToken is the deploy token install.sh sends the test's package registry.
var deployToken = "box-deploy-token-" + randomHex(8)

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// missing fails the test in CI and skips it elsewhere, like itest.Require.
func missing(t testing.TB, why string) {
	t.Helper()
	pkgtest.Missing(t, why+" (run scripts/integration-setup.sh)")
}

// artifacts are built once per test binary.
type artifacts struct {
	dir       string
	version   string // VERSION: the release under test
	deb       string // make deb's agent package of it
	fleetDeb  string // make deb's monky-fleetctl
	installSh string // make deb's dist/install.sh (version stamped)
	next      string // a later version of the same code, for ours → ours upgrades
	nextDeb   string
	old020Deb string // release 0.2.0's single package, built from its own tree
	old018Deb string // the Python package whose prerm disabled the timer (stand-in)
	fleetctl  string
	agent     string
	app       string // the demo app, static
	image     string // the box image
}

var (
	buildOnce sync.Once
	built     artifacts
	buildErr  error
)

// The world (dev stack, registry, app image) is shared by the package's tests: each test
// onboards its own env into it. TestMain closes it.
var (
	worldOnce sync.Once
	world     *devstack.World
	worldDir  string
	worldErr  error
	// bao is OpenBao as a box reaches it: https://bao.box.test:PORT, a TLS front (its CA in
	// baoCAPEM, installed with install.sh --bao-ca) to the dev server on loopback.
	bao      *httptest.Server
	baoAddr  string
	baoCAPEM []byte
)

// baoName is OpenBao's name for the boxes; they resolve it to loopback.
const baoName = "bao.box.test"

func TestMain(m *testing.M) {
	code := m.Run()
	if bao != nil {
		bao.Close()
	}
	if world != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		if err := world.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "boxtest: closing the dev stack: %v\n", err)
			code = 1
		}
		cancel()
	}
	if worldDir != "" {
		os.RemoveAll(worldDir)
	}
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func run(dir string, env []string, name string, args ...string) (string, error) {
	return pkgtest.Run(dir, env, name, args...)
}

// nextVersion is VERSION with its patch number one higher ("0.2.0" → "0.2.1").
func nextVersion(v string) (string, error) {
	core, _, _ := strings.Cut(v, "-")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("VERSION %q is not major.minor.patch", v)
	}
	patch, err := strconv.Atoi(parts[2])
	if err != nil {
		return "", fmt.Errorf("VERSION %q: %w", v, err)
	}
	return fmt.Sprintf("%s.%s.%d", parts[0], parts[1], patch+1), nil
}

// requireParts stops the test unless docker, compose, the registry, OpenBao, go and the box
// image are there; it returns the box image.
func requireParts(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "the box tests run as root (docker socket, dpkg -i of packages built here)")
	}
	itest.Require(t, itest.PartDocker, itest.PartCompose, itest.PartRegistry, itest.PartBao, itest.PartGo)
	root := itest.ModuleRoot(t)
	out, err := run(root, os.Environ(), filepath.Join(root, "scripts", "build-box-image.sh"), "--print-name", "--no-build")
	image := strings.TrimSpace(out)
	if err != nil {
		missing(t, fmt.Sprintf("the box image %s is not built (scripts/build-box-image.sh)", image))
	}
	return image
}

func build(t *testing.T) artifacts {
	t.Helper()
	image := requireParts(t)
	root := itest.ModuleRoot(t)
	buildOnce.Do(func() {
		built.image = image
		if built.dir, buildErr = os.MkdirTemp("", "monky-boxtest-"); buildErr != nil {
			return
		}
		v, err := os.ReadFile(filepath.Join(root, "VERSION"))
		if err != nil {
			buildErr = err
			return
		}
		built.version = strings.TrimSpace(string(v))
		dist := filepath.Join(built.dir, "dist")
		if out, err := run(root, os.Environ(), "make", "-f", "packaging/packaging.mk", "deb", "PKG_DIST="+dist); err != nil {
			buildErr = fmt.Errorf("make deb: %v\n%s", err, out)
			return
		}
		built.deb = filepath.Join(dist, fmt.Sprintf("monky-deployd_%s_amd64.deb", built.version))
		built.fleetDeb = filepath.Join(dist, fmt.Sprintf("monky-fleetctl_%s_amd64.deb", built.version))
		built.installSh = filepath.Join(dist, "install.sh")
		built.agent = filepath.Join(dist, "bin", "monky-deployd")
		built.fleetctl = filepath.Join(dist, "bin", "fleetctl")

		// The next version: the same code with another version linked in, packaged the same way.
		if built.next, buildErr = nextVersion(built.version); buildErr != nil {
			return
		}
		nextBin := filepath.Join(built.dir, "monky-deployd-"+built.next)
		env := append(os.Environ(), "CGO_ENABLED=0")
		if out, err := run(root, env, "go", "build", "-trimpath", "-ldflags",
			"-s -w -X "+module+"/internal/shared/version.Version="+built.next, "-o", nextBin, "./cmd/deployd"); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/deployd %s: %v\n%s", built.next, err, out)
			return
		}
		goEnv := func(name string) string {
			out, _ := run("", nil, "go", "env", name)
			return strings.TrimSpace(out)
		}
		next, err := debpkg.Build(debpkg.Options{Version: built.next, DeploydBin: nextBin, FleetctlBin: built.fleetctl,
			PackagingDir: filepath.Join(root, "packaging"), ModCache: goEnv("GOMODCACHE"), GoRoot: goEnv("GOROOT")}, filepath.Join(built.dir, "next"))
		if err != nil {
			buildErr = err
			return
		}
		built.nextDeb = next.Agent
		if built.old020Deb, buildErr = pkgtest.ReleasePackage(root, pkgtest.Release020, "0.2.0"); buildErr != nil {
			return
		}
		if built.old018Deb, buildErr = oldPackage(root, built.dir, "0.1.8"); buildErr != nil {
			return
		}
		built.app = filepath.Join(built.dir, "demoapp")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		buildErr = appimage.BuildApp(ctx, root, built.app, "1")
	})
	if buildErr != nil {
		t.Fatalf("building the packages: %v", buildErr)
	}
	return built
}

// oldPackage builds the stand-in of the Python agent's package (shared with the chroot tests):
// units under /lib/systemd/system, a prerm that — in 0.1.8 — disables the timer on every call,
// upgrades included.
func oldPackage(root, dir, version string) (string, error) {
	return pkgtest.OldPackage(root, dir, version)
}

// theWorld is the dev stack the boxes check in with: real OpenBao, the registry with auth, the
// demo app's image pushed there, tenancy handing out interval, kits carrying tenancy's port on
// loopback (the box resolves monky.tenancy.deploy to 127.0.0.1).
func theWorld(t *testing.T) *devstack.World {
	t.Helper()
	a := build(t)
	worldOnce.Do(func() {
		dir, err := os.MkdirTemp("", "monky-boxtest-world-")
		if err != nil {
			worldErr = err
			return
		}
		worldDir = dir
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		world, worldErr = devstack.NewWorld(ctx, devstack.WorldOptions{
			Dir: dir, AgentBin: a.agent, FleetctlBin: a.fleetctl, AppBin: a.app, BaoBin: itest.BaoBin(t),
			RegistryBin: itest.RegistryBin, Interval: interval, PackageVersion: a.version,
			ImageTag: "boxtest-" + randomHex(3) + ":1", Site: "box",
		})
		if worldErr != nil {
			return
		}
		if world.Registry == nil {
			worldErr = errors.New("the dev stack started no registry although Require found one")
			return
		}
		u, err := url.Parse(world.Stack.Tenancy.URL)
		if err != nil {
			worldErr = err
			return
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			worldErr = fmt.Errorf("tenancy URL %s: %w", world.Stack.Tenancy.URL, err)
			return
		}
		// A kit names an https OpenBao (fleetctl accepts no other), as production's does: a TLS
		// front with its own CA, which install.sh installs with --bao-ca.
		if bao, baoCAPEM, worldErr = tlsFront(world.Stack.Bao.Addr()); worldErr != nil {
			return
		}
		baoAddr = "https://" + net.JoinHostPort(baoName, strconv.Itoa(bao.Listener.Addr().(*net.TCPAddr).Port))
		world.Stack.Admin.SetKitDefaults(admintest.KitDefaults{
			PackageVersion: a.version, TenancyService: tenancyName, TenancyPort: port,
			BaoAddr: baoAddr, BaoAuthMount: baodev.AuthMount, BaoRole: baodev.Role,
		})
	})
	if worldErr != nil {
		t.Fatalf("the dev stack: %v", worldErr)
	}
	return world
}

// tenancyName is the intercept name of tenancy's agent API; the box resolves it to loopback.
const tenancyName = "monky.tenancy.deploy"

// newEnv onboards a fresh env (its kit in world.Kits/<env>) and removes its compose project from
// the host's engine at the end of the test.
func newEnv(t *testing.T, w *devstack.World, name string) string {
	t.Helper()
	env := "env-box" + name + "-" + randomHex(3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Onboard(ctx, env); err != nil {
		t.Fatal(err)
	}
	// Tenancy hands out the address the boxes reach OpenBao at.
	w.Stack.Tenancy.SetVault(env, protocol.Vault{Addr: baoAddr, Mount: baodev.KVMount, Prefix: env + "/see",
		AuthMount: baodev.AuthMount, AuthRole: baodev.Role})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if left, err := dockercli.RemoveProject(ctx, "monky-"+env); err != nil {
			t.Errorf("removing compose project monky-%s: %v (left: %v)", env, err, left)
		}
	})
	return env
}

// packageServer is the GitLab generic package registry as install.sh and the role see it:
// BASE/<version>/<file>, answered only with the deploy token.
type packageServer struct {
	srv   *httptest.Server
	mu    sync.Mutex
	files map[string]string // "/<version>/<file>" → local path
	hits  []string
}

func newPackageServer(t *testing.T, a artifacts) *packageServer {
	t.Helper()
	p := &packageServer{files: map[string]string{
		"/" + a.version + "/install.sh":                   a.installSh,
		"/" + a.version + "/" + filepath.Base(a.deb):      a.deb,
		"/" + a.version + "/" + filepath.Base(a.fleetDeb): a.fleetDeb,
		"/" + a.next + "/" + filepath.Base(a.nextDeb):     a.nextDeb,
	}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.hits = append(p.hits, r.URL.Path)
		src, ok := p.files[r.URL.Path]
		p.mu.Unlock()
		if r.Header.Get("DEPLOY-TOKEN") != deployToken {
			http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
			return
		}
		if !ok {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, src)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *packageServer) base() string { return p.srv.URL }

// box is one container running systemd, on the host's network and Docker engine.
type box struct {
	t    *testing.T
	name string
}

// boxOptions take away what newBox gives a box by default.
type boxOptions struct {
	// noDockerGroup: no group docker at all (docker installed after the agent, or never): the
	// agent's account cannot use the host's socket until one appears.
	noDockerGroup bool
	// noTunnellerUnit: the tunneller's binary (its enroll) without its systemd unit.
	noTunnellerUnit bool
}

// newBox starts a box from the image, waits for systemd to be up, and gives it what a Debian
// server running Docker has: the docker CLI and compose plugin (the host's static ones), a
// docker group with the host socket's gid, and the tunneller's stand-ins (see the package doc).
func newBox(t *testing.T, a artifacts) *box {
	t.Helper()
	return newBoxWith(t, a, boxOptions{})
}

// newBoxWith is newBox without what o takes away.
func newBoxWith(t *testing.T, a artifacts, o boxOptions) *box {
	t.Helper()
	b := &box{t: t, name: "monky-boxtest-" + randomHex(4)}
	dockerBin, composeBin := hostDockerCLI(t)
	gid := socketGID(t)
	// CAP_SYS_ADMIN and CAP_SYS_PTRACE: systemd as PID 1 of a host has both; without them
	// (docker's default set) the exporter's unit fails at spawn: DynamicUser= with 226/NAMESPACE,
	// PrivateUsers= with 217/USER, and PrivateUsers= with ProtectProc=invisible with 217/USER
	// "No such file or directory" (the user namespace is set up after /proc is remounted hidden,
	// and only CAP_SYS_PTRACE sees through it). With both, the box runs the units as a host does.
	args := []string{"run", "-d", "--name", b.name, "--network", "host", "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE",
		"--add-host", tenancyName + ":127.0.0.1", "--add-host", baoName + ":127.0.0.1",
		"--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
		"-v", "/var/run/docker.sock:/var/run/docker.sock", a.image}
	if out, err := b.docker(args...); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := b.exec("journalctl", "--no-pager", "-n", "120", "-u", "monky-deployd.service",
				"-u", "monky-deployd.timer", "-u", "monky-deployd-proxy.service", "-u", "fleetctl-exporter.service")
			t.Logf("the box's journal (last lines of the agent's units):\n%s", out)
		}
		if out, err := b.docker("rm", "-f", "-v", b.name); err != nil {
			t.Errorf("docker rm %s: %v\n%s", b.name, err, out)
		}
	})
	b.waitRunning()
	b.cp(dockerBin, "/usr/local/bin/docker")
	b.sh("install -d -m 0755 /usr/local/lib/docker/cli-plugins")
	b.cp(composeBin, "/usr/local/lib/docker/cli-plugins/docker-compose")
	standin := filepath.Join(itest.ModuleRoot(t), "packaging", "debtest", "testdata", "standins", "ziti-edge-tunnel")
	b.cp(standin, "/usr/local/bin/ziti-edge-tunnel")
	// The tunneller's package ships a unit, which install.sh try-restarts and the role's handler
	// restarts after an enrolment; the stand-in's only keeps a process up.
	if !o.noTunnellerUnit {
		b.write("/etc/systemd/system/ziti-edge-tunnel.service",
			"[Unit]\nDescription=ziti-edge-tunnel stand-in\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n")
	}
	if !o.noDockerGroup {
		b.sh(dockerGroupAdd(gid))
	}
	b.write("/etc/systemd/system/monky-deployd.timer.d/boxtest-interval.conf", timerDropIn)
	if o.noTunnellerUnit {
		b.sh("systemctl daemon-reload")
	} else {
		b.sh("systemctl daemon-reload && systemctl enable --now ziti-edge-tunnel.service")
	}
	if out := b.sh("getent hosts " + tenancyName); !strings.HasPrefix(out, "127.0.0.1") {
		t.Fatalf("the box resolves %s to %q, want 127.0.0.1", tenancyName, out)
	}
	// As root (the socket's owner): the engine answers whatever the groups.
	if out := b.sh("docker version --format '{{.Server.Version}}' && docker compose version"); !strings.Contains(out, "v2.") {
		t.Fatalf("the box cannot reach the host's engine with compose v2:\n%s", out)
	}
	return b
}

// hostDockerCLI returns the host's docker CLI and compose plugin, both static (they run in the
// box as they are).
func hostDockerCLI(t *testing.T) (dockerBin, composeBin string) {
	t.Helper()
	p, err := exec.LookPath("docker")
	if err != nil {
		missing(t, "no docker CLI")
	}
	if dockerBin, err = filepath.EvalSymlinks(p); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	out, err := run("", append(os.Environ(), "DOCKER_CONFIG="+empty), "docker", "info", "--format",
		`{{range .ClientInfo.Plugins}}{{if eq .Name "compose"}}{{.Path}}{{end}}{{end}}`)
	if err != nil || strings.TrimSpace(out) == "" {
		missing(t, fmt.Sprintf("no compose plugin in a system plugin dir: %v %s", err, out))
	}
	if composeBin, err = filepath.EvalSymlinks(strings.TrimSpace(out)); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{dockerBin, composeBin} {
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: %v", bin, err)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				f.Close()
				missing(t, bin+" is dynamically linked: the box needs a static docker CLI and compose plugin")
			}
		}
		f.Close()
	}
	return dockerBin, composeBin
}

// dockerGroupAdd is the command that makes group docker with the host socket's gid. -o: that gid
// may already be some group of the box (messagebus, systemd-journal…).
func dockerGroupAdd(gid int) string { return fmt.Sprintf("groupadd -o -g %d docker", gid) }

func socketGID(t *testing.T) int {
	t.Helper()
	out, err := run("", nil, "stat", "-c", "%g", "/var/run/docker.sock")
	if err != nil {
		t.Fatalf("stat /var/run/docker.sock: %v %s", err, out)
	}
	gid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatal(err)
	}
	return gid
}

func (b *box) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return dockercli.Run(ctx, "", nil, args...)
}

// exec runs argv in the box; env names variables passed through from this process (docker exec
// -e NAME: the value never appears in an argv).
func (b *box) execEnv(env []string, argv ...string) (string, error) {
	args := []string{"exec"}
	var vars []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		args = append(args, "-e", name)
		vars = append(vars, kv)
	}
	args = append(append(args, b.name), argv...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = append(os.Environ(), vars...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (b *box) exec(argv ...string) (string, error) { return b.execEnv(nil, argv...) }

// sh runs a bash script in the box and fails the test when it fails.
func (b *box) sh(script string) string {
	b.t.Helper()
	out, err := b.exec("bash", "-c", script)
	if err != nil {
		b.t.Fatalf("in the box: %s: %v\n%s", script, err, out)
	}
	return strings.TrimSpace(out)
}

func (b *box) cp(src, dst string) {
	b.t.Helper()
	if out, err := b.docker("cp", src, b.name+":"+dst); err != nil {
		b.t.Fatalf("docker cp %s: %v\n%s", src, err, out)
	}
}

func (b *box) write(path, content string) {
	b.t.Helper()
	tmp := filepath.Join(b.t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.sh("install -d -m 0755 " + filepath.Dir(path))
	b.cp(tmp, path)
	b.sh("chown root:root " + path + " && chmod 0644 " + path)
}

// waitRunning waits until systemd says the box has booted.
func (b *box) waitRunning() {
	b.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var out string
	for time.Now().Before(deadline) {
		out, _ = b.exec("systemctl", "is-system-running")
		switch strings.TrimSpace(out) {
		case "running":
			return
		case "degraded":
			failed, _ := b.exec("systemctl", "--failed", "--no-legend")
			b.t.Fatalf("the box booted degraded:\n%s", failed)
		}
		time.Sleep(500 * time.Millisecond)
	}
	b.t.Fatalf("systemd in the box did not come up in 90 s: is-system-running says %q", strings.TrimSpace(out))
}

// restart powers the box off hard (systemd as PID 1 ignores SIGTERM: the engine kills it) and
// boots it again; its disk (the container's filesystem) survives, /run does not.
func (b *box) restart() time.Time {
	b.t.Helper()
	if out, err := b.docker("stop", "-t", "1", b.name); err != nil {
		b.t.Fatalf("docker stop: %v\n%s", err, out)
	}
	booted := time.Now()
	if out, err := b.docker("start", b.name); err != nil {
		b.t.Fatalf("docker start: %v\n%s", err, out)
	}
	b.waitRunning()
	return booted
}

// unit returns `systemctl is-enabled` and `is-active` of unit.
func (b *box) unit(unit string) (enabled, active string) {
	e, _ := b.exec("systemctl", "is-enabled", unit)
	a, _ := b.exec("systemctl", "is-active", unit)
	return strings.TrimSpace(e), strings.TrimSpace(a)
}

// installFromKit runs the kit's install command as an operator would paste it, from the kit's
// directory, with two differences a box without the internet needs: the package registry is the
// test's (the URL in the command and MONKY_DEPLOYD_BASE_URL), and there is no sudo (root already).
func (b *box) installFromKit(w *devstack.World, env string, pkgs *packageServer) string {
	b.t.Helper()
	return b.installFromKitEdited(w, env, pkgs, nil)
}

// installFromKitEdited is installFromKit with the command line changed by edit (nil: as it is)
// after the adaptations, as an operator changes an option of the kit's command.
func (b *box) installFromKitEdited(w *devstack.World, env string, pkgs *packageServer, edit func(string) string) string {
	b.t.Helper()
	out, err := b.tryInstallFromKit(w, env, pkgs, edit, nil)
	if err != nil {
		b.t.Fatalf("the kit's install command failed: %v\n%s", err, out)
	}
	return out
}

// tryInstallFromKit runs the kit's install command (see installFromKitEdited) with extraEnv
// ("NAME=value") passed through, and returns its output and error.
func (b *box) tryInstallFromKit(w *devstack.World, env string, pkgs *packageServer, edit func(string) string, extraEnv []string) (string, error) {
	b.t.Helper()
	b.cp(filepath.Join(w.Kits, env), "/root/kit")
	cmdFile, err := os.ReadFile(filepath.Join(w.Kits, env, kit.CommandFile))
	if err != nil {
		b.t.Fatal(err)
	}
	line := strings.TrimSpace(string(cmdFile))
	if !strings.Contains(line, kit.PackageBase) || !strings.Contains(line, "sudo --preserve-env="+kit.TokenVar+" ") {
		b.t.Fatalf("the kit's command is not the shape this test adapts:\n%s", line)
	}
	line = strings.ReplaceAll(line, kit.PackageBase, pkgs.base())
	line = strings.Replace(line, "sudo --preserve-env="+kit.TokenVar+" ", "", 1)
	// OpenBao's CA, as an operator adds it to the kit's command (install.sh --bao-ca).
	b.write("/root/openbao-ca.pem", string(baoCAPEM))
	line += " --bao-ca /root/openbao-ca.pem"
	if edit != nil {
		line = edit(line)
	}
	vars := append([]string{kit.TokenVar + "=" + deployToken, "MONKY_DEPLOYD_BASE_URL=" + pkgs.base()}, extraEnv...)
	out, err := b.execEnv(vars, "bash", "-c", "set -o pipefail; cd /root/kit && "+line)
	if strings.Contains(out, deployToken) {
		b.t.Errorf("install.sh printed the deploy token:\n%s", out)
	}
	return out, err
}

// checkins are env's check-ins tenancy answered 200, in order.
func checkins(w *devstack.World, env string) []tenancytest.CheckinRecord {
	var ok []tenancytest.CheckinRecord
	for _, c := range w.Stack.Tenancy.Checkins(env) {
		if c.Status == http.StatusOK {
			ok = append(ok, c)
		}
	}
	return ok
}

// waitCheckin waits up to within for a check-in of env after since that satisfies match (nil:
// any), and returns it.
func waitCheckin(t *testing.T, w *devstack.World, env string, since time.Time, within time.Duration,
	what string, match func(tenancytest.CheckinRecord) bool) tenancytest.CheckinRecord {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, c := range checkins(w, env) {
			if c.At.After(since) && (match == nil || match(c)) {
				return c
			}
		}
		if time.Now().After(deadline) {
			all := w.Stack.Tenancy.Checkins(env)
			t.Fatalf("no check-in of %s (%s) within %s of %s; tenancy saw %d check-ins in all", env, what, within,
				since.Format(time.TimeOnly), len(all))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// maxGap is the longest time between two consecutive check-ins of env in [from, to] (the bounds
// count as check-ins: a silence at either end is a gap too).
func maxGap(w *devstack.World, env string, from, to time.Time) time.Duration {
	prev, gap := from, time.Duration(0)
	for _, c := range checkins(w, env) {
		if c.At.Before(from) || c.At.After(to) {
			continue
		}
		gap = max(gap, c.At.Sub(prev))
		prev = c.At
	}
	return max(gap, to.Sub(prev))
}

// tlsFront serves target (http://127.0.0.1:PORT) over TLS as baoName, with a fresh CA; it
// returns the server and the CA's PEM.
func tlsFront(target string) (*httptest.Server, []byte, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "boxtest OpenBao CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: baoName},
		DNSNames: []string{baoName}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	srv := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(u))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	return srv, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}
