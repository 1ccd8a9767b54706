//go:build integration

package debtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/files"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debpkg"
)

// These tests drive dpkg down its error and rollback paths (a failed configure, a failed unpack,
// a removal rolled back), where the maintainer scripts are called with arguments the happy paths
// never pass, and check that root never writes through a symlink the agent's account can plant.

// otherPackage builds a throw-away package named name holding one file, then lets change adjust
// it (conflicts, scripts, more files).
func otherPackage(t *testing.T, name string, change func(dir string, info *nfpm.Info)) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	info := &nfpm.Info{Name: name, Arch: "amd64", Version: "1.0", Maintainer: "test <test@example.invalid>", Description: "test package"}
	info.Contents = files.Contents{&files.Content{Source: src, Destination: "/usr/share/" + name + "/f", Type: files.TypeFile,
		FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o644}}}
	if change != nil {
		change(dir, info)
	}
	p, err := debpkg.Write(nfpm.WithDefaults(info), dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHealAfterFailedConfigureThenAnotherUpgrade: 0.1.8 -> X whose configure fails (the timer
// cannot be enabled) -> Y. dpkg hands Y's preinst `upgrade X` but Y's postinst `configure 0.1.8`
// (the last version configured): the upgrade record must name 0.1.8, or the repair is skipped
// and the box stays silent.
func TestHealAfterFailedConfigureThenAnotherUpgrade(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old018Deb)
	b.configure("sdk")
	b.write("/etc/standin-systemctl-fail", timer+"\n", 0o644)
	if out, err := b.tryDpkg("-i", a.prevDeb); err == nil {
		t.Fatalf("the configure of %s succeeded although the timer could not be enabled:\n%s", a.version+"~rc1", out)
	}
	if got := b.packageStatus("monky-deployd"); strings.HasPrefix(got, "ii ") {
		t.Fatalf("status %q: the test needs a half-configured package", got)
	}
	b.remove("/etc/standin-systemctl-fail")
	b.clearCalls()
	out := b.dpkg("-i", a.deb)
	if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
		t.Fatalf("status %q\n%s", got, out)
	}
	if !b.enabled(timer) || !b.active(timer) {
		t.Errorf("timer enabled=%v active=%v after 0.1.8 -> %s (failed configure) -> %s; calls %q\n%s",
			b.enabled(timer), b.active(timer), a.version+"~rc1", a.version, b.calls("systemctl"), out)
	}
	if !strings.Contains(out, "upgrade from 0.1.8 (its prerm disabled the timer): re-enabled and started "+timer) {
		t.Errorf("the repair was not reported:\n%s", out)
	}
	if b.exists(upgradeMarker) {
		t.Error("the upgrade record was left behind")
	}
}

// TestUnpackFailureFrom018ReEnablesTheTimer: the upgrade from 0.1.8 fails while unpacking (a
// file another package owns) after 0.1.8's prerm disabled the timer. dpkg puts 0.1.8 back and
// calls our postrm `abort-upgrade 0.1.8`, which must switch the timer back on — else the box is
// left on 0.1.8 with the agent off, the original outage.
func TestUnpackFailureFrom018ReEnablesTheTimer(t *testing.T) {
	a := build(t)
	for _, tc := range []struct {
		name      string
		transport string
		prepare   string
		wantTimer bool
	}{
		{"sdk box", "sdk", "true", true},
		{"proxy box", "proxy", "true", true},
		{"switched off by the operator", "sdk", "touch " + optOut, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.old018Deb)
			b.configure(tc.transport)
			b.mustSh(tc.prepare)
			other := otherPackage(t, "other-deployd", func(dir string, info *nfpm.Info) {
				src := filepath.Join(dir, "monky-deployd")
				if err := os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				info.Contents = append(info.Contents, &files.Content{Source: src, Destination: debpkg.DeploydPath, Type: files.TypeFile,
					FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o755}})
			})
			b.dpkg("-i", other)
			b.clearCalls()
			out, err := b.tryDpkg("-i", a.deb)
			if err == nil {
				t.Fatalf("the upgrade succeeded despite the file conflict:\n%s", out)
			}
			calls := b.calls("systemctl")
			if !contains(calls, "disable --now "+timer) {
				t.Fatalf("0.1.8's prerm did not run (%q): the test proves nothing\n%s", calls, out)
			}
			if got := b.packageStatus("monky-deployd"); got != "ii 0.1.8" {
				t.Fatalf("status %q after the failed upgrade, want 0.1.8 back\n%s", got, out)
			}
			if got := b.enabled(timer) && b.active(timer); got != tc.wantTimer {
				t.Errorf("timer enabled and active = %v, want %v; calls %q\n%s", got, tc.wantTimer, calls, out)
			}
			if tc.transport == "proxy" && (!b.enabled(proxy) || !b.active(proxy)) {
				t.Errorf("the proxy unit was not switched back on; calls %q", calls)
			}
			logged := strings.Join(b.calls("logger"), "\n")
			want := "failed upgrade from 0.1.8 rolled back (its prerm had disabled the timer): re-enabled and started " + timer
			if !tc.wantTimer {
				want = "failed upgrade from 0.1.8 rolled back: " + timer + " left as it is (" + optOut + " exists)"
			}
			if !strings.Contains(logged, want) || !strings.Contains(out, want) {
				t.Errorf("want %q on dpkg's output and in the journal (logger calls %q)\n%s", want, logged, out)
			}
			if b.exists(upgradeMarker) {
				t.Errorf("the rolled-back upgrade left its record: %q", b.read(upgradeMarker))
			}
		})
	}
}

