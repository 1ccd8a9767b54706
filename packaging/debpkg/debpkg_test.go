package debpkg

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// binaries are a small static Go program standing for both binaries: a Go binary with build
// information, what the copyright file is made from (only the standard library: the copyright
// of modules is debcopyright's to test), small enough to package quickly.
func binaries(t *testing.T) (string, string) {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "debpkg-bin-")
		if err != nil {
			binErr = err
			return
		}
		src := "package main\n\nfunc main() { println(\"stand-in\") }\n"
		for name, data := range map[string]string{"go.mod": "module example.com/standin\n\ngo 1.26\n", "main.go": src} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
				binErr = err
				return
			}
		}
		binPath = filepath.Join(dir, "standin")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", binPath, ".")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build of the stand-in binary: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath, binPath
}

var goEnvOnce sync.Once
var goEnvVals [2]string

// goEnv is `go env GOMODCACHE GOROOT`: where the licenses are read.
func goEnv(t *testing.T) (modCache, goRoot string) {
	t.Helper()
	goEnvOnce.Do(func() {
		out, err := exec.Command("go", "env", "GOMODCACHE", "GOROOT").Output()
		if err == nil {
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) == 2 {
				goEnvVals = [2]string{lines[0], lines[1]}
			}
		}
	})
	if goEnvVals[0] == "" {
		t.Fatal("go env GOMODCACHE GOROOT failed")
	}
	return goEnvVals[0], goEnvVals[1]
}

func packagingDir(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func options(t *testing.T, version string) Options {
	d, f := binaries(t)
	mc, gr := goEnv(t)
	return Options{Version: version, DeploydBin: d, FleetctlBin: f, PackagingDir: packagingDir(t), ModCache: mc, GoRoot: gr,
		MTime: time.Unix(1796000000, 0)}
}

// arMembers reads the members of an ar archive (a .deb) by name.
func arMembers(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	if !bytes.HasPrefix(data, []byte("!<arch>\n")) {
		t.Fatal("not an ar archive")
	}
	out := map[string][]byte{}
	r := bufio.NewReader(bytes.NewReader(data[8:]))
	for {
		hdr := make([]byte, 60)
		if _, err := io.ReadFull(r, hdr); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimRight(strings.TrimSpace(string(hdr[:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(hdr[48:58])))
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		if size%2 == 1 {
			r.ReadByte()
		}
		out[name] = body
	}
}

type entry struct {
	mode int64
	body string
}

func tarEntries(t *testing.T, gz []byte) map[string]entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(h.Name, ".")] = entry{h.Mode & 0o7777, string(b)}
	}
}

// deb is one built package taken apart.
type deb struct {
	control map[string]entry
	data    map[string]entry
}

func open(t *testing.T, path string) deb {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := arMembers(t, raw)
	return deb{control: tarEntries(t, m["control.tar.gz"]), data: tarEntries(t, m["data.tar.gz"])}
}

