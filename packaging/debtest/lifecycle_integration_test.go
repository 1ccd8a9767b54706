//go:build integration

package debtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	timer = "monky-deployd.timer"
	proxy = "monky-deployd-proxy.service"
	// upgradeMarker is preinst's record of an upgrade, in a root-owned directory.
	upgradeMarker = "/var/lib/monky-deployd-package/upgrade-from"
	optOut        = "/etc/monky-deployd/timer.disabled-by-operator"
)

func assertMode(t *testing.T, b *box, p string, mode os.FileMode, uid, gid int) {
	t.Helper()
	st, err := os.Stat(b.path(p))
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if got := st.Mode().Perm(); got != mode {
		t.Errorf("%s: mode %04o, want %04o", p, got, mode)
	}
	u, g := owner(st)
	if u != uid || g != gid {
		t.Errorf("%s: owner %d:%d, want %d:%d", p, u, g, uid, gid)
	}
}

func noDisableOrStop(t *testing.T, calls []string) {
	t.Helper()
	for _, c := range calls {
		if strings.HasPrefix(c, "disable") || strings.HasPrefix(c, "stop") || strings.HasPrefix(c, "reenable") {
			t.Errorf("systemctl %s: an upgrade must not switch the agent off", c)
		}
	}
}

func TestFreshInstall(t *testing.T) {
	a := build(t)
	for _, tc := range []struct {
		name       string
		groups     []string
		wantGroups []string
	}{
		{"docker only", []string{"docker"}, []string{"docker"}},
		{"docker and ziti", []string{"docker", "ziti"}, []string{"docker", "ziti"}},
		{"neither yet", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: tc.groups})
			out := b.dpkg("-i", a.deb)
			if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
				t.Fatalf("status %q after install\n%s", got, out)
			}
			uid, gid := b.id("passwd", "monky-deployd"), b.id("group", "monky-deployd")
			for _, g := range tc.wantGroups {
				if !contains(b.members(g), "monky-deployd") {
					t.Errorf("monky-deployd is not in group %s: %q", g, b.read("/etc/group"))
				}
			}
			assertMode(t, b, "/etc/monky-deployd", 0o770, 0, gid)
			assertMode(t, b, "/var/lib/monky-deployd", 0o700, uid, gid)
			assertMode(t, b, "/usr/bin/monky-deployd", 0o755, 0, 0)
			if b.exists("/usr/bin/fleetctl") {
				t.Error("the agent's package installed fleetctl: it is monky-fleetctl's")
			}
			for _, u := range []string{"monky-deployd.service", timer, proxy} {
				assertMode(t, b, "/usr/lib/systemd/system/"+u, 0o644, 0, 0)
			}
			if b.enabled(timer) || b.active(timer) {
				t.Error("a fresh install enabled or started the timer; install.sh does that once the config exists")
			}
			if calls := b.calls("systemctl"); len(calls) != 1 || calls[0] != "--system daemon-reload" {
				t.Errorf("systemctl calls on a fresh install: %q, want only daemon-reload", calls)
			}
			if b.exists("/var/lib/dpkg/info/monky-deployd.conffiles") {
				t.Errorf("the package ships conffiles: %q", b.read("/var/lib/dpkg/info/monky-deployd.conffiles"))
			}
		})
	}
}

func TestNoConffileClobber(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.deb)
	cfg := b.configure("sdk") + "# a hand edit\nlog_level: DEBUG\n"
	b.write("/etc/monky-deployd/config.yaml", cfg, 0o640)
	if b.exists("/var/lib/dpkg/info/monky-deployd.conffiles") {
		t.Error("the package has a conffiles list")
	}
	// A reinstall of the same version is an upgrade shape too (old prerm upgrade, new postinst
	// configure <same>): the config must come through byte for byte.
	out := b.dpkg("-i", a.deb)
	if got := b.read("/etc/monky-deployd/config.yaml"); got != cfg {
		t.Errorf("config changed by a reinstall:\n%s\nwant:\n%s\ndpkg said:\n%s", got, cfg, out)
	}
	if strings.Contains(out, "config.yaml") {
		t.Errorf("dpkg mentioned config.yaml:\n%s", out)
	}
	noDisableOrStop(t, b.calls("systemctl"))
	if !b.enabled(timer) {
		t.Error("timer not enabled after a reinstall")
	}
}