// TestRemovalRolledBackRestoresTheUnits: a package that Conflicts with and Replaces
// monky-deployd makes dpkg run our `prerm remove in-favour …` (the units are disabled); its own
// preinst then fails and dpkg calls our `postinst abort-remove in-favour …`: the package stays
// installed, so the units that were enabled must be on again.
func TestRemovalRolledBackRestoresTheUnits(t *testing.T) {
	a := build(t)
	for _, transport := range []string{"sdk", "proxy"} {
		t.Run(transport, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.deb)
			b.configure(transport)
			successor := otherPackage(t, "monky-successor", func(dir string, info *nfpm.Info) {
				pre := filepath.Join(dir, "preinst")
				if err := os.WriteFile(pre, []byte("#!/bin/sh\necho successor preinst $*; exit 1\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				info.Conflicts = []string{"monky-deployd"}
				info.Replaces = []string{"monky-deployd"}
				info.Scripts.PreInstall = pre
			})
			b.clearCalls()
			out, err := b.tryDpkg("-i", successor)
			if err == nil {
				t.Fatalf("the successor installed although its preinst fails:\n%s", out)
			}
			calls := b.calls("systemctl")
			if !contains(calls, "stop "+timer+" "+proxy) {
				t.Fatalf("our prerm remove did not run (%q): the test proves nothing\n%s", calls, out)
			}
			if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
				t.Fatalf("status %q: the removal was not rolled back\n%s", got, out)
			}
			if !b.enabled(timer) || !b.active(timer) {
				t.Errorf("timer enabled=%v active=%v after the rolled-back removal; calls %q\n%s", b.enabled(timer), b.active(timer), calls, out)
			}
			if got := b.enabled(proxy) && b.active(proxy); got != (transport == "proxy") {
				t.Errorf("proxy enabled and active = %v for transport %s; calls %q", got, transport, calls)
			}
			if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, "removal rolled back: re-enabled and started "+timer) {
				t.Errorf("the restore did not reach the journal (logger calls %q)", logged)
			}
			if b.exists("/run/monky-deployd-package/enabled-before-remove") {
				t.Error("the removal record was left behind")
			}
		})
	}
}

// TestRemoveClearsItsRecord: a removal that goes through leaves no record of the units, so a
// later reinstall cannot switch on what the removal switched off.
func TestRemoveClearsItsRecord(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.deb)
	b.configure("sdk")
	b.dpkg("-r", "monky-deployd")
	if b.exists("/run/monky-deployd-package") {
		t.Errorf("postrm remove left /run/monky-deployd-package")
	}
	b.dpkg("-i", a.deb)
	if b.enabled(timer) {
		t.Errorf("a reinstall after a removal enabled the timer; calls %q", b.calls("systemctl"))
	}
}

