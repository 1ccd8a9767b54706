//go:build integration

package debtest

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/unitscore"
)

// shellScripts lists every shell script this package ships or tests with.
func shellScripts(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	var out []string
	for _, pattern := range []string{
		"packaging/install.sh",
		"packaging/scripts/*/*.sh",
		"scripts/packaging-*.sh",
		"scripts/build-bao.sh", "scripts/build-ziti.sh", // with scripts/lib/gotool.sh, which they source
		"packaging/debtest/testdata/standins/*",
		"packaging/debtest/testdata/oldpkg/*",
	} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			head := make([]byte, 2)
			f, err := os.Open(m)
			if err != nil {
				t.Fatal(err)
			}
			f.Read(head)
			f.Close()
			if string(head) == "#!" {
				out = append(out, m)
			}
		}
	}
	if len(out) < 20 {
		t.Fatalf("found only %d shell scripts: %q", len(out), out)
	}
	return out
}

func TestShellcheck(t *testing.T) {
	sc := need(t, "shellcheck")
	for _, s := range shellScripts(t) {
		name, _ := filepath.Rel(repoRoot(t), s)
		t.Run(name, func(t *testing.T) {
			if out, err := run(t, filepath.Dir(s), nil, sc, "--external-sources", filepath.Base(s)); err != nil {
				t.Errorf("shellcheck %s: %v\n%s", name, err, out)
			}
		})
	}
}

func TestAnsibleSyntaxAndLint(t *testing.T) {
	playbook := need(t, "ansible-playbook")
	lint := need(t, "ansible-lint")
	dir := filepath.Join(repoRoot(t), "ansible")
	env := append(os.Environ(), "NO_COLOR=1", "ANSIBLE_NOCOLOR=1", "ANSIBLE_LOCALHOST_WARNING=false")
	if out, err := run(t, dir, env, playbook, "--syntax-check", "-i", "localhost,", "monky-deployd.yml"); err != nil {
		t.Errorf("ansible-playbook --syntax-check: %v\n%s", err, out)
	}
	if out, err := run(t, dir, env, lint, "--offline", "--profile", "production", "monky-deployd.yml", "roles/monky_deployd"); err != nil {
		t.Errorf("ansible-lint: %v\n%s", err, out)
	}
}