func TestUpgradeFromPreviousBuild(t *testing.T) {
	a := build(t)
	for _, transport := range []string{"sdk", "proxy"} {
		t.Run(transport, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.prevDeb)
			if got := b.packageStatus("monky-deployd"); got != "ii "+a.version+"~rc1" {
				t.Fatalf("previous build status %q", got)
			}
			cfg := b.configure(transport)
			out := b.dpkg("-i", a.deb)
			if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
				t.Fatalf("status %q after the upgrade\n%s", got, out)
			}
			calls := b.calls("systemctl")
			noDisableOrStop(t, calls)
			if !b.enabled(timer) || !b.active(timer) {
				t.Errorf("timer enabled=%v active=%v after the upgrade; systemctl calls %q", b.enabled(timer), b.active(timer), calls)
			}
			if !contains(calls, "try-restart "+proxy) {
				t.Errorf("the proxy was not try-restarted: %q", calls)
			}
			if transport == "proxy" && (!b.enabled(proxy) || !b.active(proxy)) {
				t.Error("the proxy unit is not enabled and running after the upgrade")
			}
			if containsPrefix(calls, "enable") {
				t.Errorf("an upgrade from a healthy version re-enabled something: %q", calls)
			}
			if got := b.read("/etc/monky-deployd/config.yaml"); got != cfg {
				t.Errorf("config changed by the upgrade: %q", got)
			}
		})
	}
}

// TestUpgradeFromBrokenPrerm is the 0.1.8 story: the OLD prerm disables the timer during the
// upgrade, and the new postinst must switch it back on, on a configured box only.
func TestUpgradeFromBrokenPrerm(t *testing.T) {
	a := build(t)
	for _, tc := range []struct {
		name       string
		configured bool
		transport  string
		wantTimer  bool
		wantProxy  bool
	}{
		{"configured sdk box", true, "sdk", true, false},
		{"configured proxy box", true, "proxy", true, true},
		{"unconfigured box", false, "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.old018Deb)
			cfg := ""
			if tc.configured {
				cfg = b.configure(tc.transport)
			}
			out := b.dpkg("-i", a.deb)
			calls := b.calls("systemctl")
			if !contains(calls, "disable --now "+timer) {
				t.Fatalf("the 0.1.8 stand-in's prerm did not disable the timer (%q): the test proves nothing", calls)
			}
			if got := b.enabled(timer) && b.active(timer); got != tc.wantTimer {
				t.Errorf("timer enabled and active = %v, want %v; systemctl calls %q\n%s", got, tc.wantTimer, calls, out)
			}
			if got := b.enabled(proxy) && b.active(proxy); got != tc.wantProxy {
				t.Errorf("proxy enabled and active = %v, want %v; systemctl calls %q", got, tc.wantProxy, calls)
			}
			if tc.wantTimer {
				if !strings.Contains(out, "re-enabled and started "+timer) {
					t.Errorf("dpkg's output does not say the timer was re-enabled:\n%s", out)
				}
				if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, "re-enabled and started "+timer) {
					t.Errorf("the repair did not reach the journal (logger calls %q)", logged)
				}
				if b.enablementTarget(timer) != "/usr/lib/systemd/system/"+timer {
					t.Errorf("timer enabled through %q", b.enablementTarget(timer))
				}
			}
			if !tc.configured {
				const say = "upgrade from 0.1.8 on an unconfigured box: timer left off"
				if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, say) || !strings.Contains(out, say) {
					t.Errorf("the unconfigured box's message did not reach dpkg's output and the journal (logger calls %q)\n%s", logged, out)
				}
			}
			if tc.configured {
				if got := b.read("/etc/monky-deployd/config.yaml"); got != cfg {
					t.Errorf("config changed by the upgrade: %q", got)
				}
			}
			if b.exists("/opt/monky-deployd/venv/bin/monky-deployd") {
				t.Error("the Python package's files survived the upgrade")
			}
			if b.exists(upgradeMarker) {
				t.Error("the preinst's upgrade marker was left behind")
			}
		})
	}
}