// TestNoWriteThroughPlantedSymlinks: /var/lib/monky-deployd belongs to the agent's account and
// /etc/monky-deployd is writable by its group. Symlinks planted at every name root writes there
// must be replaced, never followed.
func TestNoWriteThroughPlantedSymlinks(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old019Deb)
	b.configure("sdk")
	victims := map[string]string{}
	for i, name := range []string{"upgraded-from", "upgraded-from.new", ".dpkg-upgrade-from"} {
		v := "/etc/victim" + string(rune('1'+i))
		victims[v] = "secret " + name + "\n"
		b.write(v, victims[v], 0o600)
		b.mustSh("ln -s " + v + " /var/lib/monky-deployd/" + name)
	}
	out := b.dpkg("-i", a.deb)
	for v, want := range victims {
		if got := b.read(v); got != want {
			t.Errorf("root wrote through a planted symlink into %s: %q\n%s", v, got, out)
		}
		st, err := os.Stat(b.path(v))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode changed (%v, %v)", v, st.Mode(), err)
		}
	}
	const p = "/var/lib/monky-deployd/upgraded-from"
	st, err := os.Lstat(b.path(p))
	if err != nil || !st.Mode().IsRegular() {
		t.Fatalf("%s is not a regular file after the upgrade: %v %v", p, st, err)
	}
	if got := b.read(p); got != "0.1.9\n" {
		t.Errorf("%s = %q", p, got)
	}
	assertMode(t, b, p, 0o644, 0, 0)
	assertMode(t, b, "/var/lib/monky-deployd-package", 0o755, 0, 0)
	if left, _ := filepath.Glob(b.path("/var/lib/monky-deployd-package/.*")); len(left) != 0 {
		t.Errorf("temp files left behind: %q", left)
	}
}

// TestHealWithoutRunningSystemd: in a chroot or an image build (/run/systemd/system absent) the
// repair still enables the timer — without --now, so the next boot starts it — and says so.
func TestHealWithoutRunningSystemd(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old019Deb)
	b.configure("proxy")
	b.mustSh("systemctl disable --now " + timer + " && systemctl disable --now " + proxy)
	b.remove("/run/systemd/system")
	b.clearCalls()
	out := b.dpkg("-i", a.deb)
	calls := b.calls("systemctl")
	for _, u := range []string{timer, proxy} {
		// deb-systemd-helper enables a unit it never recorded through systemctl preset.
		if !contains(calls, "--root=/ --system --preset-mode=enable-only preset "+u) || !b.enabled(u) {
			t.Errorf("%s not enabled (enabled=%v); calls %q\n%s", u, b.enabled(u), calls, out)
		}
		if b.active(u) {
			t.Errorf("%s was started although systemd is not running", u)
		}
	}
	const want = "re-enabled (systemd is not running here: it starts at the next boot) " + timer
	if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, want) || !strings.Contains(out, want) {
		t.Errorf("want %q on dpkg's output and in the journal (logger calls %q)\n%s", want, logged, out)
	}
	if b.exists(upgradeMarker) {
		t.Error("the upgrade record was left behind")
	}
}

// TestHealLineNamesTheOptOut: the repair after an upgrade from 0.1.9 may switch on a box an
// operator had switched off without the opt-out file; its line says how to switch it off for good.
func TestHealLineNamesTheOptOut(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old019Deb)
	b.configure("sdk")
	b.mustSh("systemctl disable --now " + timer)
	b.clearCalls()
	out := b.dpkg("-i", a.deb)
	const hint = "systemctl disable --now " + timer + " && touch " + optOut
	logged := strings.Join(b.calls("logger"), "\n")
	for where, text := range map[string]string{"dpkg's output": out, "the journal": logged} {
		if !strings.Contains(text, "NOTICE: upgrade from 0.1.9") || !strings.Contains(text, hint) {
			t.Errorf("%s lacks the NOTICE and the opt-out hint %q:\n%s", where, hint, text)
		}
	}
	if !strings.Contains(logged, "-p daemon.warning") {
		t.Errorf("the repair was not logged at warning priority: %q", logged)
	}
}

