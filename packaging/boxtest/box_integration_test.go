//go:build integration

package boxtest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
)

// firstFire bounds the wait for a check-in the timer makes on its own: two intervals, plus the
// tick itself (a first tick logs in to OpenBao and may deploy) and a booting box's slack.
const firstFire = 2*interval + 20*time.Second

// TestBoxLifecycle walks one box through its life with real systemd and real dpkg: install.sh
// from a `fleetctl onboard` kit, the timer's own check-ins, an apply of a real app through the
// host's engine, an upgrade ours → ours without a gap, a reboot, remove and purge.
func TestBoxLifecycle(t *testing.T) {
	a := build(t)
	w := theWorld(t)
	env := newEnv(t, w, "life")
	pkgs := newPackageServer(t, a)
	b := newBox(t, a)

	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow() // every step stands on the one before
		}
	}

	var installed time.Time
	step("install.sh from the kit; the timer checks in on its own", func(t *testing.T) {
		out := b.installFromKit(w, env, pkgs)
		installed = time.Now()
		if !strings.Contains(out, "enabled and started monky-deployd.timer") {
			t.Errorf("install.sh did not say it enabled the timer:\n%s", out)
		}
		if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
			t.Errorf("after install.sh the timer is %s/%s, want enabled/active", en, act)
		}
		c := waitCheckin(t, w, env, installed.Add(-time.Second), firstFire, "the timer's first tick", nil)
		if c.Request.AgentVersion != a.version || c.Request.Transport != "system" {
			t.Errorf("check-in says agent %q transport %q, want %q system", c.Request.AgentVersion, c.Request.Transport, a.version)
		}
		if c.Request.Timer == nil || c.Request.Timer.Enabled == nil || !*c.Request.Timer.Enabled {
			t.Errorf("the agent reports its timer as %+v, want enabled", c.Request.Timer)
		}
		// Transport system with ziti-edge-tunnel's unit active: the tunneller renews the identity,
		// the agent only reports its horizon (issue 21) and never asks the controller to extend.
		if c.Request.IdentityNotAfter != "2126-01-01T00:00:00Z" {
			t.Errorf("the check-in carries identity_not_after %q, want the stand-in identity's 2126-01-01T00:00:00Z", c.Request.IdentityNotAfter)
		}
		// A second check-in one interval later: the timer repeats, nobody starts the unit.
		waitCheckin(t, w, env, c.At, interval+15*time.Second, "the timer's next tick", nil)
		// And it is the timer that started the ticks: systemd recorded its elapse.
		if last := b.unitProp("monky-deployd.timer", "LastTriggerUSec"); last == "" || last == "n/a" || strings.HasPrefix(last, "0") {
			t.Errorf("the timer never elapsed (LastTriggerUSec %q), yet the agent checked in", last)
		}
		// Only the unit ran the agent: its journal has the ticks, under the package's user.
		if out := b.sh("journalctl -u monky-deployd.service --no-pager -o cat | grep -c 'checkin' || true"); out == "0" {
			t.Errorf("the unit's journal shows no tick")
		}
		if out := b.sh("journalctl -u monky-deployd.service --no-pager -o cat | grep -c 'identity: \\(certificate renewed\\|renewal failed\\|cannot renew\\)' || true"); out != "0" {
			t.Errorf("the agent tried to renew an identity the tunneller holds (%s journal lines)", out)
		}
		if out := b.sh("ps -o user= -C monky-deployd || true"); out != "" && !strings.Contains(out, "monky-d") {
			t.Errorf("the agent runs as %q, want monky-deployd", out)
		}
		if _, err := b.exec("test", "-e", "/etc/monky-deployd/bootstrap.jwt"); err == nil {
			t.Error("the bootstrap grant is still staged after the agent's first check-ins")
		}
	})

	step("an apply of a real app through the host's engine", func(t *testing.T) {
		sha, err := w.Deploy(env, "hello")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		outs, err := w.WaitReports(ctx, []string{env}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if o := outs[0]; !o.Converged() || o.Sha != sha {
			t.Fatalf("the box reported %+v on %s, want applied", o.Report, sha[:12])
		}
		ps := b.sh("cd / && docker ps --filter label=com.docker.compose.project=monky-" + env + " --format '{{.Names}} {{.Status}}'")
		if strings.Count(ps, "(healthy)") != 2 {
			t.Errorf("want web and worker healthy on the engine, got:\n%s", ps)
		}
		// That apply ran under the hardened unit as shipped: no capability, unix and internet
		// sockets only, a system call filter, no new privileges, a private /dev.
		for prop, want := range map[string]string{"CapabilityBoundingSet": "", "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
			"NoNewPrivileges": "yes", "PrivateDevices": "yes", "ProtectProc": "invisible", "MemoryDenyWriteExecute": "yes",
			"SystemCallArchitectures": "native"} {
			if got := b.unitProp("monky-deployd.service", prop); got != want {
				t.Errorf("the tick's unit has %s=%q, want %q", prop, got, want)
			}
		}
		if got := b.unitProp("monky-deployd.service", "SystemCallFilter"); got == "" {
			t.Error("the tick's unit has no system call filter")
		}
	})

	step("upgrade ours to ours: no check-in gap over two intervals", func(t *testing.T) {
		b.cp(a.nextDeb, "/root/next.deb")
		before := checkins(w, env)
		from := before[len(before)-1].At
		out := b.sh("dpkg -i /root/next.deb 2>&1")
		upgraded := time.Now()
		c := waitCheckin(t, w, env, upgraded, firstFire, "the upgraded agent", func(c tenancytest.CheckinRecord) bool {
			return c.Request.AgentVersion == a.next
		})
		if c.Request.UpgradedFrom != a.version {
			t.Errorf("the first check-in of %s reports upgraded_from %q, want %q", a.next, c.Request.UpgradedFrom, a.version)
		}
		if gap := maxGap(w, env, from, c.At); gap > 2*interval {
			t.Errorf("a %s gap in check-ins across the upgrade (limit %s); dpkg said:\n%s", gap.Round(time.Second), 2*interval, out)
		}
		if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
			t.Errorf("after the upgrade the timer is %s/%s, want enabled/active", en, act)
		}
	})

	step("a restart of the box: the timer fires after boot", func(t *testing.T) {
		booted := b.restart()
		waitCheckin(t, w, env, booted, firstFire, "the first tick after boot", nil)
		if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
			t.Errorf("after the reboot the timer is %s/%s, want enabled/active", en, act)
		}
	})

	step("remove, then purge: units gone, state gone, nothing enabled", func(t *testing.T) {
		b.sh("dpkg -r monky-deployd")
		removed := time.Now()
		assertNoUnits(t, b)
		if b.sh("test -e /etc/monky-deployd/config.yaml && echo kept || echo gone") != "kept" {
			t.Error("remove (not purge) deleted /etc/monky-deployd/config.yaml")
		}
		time.Sleep(interval + 5*time.Second)
		for _, c := range checkins(w, env) {
			if c.At.After(removed.Add(2 * time.Second)) {
				t.Errorf("a check-in at %s, after the package was removed at %s", c.At.Format(time.TimeOnly), removed.Format(time.TimeOnly))
			}
		}
		b.sh("dpkg -P monky-deployd")
		assertNoUnits(t, b)
		for _, p := range []string{"/var/lib/monky-deployd", "/etc/monky-deployd", "/var/lib/monky-deployd-package", "/usr/bin/monky-deployd"} {
			if got := b.sh("test -e " + p + " && echo present || echo gone"); got != "gone" {
				t.Errorf("after purge %s is %s", p, got)
			}
		}
		if got := b.sh("dpkg-query -W -f='${db:Status-Abbrev}' monky-deployd 2>/dev/null || echo absent"); !strings.HasPrefix(got, "un") && got != "absent" {
			t.Errorf("after purge dpkg says %q", got)
		}
	})
}