// TestHealOnlyAfterARecordedUpgrade: `postinst configure 0.1.8` also follows a reinstall of a
// package that was removed but not purged (its conffiles kept it in dpkg's database). Such a box
// was switched off on purpose; only an upgrade recorded by preinst may switch the timer back on.
func TestHealOnlyAfterARecordedUpgrade(t *testing.T) {
	a := build(t)
	for _, tc := range []struct {
		name      string
		preinst   string
		wantTimer bool
	}{
		{"reinstall after remove", "install 0.1.8", false},
		{"no preinst record", "", false},
		{"recorded upgrade", "upgrade 0.1.8", true},
		{"recorded upgrade from another version", "upgrade 0.1.7", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.deb)
			b.configure("sdk")
			b.mustSh("systemctl disable --now " + timer)
			if tc.preinst != "" {
				if out, err := b.maintscript("preinst", tc.preinst); err != nil {
					t.Fatalf("preinst %s: %v\n%s", tc.preinst, err, out)
				}
			}
			out, err := b.maintscript("postinst", "configure 0.1.8")
			if err != nil {
				t.Fatalf("postinst configure 0.1.8: %v\n%s", err, out)
			}
			if got := b.enabled(timer); got != tc.wantTimer {
				t.Errorf("timer enabled = %v, want %v; calls %q\n%s", got, tc.wantTimer, b.calls("systemctl"), out)
			}
			if b.exists(upgradeMarker) {
				t.Error("postinst left the upgrade marker behind")
			}
		})
	}
}

// TestMigrationFromPython019: the fixed Python package leaves the timer on during the upgrade;
// its unit files lived under /lib/systemd/system, so the enablement symlink must be re-pointed.
func TestMigrationFromPython019(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker", "ziti"}})
	b.dpkg("-i", a.old019Deb)
	cfg := b.configure("sdk")
	state := `{"applied_sha":"7a10","history":["7a10"]}`
	b.write("/var/lib/monky-deployd/state.json", state, 0o600)
	b.write("/etc/monky-deployd/bootstrap.jwt", "x.y.z", 0o600)
	if b.enablementTarget(timer) != "/lib/systemd/system/"+timer {
		t.Fatalf("stand-in timer enabled through %q", b.enablementTarget(timer))
	}
	out := b.dpkg("-i", a.deb)
	calls := b.calls("systemctl")
	if containsPrefix(calls, "disable") || containsPrefix(calls, "stop") {
		t.Errorf("the upgrade from 0.1.9 switched something off: %q", calls)
	}
	if !b.enabled(timer) || !b.active(timer) {
		t.Errorf("timer enabled=%v active=%v after the migration; calls %q\n%s", b.enabled(timer), b.active(timer), calls, out)
	}
	if got := b.enablementTarget(timer); got != "/usr/lib/systemd/system/"+timer {
		t.Errorf("timer enablement points at %q, want the new unit file", got)
	}
	if !strings.Contains(b.read("/usr/lib/systemd/system/monky-deployd.service"), "ExecStart=/usr/bin/monky-deployd tick") {
		t.Error("the service does not run the Go binary")
	}
	for p, want := range map[string]string{"/etc/monky-deployd/config.yaml": cfg, "/var/lib/monky-deployd/state.json": state,
		"/etc/monky-deployd/bootstrap.jwt": "x.y.z"} {
		if got := b.read(p); got != want {
			t.Errorf("%s changed by the migration: %q", p, got)
		}
	}
	if b.exists("/opt/monky-deployd/venv/bin/monky-deployd") || b.exists("/lib/systemd/system/"+timer) {
		t.Error("the Python package's files survived the migration")
	}
	if !contains(b.members("ziti"), "monky-deployd") {
		t.Error("the migration did not add monky-deployd to the ziti group")
	}
}