// TestUpgradeGivesStateBackToTheAgent: a tick run as root by an older agent left root's files in
// /var/lib/monky-deployd; the upgrade gives the tree back to the agent without following a
// symlink the agent's account planted, without touching a hard link to a file elsewhere, and
// leaving the package's own upgraded-from root's.
func TestUpgradeGivesStateBackToTheAgent(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.prevDeb)
	b.configure("sdk")
	const st = "/var/lib/monky-deployd"
	b.mustSh("mkdir -p " + st + "/env-qa-02/releases/aa01 " + st + "/docker && " +
		"echo '{}' >" + st + "/state.json && echo S=1 >" + st + "/env-qa-02/releases/aa01/.env && " +
		"echo '{}' >" + st + "/docker/config.json && chown -R root:root " + st + "/state.json " + st + "/env-qa-02 " + st + "/docker")
	b.write("/etc/victim-link", "secret\n", 0o600)
	b.write("/etc/victim-hard", "secret\n", 0o600)
	uid, gid := b.id("passwd", "monky-deployd"), b.id("group", "monky-deployd")
	b.mustSh("ln -s /etc/victim-link " + st + "/planted && ln /etc/victim-hard " + st + "/hard")
	if err := os.Lchown(b.path(st+"/planted"), uid, gid); err != nil {
		t.Fatal(err)
	}
	// What a container running as uid 999 wrote into a bind mount inside a release is its own.
	b.mustSh("mkdir -p " + st + "/env-qa-02/releases/aa01/data && echo x >" + st + "/env-qa-02/releases/aa01/data/db && chown -R 999:999 " + st + "/env-qa-02/releases/aa01/data")
	out := b.dpkg("-i", a.deb)
	assertMode(t, b, st+"/env-qa-02/releases/aa01/data/db", 0o644, 999, 999)
	for _, p := range []string{"state.json", "env-qa-02", "env-qa-02/releases", "env-qa-02/releases/aa01", "env-qa-02/releases/aa01/.env", "docker", "docker/config.json", "planted"} {
		fi, err := os.Lstat(b.path(st + "/" + p))
		if err != nil {
			t.Fatal(err)
		}
		if u, g := owner(fi); u != uid || g != gid {
			t.Errorf("%s/%s is %d:%d after the upgrade, want the agent's %d:%d\n%s", st, p, u, g, uid, gid, out)
		}
	}
	assertMode(t, b, "/etc/victim-link", 0o600, 0, 0)
	assertMode(t, b, "/etc/victim-hard", 0o600, 0, 0)
	if !strings.Contains(out, "not re-owned (a file with more than one name): "+st+"/hard") {
		t.Errorf("the hard link was not named:\n%s", out)
	}
	if b.exists(st + "/upgraded-from") {
		assertMode(t, b, st+"/upgraded-from", 0o644, 0, 0)
	}
}

// dockerPackage builds a stand-in of docker-ce: /usr/bin/dockerd, and a postinst that creates
// group docker, as the real packages do.
func dockerPackage(t *testing.T, dir string) string {
	t.Helper()
	td := filepath.Join(repoRoot(t), "packaging", "debtest", "testdata", "dockerpkg")
	info := nfpm.WithDefaults(&nfpm.Info{
		Name: "monky-test-docker", Arch: "amd64", Version: "29.0.0", Maintainer: "stand-in <stand-in@example.invalid>",
		Description: "docker-ce stand-in for the packaging tests",
		Overridables: nfpm.Overridables{
			Contents: files.Contents{&files.Content{Source: filepath.Join(td, "dockerd"), Destination: "/usr/bin/dockerd",
				Type: files.TypeFile, FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: 0o755}}},
			Scripts: nfpm.Scripts{PostInstall: filepath.Join(td, "postinst")},
		},
	})
	deb, err := debpkg.Write(info, filepath.Join(dir, "docker"))
	if err != nil {
		t.Fatal(err)
	}
	return deb
}

// TestDockerInstalledAfterTheAgentJoinsItsGroup: on a box where docker comes after the agent
// (no group docker at the agent's install), installing docker puts the agent's account in the
// group it creates, through the package's dpkg trigger on dockerd; without it every tick could
// not use docker until someone ran usermod.
func TestDockerInstalledAfterTheAgentJoinsItsGroup(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{})
	b.dpkg("-i", a.deb)
	if contains(b.members("docker"), "monky-deployd") {
		t.Fatal("monky-deployd is in group docker before docker exists")
	}
	out := b.dpkg("-i", dockerPackage(t, t.TempDir()))
	if !contains(b.members("docker"), "monky-deployd") {
		t.Errorf("installing docker left monky-deployd outside group docker (members %q)\n%s", b.members("docker"), out)
	}
	if !strings.Contains(out, "docker was installed: monky-deployd joined group docker") {
		t.Errorf("the trigger did not say what it did:\n%s", out)
	}
	if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
		t.Errorf("monky-deployd is %q after the trigger", got)
	}
}