// assertNoUnits: no unit of ours loaded, enabled, or linked from a .wants directory.
func assertNoUnits(t *testing.T, b *box) {
	t.Helper()
	if out := b.sh("systemctl list-unit-files --no-legend 'monky-deployd*' | grep -v '^$' || true"); out != "" {
		t.Errorf("unit files left:\n%s", out)
	}
	if out := b.sh("systemctl list-timers --all --no-legend 'monky-deployd*' | grep monky || true"); out != "" {
		t.Errorf("timers left:\n%s", out)
	}
	if out := b.sh("ls /etc/systemd/system/*.wants/ 2>/dev/null | grep monky || true"); out != "" {
		t.Errorf("enablement links left:\n%s", out)
	}
}

// TestBoxUpgradeFrom018HealsTheTimer: a configured box on the 0.1.8 package (whose prerm runs
// `systemctl disable --now` on an upgrade too) gets our package with `dpkg -i`; nobody types
// systemctl, and within two intervals the timer is enabled and active and tenancy sees a
// check-in that reports upgraded_from 0.1.8.
func TestBoxUpgradeFrom018HealsTheTimer(t *testing.T) {
	a := build(t)
	w := theWorld(t)
	env := newEnv(t, w, "old")
	b := newBox(t, a)

	b.cp(a.old018Deb, "/root/old.deb")
	b.sh("dpkg -i /root/old.deb")
	configureAsInstalled(t, b, w, env)
	// The Python agent's state.json, as it left one (it records no version of its own: the
	// version comes from the postinst's upgraded-from file).
	b.write("/root/state.json", `{"env_id": "`+env+`", "last_result": "applied", "updated_at": "2026-09-09T10:00:00.123456"}`)
	b.sh("install -m 0600 -o monky-deployd -g monky-deployd /root/state.json /var/lib/monky-deployd/state.json")
	b.sh("systemctl enable --now monky-deployd.timer")
	if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
		t.Fatalf("the 0.1.8 box's timer is %s/%s before the upgrade, want enabled/active", en, act)
	}

	// The installed prerm is the faulty one: it disables the timer on an upgrade too.
	if prerm := b.sh("cat /var/lib/dpkg/info/monky-deployd.prerm"); !strings.Contains(prerm, "systemctl disable --now monky-deployd.timer") {
		t.Fatalf("the stand-in 0.1.8 package's prerm does not disable the timer:\n%s", prerm)
	}

	b.cp(a.deb, "/root/new.deb")
	// The postinst starts the timer, whose first tick (the check-in with upgraded_from) can
	// come before dpkg -i returns: the window opens before the upgrade.
	upgraded := time.Now()
	out := b.sh("dpkg -i /root/new.deb 2>&1")
	if !strings.Contains(out, "NOTICE: upgrade from 0.1.8") {
		t.Errorf("dpkg's output has no NOTICE of the repair:\n%s", out)
	}
	if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
		t.Errorf("right after dpkg -i the timer is %s/%s, want enabled/active; dpkg said:\n%s", en, act, out)
	}
	// The unit files moved from /lib to /usr/lib, which is one directory on a merged-/usr
	// Debian: the upgrade must not have removed the new units with the old ones.
	for _, u := range []string{"monky-deployd.service", "monky-deployd.timer", "monky-deployd-proxy.service"} {
		if got := b.sh("test -s /usr/lib/systemd/system/" + u + " && echo ok || echo missing"); got != "ok" {
			t.Errorf("after the upgrade /usr/lib/systemd/system/%s is %s", u, got)
		}
	}
	c := waitCheckin(t, w, env, upgraded, 2*interval+10*time.Second, "a check-in with upgraded_from", func(c tenancytest.CheckinRecord) bool {
		return c.Request.UpgradedFrom != ""
	})
	if c.Request.UpgradedFrom != "0.1.8" || c.Request.AgentVersion != a.version {
		t.Errorf("check-in reports agent %q upgraded_from %q, want %q from 0.1.8; dpkg said:\n%s\nthe state directory: %s", c.Request.AgentVersion, c.Request.UpgradedFrom, a.version,
			out, b.sh("ls -la /var/lib/monky-deployd /var/lib/monky-deployd-package 2>&1; cat /var/lib/monky-deployd/upgraded-from 2>&1 || true"))
	}
	if j := b.sh("journalctl --no-pager -o cat -t monky-deployd-postinst"); !strings.Contains(j, "upgrade from 0.1.8") {
		t.Errorf("the repair is not in the journal:\n%s", j)
	}
}

