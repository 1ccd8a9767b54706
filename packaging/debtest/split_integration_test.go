//go:build integration

package debtest

import (
	"strings"
	"testing"
)

const exporter = "fleetctl-exporter.service"

// TestFleetctlPackage: monky-fleetctl on its own, with Debian's convention for a unit shipped
// disabled: the install enables and starts nothing; an exporter the operator switched on is
// restarted onto the new binary by an upgrade and keeps its enablement; a removal stops and
// masks it, a reinstall brings it back as it was, a purge forgets it.
func TestFleetctlPackage(t *testing.T) {
	a := build(t)
	b := newBox(t, boxOptions{})
	out := b.dpkg("-i", a.prevFleet)
	if b.enabled(exporter) || b.active(exporter) {
		t.Fatalf("installing monky-fleetctl enabled or started the exporter\n%s", out)
	}
	assertMode(t, b, "/usr/bin/fleetctl", 0o755, 0, 0)
	assertMode(t, b, "/usr/share/monky-fleetctl/prometheus/monky-deployd.rules.yml", 0o644, 0, 0)
	for _, c := range b.calls("systemctl") {
		if strings.HasPrefix(c, "enable") || strings.Contains(c, " start ") || strings.HasPrefix(c, "start") {
			t.Errorf("a fresh install ran systemctl %s", c)
		}
	}
	if b.exists("/usr/bin/monky-deployd") || b.exists("/var/lib/monky-deployd") {
		t.Error("monky-fleetctl brought the agent with it")
	}

	b.mustSh("systemctl enable --now " + exporter)
	b.clearCalls()
	out = b.dpkg("-i", a.fleetDeb)
	if !contains(b.calls("systemctl"), "--quiet --system restart "+exporter) {
		t.Errorf("the upgrade did not restart the running exporter: %q\n%s", b.calls("systemctl"), out)
	}
	if !b.enabled(exporter) || !b.active(exporter) {
		t.Errorf("after the upgrade the exporter is enabled=%v active=%v", b.enabled(exporter), b.active(exporter))
	}

	b.clearCalls()
	b.dpkg("-r", "monky-fleetctl")
	if !contains(b.calls("systemctl"), "stop "+exporter) || b.active(exporter) {
		t.Errorf("remove did not stop the exporter: %q", b.calls("systemctl"))
	}
	if !b.exists("/etc/systemd/system/" + exporter) {
		t.Error("remove did not mask the exporter (deb-systemd-helper mask)")
	}
	b.dpkg("-i", a.fleetDeb)
	if b.exists("/etc/systemd/system/"+exporter) || !b.enabled(exporter) || !b.active(exporter) {
		t.Errorf("a reinstall did not bring the exporter back as it was: masked=%v enabled=%v active=%v",
			b.exists("/etc/systemd/system/"+exporter), b.enabled(exporter), b.active(exporter))
	}
	b.dpkg("-P", "monky-fleetctl")
	if b.enabled(exporter) || b.exists("/etc/systemd/system/"+exporter) ||
		b.exists("/var/lib/systemd/deb-systemd-helper-enabled/"+exporter+".dsh-also") {
		t.Error("purge left the exporter enabled, masked or recorded")
	}
}

// TestUpgradeFrom020SplitsThePackage: a host on release 0.2.0's single package (agent, fleetctl,
// the exporter's unit, the rules) gets the two 0.3.0 packages with one dpkg -i, in either order
// on the command line: both end installed, every file in its new package, the timer never
// stopped or disabled, the running exporter restarted onto monky-fleetctl's binary. A box that
// takes only the agent's package loses fleetctl, and is told so when it ran the exporter.
func TestUpgradeFrom020SplitsThePackage(t *testing.T) {
	a := build(t)
	for _, tc := range []struct {
		name string
		args func() []string
	}{
		{"agent first", func() []string { return []string{a.deb, a.fleetDeb} }},
		// monky-fleetctl Breaks the 0.2.0 package still installed when it comes first: dpkg
		// deconfigures that only with --auto-deconfigure (what apt passes it when it needs to).
		{"fleetctl first, --auto-deconfigure", func() []string { return []string{"--auto-deconfigure", a.fleetDeb, a.deb} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, boxOptions{groups: []string{"docker"}})
			b.dpkg("-i", a.old020Deb)
			if got := b.packageStatus("monky-deployd"); got != "ii 0.2.0" {
				t.Fatalf("release 0.2.0 did not install: %q", got)
			}
			if !b.exists("/usr/bin/fleetctl") || !b.exists("/usr/share/monky-deployd/prometheus/monky-deployd.rules.yml") {
				t.Fatal("the 0.2.0 package is not the single package this test upgrades from")
			}
			b.configure("proxy")
			b.mustSh("systemctl enable --now " + exporter)
			b.clearCalls()
			out := b.dpkg(append([]string{"-i"}, tc.args()...)...)
			for _, p := range []string{"monky-deployd", "monky-fleetctl"} {
				if got := b.packageStatus(p); got != "ii "+a.version {
					t.Errorf("%s is %q after the upgrade\n%s", p, got, out)
				}
			}
			owner := strings.TrimSpace(b.mustSh("dpkg-query -S /usr/bin/fleetctl"))
			if owner != "monky-fleetctl: /usr/bin/fleetctl" {
				t.Errorf("/usr/bin/fleetctl belongs to %q", owner)
			}
			if b.exists("/usr/share/monky-deployd/prometheus/monky-deployd.rules.yml") || !b.exists("/usr/share/monky-fleetctl/prometheus/monky-deployd.rules.yml") {
				t.Error("the alert rules did not move to /usr/share/monky-fleetctl")
			}
			noDisableOrStop(t, b.calls("systemctl"))
			if !b.enabled(timer) || !b.active(timer) || !b.enabled(proxy) || !b.active(proxy) {
				t.Errorf("after the upgrade: timer %v/%v proxy %v/%v\n%s", b.enabled(timer), b.active(timer), b.enabled(proxy), b.active(proxy), out)
			}
			if !b.enabled(exporter) || !b.active(exporter) || !contains(b.calls("systemctl"), "--quiet --system restart "+exporter) {
				t.Errorf("the exporter: enabled=%v active=%v, calls %q", b.enabled(exporter), b.active(exporter), b.calls("systemctl"))
			}
		})
	}
	t.Run("the agent alone", func(t *testing.T) {
		b := newBox(t, boxOptions{groups: []string{"docker"}})
		b.dpkg("-i", a.old020Deb)
		b.configure("sdk")
		b.mustSh("systemctl enable --now " + exporter)
		b.clearCalls()
		out := b.dpkg("-i", a.deb)
		if b.exists("/usr/bin/fleetctl") {
			t.Error("fleetctl stayed with the agent's package")
		}
		noDisableOrStop(t, b.calls("systemctl"))
		if !b.enabled(timer) || !b.active(timer) {
			t.Error("the timer is off after the upgrade")
		}
		if !strings.Contains(out, "moved to the package monky-fleetctl") {
			t.Errorf("the host that ran the exporter was not told where it went:\n%s", out)
		}
	})
}