func TestRemoveAndPurge(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.deb)
	b.configure("proxy")
	b.write("/var/lib/monky-deployd/state.json", "{}", 0o600)

	b.dpkg("-r", "monky-deployd")
	// deb-systemd-invoke stops the units through systemctl; deb-systemd-helper removes their links.
	calls := b.calls("systemctl")
	if !contains(calls, "stop "+timer+" "+proxy) {
		t.Errorf("remove: no `systemctl stop %s %s` in %q", timer, proxy, calls)
	}
	if b.enabled(timer) || b.active(timer) || b.enabled(proxy) || b.active(proxy) {
		t.Error("remove left a unit enabled or running")
	}
	if links, _ := filepath.Glob(b.path("etc/systemd/system/*.wants/monky-deployd*")); len(links) != 0 {
		t.Errorf("remove left enablement links: %q", links)
	}
	if b.exists("/usr/bin/monky-deployd") {
		t.Error("remove left the binary")
	}
	if !b.exists("/etc/monky-deployd/config.yaml") || !b.exists("/var/lib/monky-deployd/state.json") {
		t.Error("remove (not purge) deleted config or state")
	}

	b.dpkg("-P", "monky-deployd")
	for _, p := range []string{"/etc/monky-deployd", "/var/lib/monky-deployd", "/var/lib/monky-deployd-package",
		"/var/lib/systemd/deb-systemd-helper-enabled/monky-deployd.timer.dsh-also",
		"/var/lib/systemd/deb-systemd-helper-enabled/monky-deployd-proxy.service.dsh-also"} {
		if b.exists(p) {
			t.Errorf("purge left %s", p)
		}
	}
	if got := b.packageStatus("monky-deployd"); got != "unknown" && !strings.HasPrefix(got, "pn") {
		t.Errorf("dpkg still knows the package after purge: %q", got)
	}
	if b.exists("/var/lib/dpkg/info/monky-deployd.list") || b.exists("/var/lib/dpkg/info/monky-deployd.conffiles") {
		t.Error("purge left dpkg's file lists")
	}
}

// TestMaintainerScriptArguments drives the installed scripts with every argument shape dpkg
// (and rpm) can pass, including the ones no dpkg run above reaches.
func TestMaintainerScriptArguments(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.deb)
	b.configure("proxy")
	for _, tc := range []struct {
		script   string
		args     string
		wantCode int
		disables bool
	}{
		{"prerm", "upgrade 0.3.0", 0, false},
		{"prerm", "failed-upgrade 0.2.0 0.3.0", 0, false},
		{"prerm", "deconfigure in-favour other 1.0 removing monky-deployd 0.2.0", 0, false},
		{"prerm", "1", 0, false},
		{"prerm", "2", 0, false},
		{"prerm", "bogus", 1, false},
		{"postinst", "abort-upgrade 0.3.0", 0, false},
		{"postinst", "abort-remove", 0, false},
		{"postinst", "abort-deconfigure in-favour other 1.0", 0, false},
		{"postinst", "bogus", 1, false},
		{"postrm", "upgrade 0.3.0", 0, false},
		{"postrm", "failed-upgrade 0.2.0 0.3.0", 0, false},
		{"postrm", "abort-upgrade 0.2.0", 0, false},
		{"postrm", "abort-install", 0, false},
		{"postrm", "disappear other 1.0", 0, false},
		{"preinst", "abort-upgrade 0.3.0", 0, false},
		// rpm's numeric arguments (the package is built as a .deb only; see prerm.sh).
		{"preinst", "1", 0, false},
		{"preinst", "2", 0, false},
		{"postinst", "1", 0, false},
		{"postinst", "2", 0, false},
		{"postrm", "1", 0, false},
		{"postrm", "bogus", 1, false},
		{"preinst", "bogus", 1, false},
		{"prerm", "0", 0, true},
		{"prerm", "remove", 0, true},
	} {
		t.Run(tc.script+" "+tc.args, func(t *testing.T) {
			if tc.disables {
				b.configure("proxy")
			}
			b.clearCalls()
			_, err := b.maintscript(tc.script, tc.args)
			code := 0
			if err != nil {
				code = exitCode(err)
			}
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d (%v)", code, tc.wantCode, err)
			}
			calls := b.calls("systemctl")
			if tc.disables {
				if b.enabled(timer) || b.enabled(proxy) {
					t.Errorf("a removal left units enabled; calls %q", calls)
				}
				return
			}
			noDisableOrStop(t, calls)
			if !b.enabled(timer) || !b.active(timer) {
				t.Errorf("timer switched off; calls %q", calls)
			}
		})
	}
}