// configureAsInstalled writes what install.sh would have left on a box of env (config for the
// system transport, the kit's bootstrap grant, the tunneller's identity), for boxes set up
// without running it. The agent joins group docker when there is one (install.sh refuses a box
// without it).
func configureAsInstalled(t *testing.T, b *box, w *devstack.World, env string) {
	t.Helper()
	port := strings.TrimPrefix(w.Stack.Tenancy.URL[strings.LastIndex(w.Stack.Tenancy.URL, ":"):], ":")
	b.write("/root/config.yaml", "# written by the box test as install.sh would\nenv_id: "+env+"\nsite: box\ntransport: system\n"+
		"identity: /opt/openziti/etc/identities/monky-host."+env+".json\nlaptop_mode: false\n"+
		"tenancy:\n  service: "+tenancyName+"\n  port: "+port+"\n"+
		"bao:\n  addr: "+baoAddr+"\n  auth_mount: jwt-tenancy\n  role: see-env\n")
	b.write("/root/openbao-ca.pem", string(baoCAPEM))
	b.cp(filepath.Join(w.Kits, env, "bootstrap.jwt"), "/root/bootstrap.jwt")
	b.sh("install -d -m 0770 -o root -g monky-deployd /etc/monky-deployd && " +
		"install -m 0640 -o root -g monky-deployd /root/config.yaml /etc/monky-deployd/config.yaml && " +
		"install -m 0600 -o monky-deployd -g monky-deployd /root/bootstrap.jwt /etc/monky-deployd/bootstrap.jwt && " +
		"install -m 0644 -o root -g root /root/openbao-ca.pem /etc/monky-deployd/openbao-ca.pem && " +
		"rm /root/bootstrap.jwt && if getent group docker >/dev/null; then usermod -a -G docker monky-deployd; fi")
}
