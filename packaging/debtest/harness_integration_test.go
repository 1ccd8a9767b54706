//go:build integration

package debtest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debpkg"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/pkgtest"
)

// chrootPATH is the PATH maintainer scripts and install.sh see inside the chroot.
const chrootPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// need returns the path of a tool, failing the test in CI (itest.InCI) when it is missing and
// skipping it elsewhere (a developer's machine may lack the tools; CI must not).
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err == nil {
		return p
	}
	missing(t, fmt.Sprintf("%s not found (scripts/packaging-deps.sh installs it)", tool))
	return ""
}

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root (chroot, dpkg --root, file ownership)")
	}
}

func missing(t *testing.T, why string) { t.Helper(); pkgtest.Missing(t, why) }

// repoRoot is the repository root, the agent's module: not the nearest go.mod, which is
// packaging/'s own.
func repoRoot(t *testing.T) string {
	t.Helper()
	return itest.ModuleRoot(t)
}

func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	return pkgtest.Run(dir, env, name, args...)
}

func mustRun(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(t, dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// artifacts are built once per test binary: the make deb output, a previous build of the same
// package, and the Python-era stand-ins.
type artifacts struct {
	dist      string // make deb's output directory
	deb       string // dist/monky-deployd_<VERSION>_amd64.deb
	fleetDeb  string // dist/monky-fleetctl_<VERSION>_amd64.deb
	installSh string // dist/install.sh (version stamped)
	version   string
	prevDeb   string // the agent package at <VERSION>-rc1 (Debian ~rc1): an earlier build of it
	prevFleet string // monky-fleetctl at <VERSION>-rc1
	old020Deb string // release 0.2.0's single package, built from its own tree (pkgtest.Release020)
	old018Deb string // stand-in of the Python package whose prerm disabled the timer
	old019Deb string // stand-in of the Python package with the fixed prerm
	passwdDeb string // provides "passwd": the useradd/groupadd/usermod stand-ins
	err       error
	log       string
}

var (
	buildOnce sync.Once
	logOnce   sync.Once
	built     artifacts
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// build runs `make -f packaging/packaging.mk deb` into a temporary dist, and builds an earlier
// version of the same packages and the Python-era stand-ins.
func build(t *testing.T) artifacts {
	t.Helper()
	need(t, "make")
	root := repoRoot(t)
	buildOnce.Do(func() {
		var log strings.Builder
		defer func() { built.log = log.String() }()
		dir, err := os.MkdirTemp("", "monky-debtest-")
		if err != nil {
			built.err = err
			return
		}
		buildDir = dir
		v, err := os.ReadFile(filepath.Join(root, "VERSION"))
		if err != nil {
			built.err = err
			return
		}
		built.version = strings.TrimSpace(string(v))
		built.dist = filepath.Join(dir, "dist")
		out, err := run(t, root, nil, "make", "-f", "packaging/packaging.mk", "deb", "PKG_DIST="+built.dist)
		log.WriteString(out)
		if err != nil {
			built.err = fmt.Errorf("make deb: %v", err)
			return
		}
		built.deb = filepath.Join(built.dist, fmt.Sprintf("monky-deployd_%s_amd64.deb", built.version))
		built.fleetDeb = filepath.Join(built.dist, fmt.Sprintf("monky-fleetctl_%s_amd64.deb", built.version))
		built.installSh = filepath.Join(built.dist, "install.sh")
		prev, err := debpkg.Build(debpkg.Options{Version: built.version + "-rc1",
			DeploydBin: filepath.Join(built.dist, "bin", "monky-deployd"), FleetctlBin: filepath.Join(built.dist, "bin", "fleetctl"),
			PackagingDir: filepath.Join(root, "packaging"), ModCache: goEnv(t, "GOMODCACHE"), GoRoot: goEnv(t, "GOROOT")}, filepath.Join(dir, "prev"))
		if err != nil {
			built.err = err
			return
		}
		built.prevDeb, built.prevFleet = prev.Agent, prev.Fleet
		if built.old020Deb, err = pkgtest.ReleasePackage(root, pkgtest.Release020, "0.2.0"); err != nil {
			built.err = err
			return
		}
		if built.old018Deb, err = oldPackage(root, dir, "0.1.8"); err != nil {
			built.err = err
			return
		}
		if built.old019Deb, err = oldPackage(root, dir, "0.1.9"); err != nil {
			built.err = err
			return
		}
		built.passwdDeb, built.err = passwdPackage(root, dir)
	})
	logOnce.Do(func() {
		if built.log != "" {
			t.Log(built.log)
		}
	})
	if built.err != nil {
		t.Fatalf("building the packages: %v", built.err)
	}
	return built
}

// goEnv is one `go env` value of the build.
func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := run(t, "", nil, "go", "env", name)
	if err != nil {
		t.Fatalf("go env %s: %v\n%s", name, err, out)
	}
	return strings.TrimSpace(out)
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// oldPackage builds a stand-in of the Python agent's package at version 0.1.8 or 0.1.9.
func oldPackage(root, dir, version string) (string, error) {
	return pkgtest.OldPackage(root, dir, version)
}

// passwdPackage builds the package that satisfies monky-deployd's Depends: passwd inside the
// chroot, carrying the useradd/groupadd/usermod stand-ins.
func passwdPackage(root, dir string) (string, error) {
	sd := filepath.Join(root, "packaging", "debtest", "testdata", "standins")
	var fs []pkgtest.File
	for _, n := range []string{"useradd", "groupadd", "usermod"} {
		fs = append(fs, pkgtest.File{Source: filepath.Join(sd, n), Dest: "/usr/sbin/" + n, Mode: 0o755})
	}
	return pkgtest.Standin{Name: "monky-test-passwd", Version: "1.0.0", Provides: []string{"passwd"}, Files: fs,
		Description: "useradd, groupadd and usermod stand-ins for the packaging tests"}.Build(filepath.Join(dir, "passwd"))
}

// box is a throw-away root: busybox-static for the shell and the small tools, the real dpkg and
// the real deb-systemd-helper and deb-systemd-invoke (with perl) the maintainer scripts call,
// (for install.sh, bash, curl, tar, install and gpg) copied in with their libraries, stand-ins
// for systemctl, getent, logger and friends, and an empty dpkg database.
type box struct {
	t   *testing.T
	dir string
}

type boxOptions struct {
	groups   []string // groups besides root, e.g. docker, ziti
	users    []string // users besides root, each with a group of the same name
	forShell bool     // add bash, curl, tar, install and the install.sh stand-ins
}

func newBox(t *testing.T, o boxOptions) *box {
	t.Helper()
	needRoot(t)
	busybox := need(t, "busybox")
	need(t, "dpkg")
	need(t, "ldd")
	need(t, "chroot")
	dir := t.TempDir()
	b := &box{t: t, dir: dir}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "usr/libexec/standin", "etc/systemd/system",
		"root", "var/lib/dpkg/info", "var/lib/dpkg/updates", "var/log", "run/systemd/system", "tmp"} {
		if err := os.MkdirAll(b.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(b.path("tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	// The character devices scripts redirect to; a chroot has no devtmpfs.
	for _, d := range []struct {
		name         string
		major, minor uint32
	}{{"null", 1, 3}, {"zero", 1, 5}, {"random", 1, 8}, {"urandom", 1, 9}} {
		p := b.path("dev/" + d.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mknod(p, syscall.S_IFCHR|0o666, int(unix.Mkdev(d.major, d.minor))); err != nil {
			t.Fatalf("mknod %s: %v", p, err)
		}
		if err := os.Chmod(p, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	copyFile(t, busybox, b.path("bin/busybox"), 0o755)
	mustRun(t, "", nil, "chroot", dir, "/bin/busybox", "--install", "-s")
	// busybox's dpkg applet knows no --compare-versions: the real one replaces it.
	for _, tool := range []string{"dpkg", "dpkg-deb", "dpkg-query"} {
		b.copyHostBinary(tool, "/usr/bin/"+tool)
	}
	// Debian's own helpers, as the maintainer scripts meet them on a box (init-system-helpers
	// is Essential); they drive the systemctl stand-in below as they drive systemctl.
	b.copyHostBinary("perl", "/usr/bin/perl")
	b.copyTree("/usr/lib/x86_64-linux-gnu/perl-base")
	for _, h := range []string{"deb-systemd-helper", "deb-systemd-invoke"} {
		copyFile(t, need(t, h), b.path("/usr/bin/"+h), 0o755)
	}
	if o.forShell {
		b.copyHostBinary("bash", "/bin/bash")
		b.copyHostBinary("tar", "/bin/tar")
		b.copyHostBinary("install", "/usr/bin/install")
		b.copyHostBinary("curl", "/usr/libexec/standin/curl.real")
		b.copyHostBinary("ldconfig", "/sbin/ldconfig")
		b.copyHostBinary("cmp", "/usr/bin/cmp")
		b.copyHostBinary("dpkg-split", "/usr/bin/dpkg-split")
		b.copyHostBinary("gpg", "/usr/bin/gpg")
		b.copyHostBinary("sha256sum", "/usr/bin/sha256sum")
		b.copyHostBinary("getfacl", "/usr/bin/getfacl")
	}
	standins := filepath.Join(repoRoot(t), "packaging", "debtest", "testdata", "standins")
	place := map[string]string{"systemctl": "/usr/bin/systemctl", "getent": "/usr/bin/getent", "logger": "/usr/bin/logger"}
	if o.forShell {
		for _, n := range []string{"ziti-edge-tunnel", "setfacl", "docker", "apt-get", "curl"} {
			place[n] = "/usr/bin/" + n
		}
	}
	for n, dst := range place {
		b.remove(dst)
		copyFile(t, filepath.Join(standins, n), b.path(dst), 0o755)
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\n"
	group := "root:x:0:\n"
	for i, u := range o.users {
		passwd += fmt.Sprintf("%s:x:%d:%d::/nonexistent:/usr/sbin/nologin\n", u, 900+i, 900+i)
		group += fmt.Sprintf("%s:x:%d:\n", u, 900+i)
	}
	for i, g := range o.groups {
		if !strings.Contains(group, "\n"+g+":") {
			group += fmt.Sprintf("%s:x:%d:\n", g, 950+i)
		}
	}
	b.write("/etc/passwd", passwd, 0o644)
	b.write("/etc/group", group, 0o644)
	b.write("/var/lib/dpkg/status", "", 0o644)
	b.write("/var/lib/dpkg/available", "", 0o644)
	b.dpkg("-i", build(t).passwdDeb)
	b.clearCalls()
	return b
}

// with returns the box bound to a subtest, so its failures stop the subtest, not the parent.
func (b *box) with(t *testing.T) *box { return &box{t: t, dir: b.dir} }

func (b *box) path(p string) string { return filepath.Join(b.dir, p) }

func (b *box) remove(p string) {
	if err := os.RemoveAll(b.path(p)); err != nil {
		b.t.Fatal(err)
	}
}

func (b *box) write(p, content string, mode os.FileMode) {
	b.t.Helper()
	if err := os.MkdirAll(filepath.Dir(b.path(p)), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(b.path(p), []byte(content), mode); err != nil {
		b.t.Fatal(err)
	}
	if err := os.Chmod(b.path(p), mode); err != nil {
		b.t.Fatal(err)
	}
}

func (b *box) read(p string) string {
	b.t.Helper()
	data, err := os.ReadFile(b.path(p))
	if err != nil {
		b.t.Fatal(err)
	}
	return string(data)
}

func (b *box) exists(p string) bool {
	_, err := os.Lstat(b.path(p))
	return err == nil
}

var lddLib = regexp.MustCompile(`(?:=>\s*)?(/\S+)\s+\(0x`)

// copyHostBinary copies a host program and every shared library ldd names into the box.
func (b *box) copyHostBinary(tool, dst string) {
	b.t.Helper()
	src := need(b.t, tool)
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		b.t.Fatal(err)
	}
	b.remove(dst)
	copyFile(b.t, real, b.path(dst), 0o755)
	out, err := run(b.t, "", nil, "ldd", real)
	if err != nil {
		return // a static binary: "not a dynamic executable"
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := lddLib.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		lib := m[1]
		if b.exists(lib) {
			continue
		}
		libReal, err := filepath.EvalSymlinks(lib)
		if err != nil {
			b.t.Fatal(err)
		}
		copyFile(b.t, libReal, b.path(lib), 0o755)
	}
}

// copyTree copies a host directory into the box at the same path (regular files and
// directories; the perl library, for deb-systemd-helper).
func (b *box) copyTree(dir string) {
	b.t.Helper()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(b.path(p), 0o755)
		case d.Type().IsRegular():
			copyFile(b.t, p, b.path(p), 0o644)
		}
		return nil
	})
	if err != nil {
		b.t.Fatalf("copying %s into the box: %v", dir, err)
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func (b *box) env(extra ...string) []string {
	return append([]string{"PATH=" + chrootPATH, "LANG=C", "HOME=/root"}, extra...)
}

// dpkg runs the host's dpkg against the box (--root: maintainer scripts run chrooted in it).
func (b *box) dpkg(args ...string) string {
	b.t.Helper()
	out, err := b.tryDpkg(args...)
	if err != nil {
		b.t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (b *box) tryDpkg(args ...string) (string, error) {
	b.t.Helper()
	return run(b.t, "", b.env(), "dpkg", append([]string{"--root=" + b.dir, "--force-unsafe-io"}, args...)...)
}

// maintscript runs one of the agent package's installed maintainer scripts with args, as dpkg
// runs it (DPKG_MAINTSCRIPT_PACKAGE and _NAME set: deb-systemd-helper refuses to run without).
func (b *box) maintscript(name, args string) (string, error) {
	b.t.Helper()
	return run(b.t, "", b.env("DPKG_MAINTSCRIPT_PACKAGE=monky-deployd", "DPKG_MAINTSCRIPT_NAME="+name),
		"chroot", b.dir, "/bin/sh", "-c", "/var/lib/dpkg/info/monky-deployd."+name+" "+args)
}

// sh runs a command line inside the box with busybox sh.
func (b *box) sh(script string) (string, error) {
	b.t.Helper()
	return run(b.t, "", b.env(), "chroot", b.dir, "/bin/sh", "-c", script)
}

func (b *box) mustSh(script string) string {
	b.t.Helper()
	out, err := b.sh(script)
	if err != nil {
		b.t.Fatalf("in the box: %s: %v\n%s", script, err, out)
	}
	return out
}

// calls are the recorded invocations of a stand-in, one argv per line.
func (b *box) calls(tool string) []string {
	data, err := os.ReadFile(b.path("var/log/standin/" + tool + ".log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		b.t.Fatal(err)
	}
	return strings.Split(strings.TrimRight(string(data), "\n"), "\n")
}

func (b *box) clearCalls() { b.remove("var/log/standin") }

// enabled says whether the unit is enabled the way systemd sees it on disk: a wants/ symlink
// that resolves, inside the box, to an existing unit file.
func (b *box) enabled(unit string) bool {
	b.t.Helper()
	links, _ := filepath.Glob(b.path("etc/systemd/system/*.wants/" + unit))
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil {
			b.t.Fatal(err)
		}
		if b.exists(target) {
			return true
		}
	}
	return false
}

func (b *box) enablementTarget(unit string) string {
	links, _ := filepath.Glob(b.path("etc/systemd/system/*.wants/" + unit))
	if len(links) == 0 {
		return ""
	}
	target, _ := os.Readlink(links[0])
	return target
}

func (b *box) active(unit string) bool { return b.exists("run/standin/active/" + unit) }

// gid and uid read the box's own /etc/group and /etc/passwd.
func (b *box) id(db, name string) int {
	b.t.Helper()
	for _, line := range strings.Split(b.read("/etc/"+db), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[0] == name {
			var n int
			fmt.Sscanf(f[2], "%d", &n)
			return n
		}
	}
	b.t.Fatalf("%s has no %s", db, name)
	return -1
}

func (b *box) members(group string) []string {
	for _, line := range strings.Split(b.read("/etc/group"), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 4 && f[0] == group && f[3] != "" {
			return strings.Split(f[3], ",")
		}
	}
	return nil
}

func (b *box) packageStatus(pkg string) string {
	out, err := run(b.t, "", b.env(), "dpkg-query", "--admindir="+b.path("var/lib/dpkg"), "-W", "-f=${db:Status-Abbrev}${Version}", pkg)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(out)
}

// configure writes the config install.sh would write and enables the timer (and the proxy for
// transport proxy) with the box's systemctl, as install.sh does.
func (b *box) configure(transport string) string {
	b.t.Helper()
	cfg := fmt.Sprintf("env_id: env-qa-02\nsite: cbs\ntransport: %s\n", transport)
	b.write("/etc/monky-deployd/config.yaml", cfg, 0o640)
	if err := os.Chown(b.path("/etc/monky-deployd/config.yaml"), 0, b.id("group", "monky-deployd")); err != nil {
		b.t.Fatal(err)
	}
	if transport == "proxy" {
		b.mustSh("systemctl enable --now monky-deployd-proxy.service")
	}
	b.mustSh("systemctl enable --now monky-deployd.timer")
	b.clearCalls()
	return cfg
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func owner(st os.FileInfo) (uid, gid int) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1
	}
	return int(s.Uid), int(s.Gid)
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