// unitRoot is a root holding the built package's files (dpkg-deb -x) and, beside them, the
// host's own systemd units, which `systemd-analyze verify --root` needs for the standard targets.
func unitRoot(t *testing.T) string {
	t.Helper()
	a := build(t)
	root := t.TempDir()
	mustRun(t, "", nil, need(t, "dpkg-deb"), "-x", a.deb, root)
	mustRun(t, "", nil, "dpkg-deb", "-x", a.fleetDeb, root)
	hostUnits := ""
	for _, d := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
		if st, err := os.Stat(filepath.Join(d, "sysinit.target")); err == nil && st.Mode().IsRegular() {
			hostUnits = d
			break
		}
	}
	if hostUnits == "" {
		missing(t, "the host has no systemd unit directory (apt-get install systemd)")
	}
	dst := filepath.Join(root, "usr/lib/systemd/system")
	err := filepath.WalkDir(hostUnits, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(hostUnits, p)
		target := filepath.Join(dst, rel)
		if _, err := os.Lstat(target); err == nil {
			return nil // never overwrite the package's own units
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			copyFile(t, p, target, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestSystemdUnitsVerify(t *testing.T) {
	sa := need(t, "systemd-analyze")
	root := unitRoot(t)
	units := []string{"monky-deployd.service", "monky-deployd.timer", "monky-deployd-proxy.service", "fleetctl-exporter.service"}
	verify := func(units ...string) (string, error) {
		return run(t, "", append(os.Environ(), "SYSTEMD_LOG_COLOR=0"), sa, append([]string{"verify", "--man=no", "--root=" + root}, units...)...)
	}
	// verify exits 0 on a unit line it ignores; any output at all is a finding.
	if out, err := verify(units...); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The check can fail: a misspelt key in a copy of the timer must be reported.
	unitDir := filepath.Join(root, "usr/lib/systemd/system")
	data, err := os.ReadFile(filepath.Join(unitDir, "monky-deployd.timer"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), "OnUnitActiveSec=", "OnUnitActivSec=", 1)
	if err := os.WriteFile(filepath.Join(unitDir, "monky-deployd-broken.timer"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := verify("monky-deployd-broken.timer"); !strings.Contains(out, "OnUnitActivSec") {
		t.Errorf("systemd-analyze did not report a misspelt key: %q", out)
	}
}

// TestUnitContents pins the properties the agent's safety rests on, which verify cannot judge.
func TestUnitContents(t *testing.T) {
	root := unitRoot(t)
	read := func(u string) map[string][]string {
		data, err := os.ReadFile(filepath.Join(root, "usr/lib/systemd/system", u))
		if err != nil {
			t.Fatal(err)
		}
		kv := map[string][]string{}
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
				kv[k] = append(kv[k], v)
			}
		}
		return kv
	}
	svc, tmr, prx, exp := read("monky-deployd.service"), read("monky-deployd.timer"), read("monky-deployd-proxy.service"),
		read("fleetctl-exporter.service")
	for _, c := range []struct {
		unit map[string][]string
		name string
		key  string
		want string
	}{
		{svc, "service", "Type", "oneshot"},
		{svc, "service", "User", "monky-deployd"},
		// Absent: a group the box lacks would fail the start (216/GROUP) before any check-in.
		{svc, "service", "SupplementaryGroups", ""},
		{svc, "service", "StateDirectory", "monky-deployd"},
		{svc, "service", "ProtectSystem", "strict"},
		{svc, "service", "ProtectHome", "yes"},
		{svc, "service", "PrivateTmp", "yes"},
		{svc, "service", "NoNewPrivileges", "yes"},
		{svc, "service", "ExecStart", "/usr/bin/monky-deployd tick"},
		{tmr, "timer", "OnUnitActiveSec", "60s"},
		{tmr, "timer", "Unit", "monky-deployd.service"},
		{tmr, "timer", "WantedBy", "timers.target"},
		{prx, "proxy", "ExecStart", "/usr/bin/monky-deployd proxy"},
		{prx, "proxy", "User", "monky-deployd"},
		{prx, "proxy", "Restart", "always"},
		// No privilege at all, for all three: an empty bounding set.
		{svc, "service", "CapabilityBoundingSet", ""},
		{prx, "proxy", "CapabilityBoundingSet", ""},
		{exp, "exporter", "CapabilityBoundingSet", ""},
		// The docker socket is a unix socket; the proxy and the exporter need none.
		{svc, "service", "RestrictAddressFamilies", "AF_UNIX AF_INET AF_INET6"},
		{prx, "proxy", "RestrictAddressFamilies", "AF_INET AF_INET6"},
		{exp, "exporter", "RestrictAddressFamilies", "AF_INET AF_INET6"},
		// The docker and ziti groups must stay mapped for the agent and the proxy.
		{svc, "service", "PrivateUsers", ""},
		{prx, "proxy", "PrivateUsers", ""},
		{exp, "exporter", "DynamicUser", "yes"},
		// Where the ziti identity's renewal writes (issue 21's certificate renewal).
		{prx, "proxy", "ReadWritePaths", "-/opt/openziti/etc/identities"},
		{svc, "service", "ReadWritePaths", "-/etc/monky-deployd,-/var/lib/prometheus/node-exporter,-/opt/openziti/etc/identities"},
	} {
		if got := strings.Join(c.unit[c.key], ","); got != c.want {
			t.Errorf("%s %s=%q, want %q", c.name, c.key, got, c.want)
		}
	}
	for _, k := range []string{"OnBootSec", "RandomizedDelaySec"} {
		if len(tmr[k]) == 0 {
			t.Errorf("timer has no %s", k)
		}
	}
	if _, ok := svc["WantedBy"]; ok {
		t.Error("the service can be enabled on its own; only the timer should be")
	}
}

// TestUnitExposure: every unit stays under its systemd-analyze security limit (the agent's tick
// 3.5, the proxy and the exporter 2.5); and the check can fail: the agent's unit without its
// hardening block scores over its limit.
func TestUnitExposure(t *testing.T) {
	sa := need(t, "systemd-analyze")
	root := unitRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := unitscore.Check(ctx, sa, root)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(unitscore.Limits) {
		t.Fatalf("%d units scored, want %d", len(results), len(unitscore.Limits))
	}
	for _, r := range results {
		t.Log(r)
		if r.Over() {
			t.Errorf("%s", r)
		}
	}

	unitDir := filepath.Join(root, "usr/lib/systemd/system")
	data, err := os.ReadFile(filepath.Join(unitDir, "monky-deployd.service"))
	if err != nil {
		t.Fatal(err)
	}
	hardening := strings.Index(string(data), "CapabilityBoundingSet=")
	if hardening < 0 {
		t.Fatal("the agent's unit has no CapabilityBoundingSet=")
	}
	if err := os.WriteFile(filepath.Join(unitDir, "monky-deployd.service"), data[:hardening], 0o644); err != nil {
		t.Fatal(err)
	}
	results, err = unitscore.Check(ctx, sa, root)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Unit == "monky-deployd.service" && !r.Over() {
			t.Errorf("the agent's unit without its hardening block is within its limit: %s", r)
		}
	}
}

// TestLintian: lintian, failing on any error or warning, passes both packages (what
// `make deb-check` and CI run); and it does fail: the Python-era stand-in package (no
// copyright, no changelog, systemctl in its scripts) is refused.
func TestLintian(t *testing.T) {
	lintian := need(t, "lintian")
	a := build(t)
	lint := func(debs ...string) (string, error) {
		return run(t, "", append(os.Environ(), "LC_ALL=C.UTF-8"), lintian,
			append([]string{"--fail-on", "error,warning", "--tag-display-limit", "0", "--allow-root"}, debs...)...)
	}
	if out, err := lint(a.deb, a.fleetDeb); err != nil {
		t.Errorf("lintian: %v\n%s", err, out)
	}
	out, err := lint(a.old018Deb)
	if err == nil || !strings.Contains(out, "no-copyright-file") {
		t.Errorf("lintian passed a package without a copyright file: %v\n%s", err, out)
	}
}