// TestProxyFailureDoesNotKeepTheTimerOff: on the repair after a 0.1.8 upgrade, the timer comes
// first and a proxy unit that will not start is a warning — not an abort that leaves the timer
// off and the package half-configured.
func TestProxyFailureDoesNotKeepTheTimerOff(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old018Deb)
	b.configure("proxy")
	b.write("/etc/standin-systemctl-fail", proxy+"\n", 0o644)
	out := b.dpkg("-i", a.deb)
	if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
		t.Fatalf("status %q: a failing proxy failed the upgrade\n%s", got, out)
	}
	if !b.enabled(timer) || !b.active(timer) {
		t.Errorf("timer enabled=%v active=%v; calls %q\n%s", b.enabled(timer), b.active(timer), b.calls("systemctl"), out)
	}
	if !strings.Contains(out, "warning: upgrade from 0.1.8: "+proxy+" did not start") {
		t.Errorf("the proxy failure was not reported:\n%s", out)
	}
	if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, proxy+" did not start") {
		t.Errorf("the proxy failure did not reach the journal (logger calls %q)", logged)
	}
	if b.exists(upgradeMarker) {
		t.Error("the upgrade marker was left behind")
	}
}

// TestInterruptedConfigureStillHeals: a configure that fails before the repair is done (here:
// systemctl cannot enable the timer) keeps the preinst's upgrade record, so the
// `dpkg --configure -a` that follows still knows it is finishing an upgrade from 0.1.8.
func TestInterruptedConfigureStillHeals(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old018Deb)
	b.configure("sdk")
	b.write("/etc/standin-systemctl-fail", timer+"\n", 0o644)
	if out, err := b.tryDpkg("-i", a.deb); err == nil {
		t.Fatalf("the configure succeeded although the timer could not be enabled:\n%s", out)
	}
	if got := b.packageStatus("monky-deployd"); strings.HasPrefix(got, "ii ") {
		t.Fatalf("status %q: the test needs a half-configured package", got)
	}
	if !b.exists(upgradeMarker) {
		t.Error("the failed configure dropped the upgrade record")
	}
	if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, "error: upgrade from 0.1.8") ||
		!strings.Contains(logged, "could not re-enable "+timer) {
		t.Errorf("the failed repair left no error line in the journal (logger calls %q)", logged)
	}
	b.remove("/etc/standin-systemctl-fail")
	out := b.dpkg("--configure", "-a")
	if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
		t.Fatalf("status %q after dpkg --configure -a\n%s", got, out)
	}
	if !b.enabled(timer) || !b.active(timer) {
		t.Errorf("the re-run did not heal the timer; calls %q\n%s", b.calls("systemctl"), out)
	}
	if !strings.Contains(out, "re-enabled and started "+timer) {
		t.Errorf("the re-run does not say it re-enabled the timer:\n%s", out)
	}
	if b.exists(upgradeMarker) {
		t.Error("the upgrade marker was left behind after the successful re-run")
	}
}