func gunzip(t *testing.T, name string, b string) string {
	t.Helper()
	r, err := gzip.NewReader(strings.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.Header.Name != "" || !r.Header.ModTime.IsZero() {
		t.Errorf("%s: gzip header carries a name %q or a time %v (want gzip -n)", name, r.Header.Name, r.Header.ModTime)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

var (
	buildOnce sync.Once
	built     Packages
	buildErr  error
)

// build makes both packages once for the tests that only read them.
func build(t *testing.T) Packages {
	t.Helper()
	o := options(t, "0.3.0")
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "debpkg-test-")
		if err != nil {
			buildErr = err
			return
		}
		built, buildErr = Build(o, dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

func TestBothPackages(t *testing.T) {
	p := build(t)
	if filepath.Base(p.Agent) != "monky-deployd_0.3.0_amd64.deb" || filepath.Base(p.Fleet) != "monky-fleetctl_0.3.0_amd64.deb" {
		t.Errorf("file names %q, %q", p.Agent, p.Fleet)
	}
	agent, fleet := open(t, p.Agent), open(t, p.Fleet)

	for name, d := range map[string]deb{AgentName: agent, FleetName: fleet} {
		if _, ok := d.control["/conffiles"]; ok {
			t.Errorf("%s has conffiles: %q", name, d.control["/conffiles"].body)
		}
		for path := range d.data {
			if strings.HasPrefix(path, "/etc") || strings.HasPrefix(path, "/var") {
				t.Errorf("%s ships %s: /etc and /var belong to install.sh and postinst", name, path)
			}
		}
		for _, line := range strings.Split(d.control["/control"].body, "\n") {
			if len([]rune(line)) > 80 {
				t.Errorf("%s: control line longer than 80 columns: %q", name, line)
			}
		}
	}
	for _, want := range []string{"Package: monky-deployd\n", "Version: 0.3.0\n", "Architecture: amd64\n", "Depends: passwd\n",
		"Suggests: monky-fleetctl\n"} {
		if !strings.Contains(agent.control["/control"].body, want) {
			t.Errorf("the agent's control lacks %q:\n%s", want, agent.control["/control"].body)
		}
	}
	// fleetctl's files were the agent package's up to 0.2.0 (Debian Policy 7.6.1).
	for _, want := range []string{"Package: monky-fleetctl\n", "Version: 0.3.0\n", "Source: monky-deployd\n",
		"Breaks: monky-deployd (<< 0.3.0~)\n", "Replaces: monky-deployd (<< 0.3.0~)\n"} {
		if !strings.Contains(fleet.control["/control"].body, want) {
			t.Errorf("monky-fleetctl's control lacks %q:\n%s", want, fleet.control["/control"].body)
		}
	}
	for name, scripts := range map[string]struct {
		d    deb
		want []string
	}{AgentName: {agent, []string{"/preinst", "/postinst", "/prerm", "/postrm"}}, FleetName: {fleet, []string{"/postinst", "/prerm", "/postrm"}}} {
		for _, s := range scripts.want {
			e, ok := scripts.d.control[s]
			if !ok || e.mode != 0o755 || !strings.HasPrefix(e.body, "#!/bin/sh\n") {
				t.Errorf("%s maintainer script %s: present=%v mode=%o", name, s, ok, e.mode)
			}
		}
	}

	for _, c := range []struct {
		d     deb
		files map[string]int64
	}{
		{agent, map[string]int64{
			DeploydPath: 0o755, UnitDir + "/monky-deployd.service": 0o644, UnitDir + "/monky-deployd.timer": 0o644,
			UnitDir + "/monky-deployd-proxy.service": 0o644, DocDir(AgentName) + "/config.example.yaml": 0o644,
			DocDir(AgentName) + "/copyright": 0o644, DocDir(AgentName) + "/changelog.gz": 0o644,
			"/usr/share/lintian/overrides/monky-deployd": 0o644,
			"/usr/share/man/man8/monky-deployd.8.gz":     0o644, "/usr/share/man/man8/monky-deployd-tick.8.gz": 0o644,
			"/usr/share/man/man8/monky-deployd-reown.8.gz": 0o644,
		}},
		{fleet, map[string]int64{
			FleetctlPath: 0o755, UnitDir + "/" + ExporterUnit: 0o644, RulesPath: 0o644,
			DocDir(FleetName) + "/copyright": 0o644, DocDir(FleetName) + "/changelog.gz": 0o644,
			"/usr/share/lintian/overrides/monky-fleetctl": 0o644,
			"/usr/share/man/man1/fleetctl.1.gz":           0o644, "/usr/share/man/man1/fleetctl-gate.1.gz": 0o644,
		}},
	} {
		for path, mode := range c.files {
			e, ok := c.d.data[path]
			if !ok {
				t.Errorf("%s is not in its package", path)
				continue
			}
			if e.mode != mode {
				t.Errorf("%s mode %o, want %o", path, e.mode, mode)
			}
		}
	}
	// Each file in one package only: the split must not leave a file in both.
	for path := range agent.data {
		if _, both := fleet.data[path]; both && !strings.HasSuffix(path, "/") {
			t.Errorf("%s is in both packages", path)
		}
	}
	for _, moved := range []string{FleetctlPath, UnitDir + "/" + ExporterUnit, "/usr/share/monky-deployd/prometheus/monky-deployd.rules.yml"} {
		if _, ok := agent.data[moved]; ok {
			t.Errorf("the agent package still ships %s", moved)
		}
	}

	// The changelog: generated, compressed as lintian wants it, newest entry the package's version.
	cl := gunzip(t, "changelog.gz", agent.data[DocDir(AgentName)+"/changelog.gz"].body)
	if !strings.HasPrefix(cl, "monky-deployd (0.3.0) unstable; urgency=medium\n") {
		t.Errorf("changelog starts %q", strings.SplitN(cl, "\n", 2)[0])
	}
	if fcl := gunzip(t, "changelog.gz", fleet.data[DocDir(FleetName)+"/changelog.gz"].body); fcl != cl {
		t.Error("the two packages carry different changelogs of their one source")
	}
	// Man pages: every page compressed with gzip -n.
	for path, e := range agent.data {
		if strings.HasPrefix(path, "/usr/share/man/") && strings.HasSuffix(path, ".gz") {
			if page := gunzip(t, path, e.body); !strings.Contains(page, ".SH NAME") {
				t.Errorf("%s is no man page", path)
			}
		}
	}
	// Copyright: DEP-5, naming the binary it covers.
	cr := agent.data[DocDir(AgentName)+"/copyright"].body
	if !strings.HasPrefix(cr, "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n") ||
		!strings.Contains(cr, "/usr/bin/monky-deployd") || !strings.Contains(cr, "Files: go/src/*") {
		t.Errorf("the agent's copyright is not the DEP-5 file of its binary:\n%s", cr[:min(len(cr), 600)])
	}
}

func TestSameInputSameBytes(t *testing.T) {
	first := build(t)
	again, err := Build(options(t, "0.3.0"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{first.Agent, again.Agent}, {first.Fleet, again.Fleet}} {
		a, _ := os.ReadFile(pair[0])
		b, _ := os.ReadFile(pair[1])
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of the same input", filepath.Base(pair[0]))
		}
	}
}

func TestPrereleaseSortsBeforeRelease(t *testing.T) {
	p, err := Build(options(t, "0.3.0-rc1"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(p.Agent) != "monky-deployd_0.3.0~rc1_amd64.deb" || filepath.Base(p.Fleet) != "monky-fleetctl_0.3.0~rc1_amd64.deb" {
		t.Errorf("file names %q %q, want the Debian ~ form", p.Agent, p.Fleet)
	}
	d := open(t, p.Agent)
	if cl := gunzip(t, "changelog", d.data[DocDir(AgentName)+"/changelog.gz"].body); !strings.HasPrefix(cl, "monky-deployd (0.3.0~rc1) ") {
		t.Errorf("the changelog's newest entry is not the package's version: %q", strings.SplitN(cl, "\n", 2)[0])
	}
	if !strings.Contains(d.control["/control"].body, "Version: 0.3.0~rc1\n") {
		t.Errorf("control:\n%s", d.control["/control"].body)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ok := options(t, "0.3.0")
	for _, tc := range []struct {
		name  string
		edit  func(*Options)
		field string
	}{
		{"empty version", func(o *Options) { o.Version = "" }, "Version"},
		{"v prefix", func(o *Options) { o.Version = "v0.3.0" }, "Version"},
		{"shell in version", func(o *Options) { o.Version = "0.3.0;rm" }, "Version"},
		{"arch", func(o *Options) { o.Arch = "mips" }, "Arch"},
		{"no deployd", func(o *Options) { o.DeploydBin = "" }, "DeploydBin"},
		{"missing fleetctl", func(o *Options) { o.FleetctlBin = "/nonexistent" }, "FleetctlBin"},
		{"not executable", func(o *Options) { o.DeploydBin = notExec }, "DeploydBin"},
		{"no packaging dir", func(o *Options) { o.PackagingDir = "" }, "PackagingDir"},
		{"no module cache", func(o *Options) { o.ModCache = "" }, "ModCache"},
		{"no go root", func(o *Options) { o.GoRoot = "" }, "GoRoot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			_, err := Build(o, t.TempDir())
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Build: %v, want ErrInvalidOptions naming %s", err, tc.field)
			}
		})
	}
	t.Run("missing unit file", func(t *testing.T) {
		o := ok
		o.PackagingDir = t.TempDir()
		if _, err := Build(o, t.TempDir()); err == nil || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("Build with an empty packaging dir: %v", err)
		}
	})
	t.Run("a binary without build information", func(t *testing.T) {
		script := filepath.Join(t.TempDir(), "script")
		if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		o := ok
		o.FleetctlBin = script
		if _, err := Build(o, t.TempDir()); err == nil || !strings.Contains(err.Error(), "debcopyright") {
			t.Errorf("Build with a shell script for fleetctl: %v", err)
		}
	})
}

// The maintainer scripts run standalone, so postinst (the upgrade heal) and postrm (the failed
// unpack's heal) each spell which `systemctl is-enabled` states count as "on": they must agree,
// or a timer one of them leaves off the other would turn on.
func TestMaintainerScriptsAgreeOnWhatIsEnabled(t *testing.T) {
	states := func(script string) string {
		b, err := os.ReadFile(filepath.Join("..", "scripts", "agent", script))
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, line := range strings.Split(string(b), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "enabled |") {
				found = append(found, strings.TrimSpace(l[:strings.Index(l, ")")]))
			}
		}
		if len(found) != 1 {
			t.Fatalf("%s: %d case patterns of enabled states, want 1: %q", script, len(found), found)
		}
		return found[0]
	}
	if a, b := states("postinst.sh"), states("postrm.sh"); a != b {
		t.Errorf("postinst counts %q as on, postrm %q", a, b)
	}
}