// TestHurtBoxHealsOnUpgradeFrom019: a box that went 0.1.8 -> 0.1.9 lost its timer to 0.1.8's
// prerm and is still off on 0.1.9. The upgrade to this package turns it back on — unless the
// operator marked it as switched off on purpose, or masked it.
func TestHurtBoxHealsOnUpgradeFrom019(t *testing.T) {
	a := build(t)
	for _, tc := range []struct {
		name      string
		transport string
		prepare   string // shell run in the box before the upgrade, after configure
		wantTimer bool
		wantSay   string
		noEnable  bool
	}{
		{"disabled sdk box", "sdk", "systemctl disable --now " + timer, true,
			"upgrade from 0.1.9 (the timer was disabled, most likely by the 0.1.8 prerm of an earlier upgrade): re-enabled and started " + timer, false},
		{"disabled proxy box", "proxy", "systemctl disable --now " + timer + " && systemctl disable --now " + proxy, true,
			"re-enabled and started " + proxy, false},
		{"disabled by the operator", "sdk", "systemctl disable --now " + timer + " && touch /etc/monky-deployd/timer.disabled-by-operator", false,
			timer + " left as it is (/etc/monky-deployd/timer.disabled-by-operator exists)", true},
		{"masked", "sdk", "systemctl disable --now " + timer + " && systemctl mask " + timer, false,
			timer + " is masked; left as it is", true},
		{"healthy box", "sdk", "true", true, "", true},
		// A runtime enablement (gone at the next reboot), made for the unit file the upgrade installs.
		{"enabled for this boot only", "sdk", "systemctl disable --now " + timer + " && mkdir -p /run/systemd/system/timers.target.wants && ln -s /usr/lib/systemd/system/" +
			timer + " /run/systemd/system/timers.target.wants/" + timer, true,
			"re-enabled and started " + timer + " (it was disabled)", false},
		{"linked, not enabled", "sdk", "systemctl disable --now " + timer + " && mkdir -p /opt/units && cp /lib/systemd/system/" + timer +
			" /opt/units/ && ln -s /opt/units/" + timer + " /etc/systemd/system/" + timer, true,
			"re-enabled and started " + timer + " (it was disabled)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.old019Deb)
			b.configure(tc.transport)
			b.mustSh(tc.prepare)
			b.clearCalls()
			out := b.dpkg("-i", a.deb)
			calls := b.calls("systemctl")
			if got := b.enabled(timer) && b.active(timer); got != tc.wantTimer {
				t.Errorf("timer enabled and active = %v, want %v; calls %q\n%s", got, tc.wantTimer, calls, out)
			}
			if tc.transport == "proxy" && (!b.enabled(proxy) || !b.active(proxy)) {
				t.Errorf("the proxy was not healed; calls %q", calls)
			}
			if tc.wantSay != "" {
				if !strings.Contains(out, tc.wantSay) {
					t.Errorf("dpkg's output lacks %q:\n%s", tc.wantSay, out)
				}
				if logged := strings.Join(b.calls("logger"), "\n"); !strings.Contains(logged, tc.wantSay) {
					t.Errorf("the journal lacks %q (logger calls %q)", tc.wantSay, logged)
				}
			}
			if tc.noEnable && contains(calls, "enable --now "+timer) {
				t.Errorf("the timer was enabled: %q", calls)
			}
			// (reenable is expected: the stand-in 0.1.9 kept its units under /lib/systemd/system.)
			if containsPrefix(calls, "disable") || containsPrefix(calls, "stop") {
				t.Errorf("the upgrade switched something off: %q", calls)
			}
		})
	}
}

// TestUpgradedFromFile: postinst leaves the old version for the agent to report as
// upgraded_from — one line, root 0644 in the state directory — and nothing on a reinstall of the
// same version.
func TestUpgradedFromFile(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker"}})
	b.dpkg("-i", a.old019Deb)
	b.configure("sdk")
	b.dpkg("-i", a.deb)
	const p = "/var/lib/monky-deployd/upgraded-from"
	if got := b.read(p); got != "0.1.9\n" {
		t.Errorf("%s = %q, want %q", p, got, "0.1.9\n")
	}
	assertMode(t, b, p, 0o644, 0, 0)
	b.remove(p)
	b.dpkg("-i", a.deb)
	if b.exists(p) {
		t.Errorf("a reinstall of the same version wrote %s = %q", p, b.read(p))
	}
	b.dpkg("-i", a.prevDeb)
	b.dpkg("-i", a.deb)
	if got := b.read(p); got != a.version+"~rc1\n" {
		t.Errorf("%s = %q after an upgrade from the previous build", p, got)
	}
}
