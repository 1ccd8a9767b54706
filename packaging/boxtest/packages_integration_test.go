//go:build integration

package boxtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/pkgtest"
)

const exporterUnit = "fleetctl-exporter.service"

// TestBoxUpgradeFrom020SplitPackages: a box on release 0.2.0's single package — built from its
// own tree — whose timer ticks and whose exporter serves, gets the two 0.3.0 packages with one
// dpkg -i. The timer is never stopped or disabled (no check-in gap beyond two intervals), the
// first check-in of the new agent reports upgraded_from 0.2.0, fleetctl and the exporter's unit
// now belong to monky-fleetctl, and the exporter, restarted onto the new binary under its
// hardened unit, serves the fleet's verdicts.
func TestBoxUpgradeFrom020SplitPackages(t *testing.T) {
	a := build(t)
	w := theWorld(t)
	env := newEnv(t, w, "split")
	b := newBox(t, a)

	b.cp(a.old020Deb, "/root/old.deb")
	b.sh("dpkg -i /root/old.deb")
	if got := b.sh("dpkg-query -W -f='${Version}' monky-deployd"); got != "0.2.0" {
		t.Fatalf("release 0.2.0 installed as %q", got)
	}
	if b.sh("test -x /usr/bin/fleetctl && test -f /usr/lib/systemd/system/"+exporterUnit+" && echo single") != "single" {
		t.Fatal("the 0.2.0 package is not the single package this test upgrades from")
	}
	configureAsInstalled(t, b, w, env)
	b.sh("systemctl enable --now monky-deployd.timer")
	started := time.Now()
	waitCheckin(t, w, env, started.Add(-time.Second), firstFire, "0.2.0's first tick", func(c tenancytest.CheckinRecord) bool {
		return c.Request.AgentVersion == "0.2.0"
	})
	port := freePort(t)
	setUpExporter(t, b, w, port)
	b.sh("systemctl enable --now " + exporterUnit)
	b.waitMetrics(port, env)
	oldPID := b.unitProp(exporterUnit, "MainPID")

	b.cp(a.deb, "/root/"+filepath.Base(a.deb))
	b.cp(a.fleetDeb, "/root/"+filepath.Base(a.fleetDeb))
	from := checkins(w, env)[len(checkins(w, env))-1].At
	upgraded := time.Now() // before dpkg: its postinst may start the first tick before it returns
	out := b.sh("dpkg -i /root/" + filepath.Base(a.deb) + " /root/" + filepath.Base(a.fleetDeb) + " 2>&1")
	if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
		t.Errorf("right after the upgrade the timer is %s/%s, want enabled/active; dpkg said:\n%s", en, act, out)
	}
	for _, p := range []string{"monky-deployd", "monky-fleetctl"} {
		if got := b.sh("dpkg-query -W -f='${db:Status-Abbrev}${Version}' " + p); got != "ii "+a.version {
			t.Errorf("%s is %q after the upgrade\n%s", p, got, out)
		}
	}
	if got := b.sh("dpkg-query -S /usr/bin/fleetctl /usr/lib/systemd/system/" + exporterUnit + " | cut -d: -f1 | sort -u"); got != "monky-fleetctl" {
		t.Errorf("fleetctl and its unit belong to %q, want monky-fleetctl", got)
	}
	c := waitCheckin(t, w, env, upgraded, firstFire, "the 0.3.0 agent", func(c tenancytest.CheckinRecord) bool {
		return c.Request.AgentVersion == a.version
	})
	if c.Request.UpgradedFrom != "0.2.0" {
		t.Errorf("the first 0.3.0 check-in reports upgraded_from %q, want 0.2.0", c.Request.UpgradedFrom)
	}
	if gap := maxGap(w, env, from, c.At); gap > 2*interval {
		t.Errorf("a %s gap in check-ins across the split upgrade (limit %s); dpkg said:\n%s", gap.Round(time.Second), 2*interval, out)
	}

	// The exporter: restarted onto monky-fleetctl's binary, under the hardened unit, serving.
	if en, act := b.unit(exporterUnit); en != "enabled" || act != "active" {
		t.Fatalf("after the upgrade the exporter is %s/%s, want enabled/active", en, act)
	}
	pid := b.unitProp(exporterUnit, "MainPID")
	if pid == oldPID || pid == "0" {
		t.Errorf("the exporter was not restarted onto the new binary (MainPID %s, then %s)", oldPID, pid)
	}
	if exe := b.sh("readlink /proc/" + pid + "/exe"); exe != "/usr/bin/fleetctl" {
		t.Errorf("the exporter runs %q, want /usr/bin/fleetctl", exe)
	}
	for prop, want := range map[string]string{"PrivateUsers": "yes", "DynamicUser": "yes", "CapabilityBoundingSet": "",
		"RestrictAddressFamilies": "AF_INET AF_INET6", "ProtectProc": "invisible"} {
		if got := b.unitProp(exporterUnit, prop); got != want {
			t.Errorf("the running exporter has %s=%q, want %q (the hardened unit)", prop, got, want)
		}
	}
	b.waitMetrics(port, env)
}

// TestBoxReinstallKeepsTheOperatorsSettings: install.sh run again with the same kit changes
// nothing — no file rewritten (config.yaml keeps its inode and mtime), no unit restarted (the
// timer's and the proxy's activation stamps stay), the spent bootstrap grant not staged again —
// and says so; the operator's tuning of config.yaml survives it, and a kit value that does change
// (laptop_mode) is set without losing that tuning, the file before it kept aside. (The proxy's
// part — not restarted by an unchanged re-run — is in TestBoxProxyService, which has the real
// controller the proxy needs.)
func TestBoxReinstallKeepsTheOperatorsSettings(t *testing.T) {
	a := build(t)
	w := theWorld(t)
	env := newEnv(t, w, "rerun")
	pkgs := newPackageServer(t, a)
	b := newBox(t, a)

	b.installFromKit(w, env, pkgs)
	installed := time.Now()
	waitCheckin(t, w, env, installed.Add(-time.Second), firstFire, "the first tick", nil)
	if _, err := b.exec("test", "-e", "/etc/monky-deployd/bootstrap.jwt"); err == nil {
		t.Fatal("the bootstrap grant is still staged after the agent's first check-in")
	}
	stamp := func() string {
		return b.sh("stat -c '%i %Y' /etc/monky-deployd/config.yaml; systemctl show -p ActiveEnterTimestampMonotonic,InvocationID --value monky-deployd.timer")
	}

	before := stamp()
	out := b.installFromKit(w, env, pkgs)
	if !strings.Contains(out, "Nothing changed") {
		t.Errorf("a re-run of the same kit did not say that nothing changed:\n%s", out)
	}
	if after := stamp(); after != before {
		t.Errorf("a re-run of the same kit rewrote the config or restarted the timer:\n%s\nthen\n%s\n%s", before, after, out)
	}
	if _, err := b.exec("test", "-e", "/etc/monky-deployd/bootstrap.jwt"); err == nil {
		t.Error("a re-run staged the spent bootstrap grant again")
	}

	b.tune()
	tuned := b.sh("cat /etc/monky-deployd/config.yaml")
	before = stamp()
	out = b.installFromKit(w, env, pkgs)
	if got := b.sh("cat /etc/monky-deployd/config.yaml"); got != tuned {
		t.Errorf("a re-run changed the tuned config:\n%s\nwant:\n%s", got, tuned)
	}
	if after := stamp(); after != before || !strings.Contains(out, "Nothing changed") {
		t.Errorf("a re-run over the operator's tuning rewrote or restarted something:\n%s", out)
	}
	tick := time.Now()
	waitCheckin(t, w, env, tick, firstFire, "a tick on the tuned config", nil)

	// A kit value that changes is set; the tuning stays; the previous file is kept aside.
	out = b.installFromKitEdited(w, env, pkgs, func(line string) string { return line + " --laptop" })
	cfg := b.sh("cat /etc/monky-deployd/config.yaml")
	for _, want := range []string{"laptop_mode: true", "timeout_s: 90", "# tenancy answers this box slowly", "healthy_timeout_s: 900"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("after a kit change the config lacks %q:\n%s", want, cfg)
		}
	}
	if !strings.Contains(out, "the kit sets laptop_mode") {
		t.Errorf("install.sh did not name the key it changed:\n%s", out)
	}
	if prev := b.sh("cat /etc/monky-deployd/config.yaml.prev"); prev != tuned {
		t.Errorf("config.yaml.prev is not the file before the change:\n%s", prev)
	}
	tick = time.Now()
	waitCheckin(t, w, env, tick, firstFire, "a tick on the changed config", nil)
}

// TestBoxOpenZitiKeyPinned: on a box without ziti-edge-tunnel, install.sh and the ansible role
// fetch OpenZiti's apt key — here one planted in its place — and refuse it: its fingerprint is
// not the pinned one; both fingerprints are shown, and nothing is trusted: no keyring, no apt
// source.
func TestBoxOpenZitiKeyPinned(t *testing.T) {
	a := build(t)
	w := theWorld(t)
	env := newEnv(t, w, "keypin")
	pkgs := newPackageServer(t, a)
	b := newBox(t, a)
	b.sh("rm /usr/local/bin/ziti-edge-tunnel")

	planted, plantedFpr := pkgtest.OpenPGPKey(t, "OpenZiti Developers <developers@openziti.org>")
	keys := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { rw.Write(planted) }))
	t.Cleanup(keys.Close)
	const pinned = "34CBCF18427D8814B5BDBB0DDE3623EF08C996E5"
	trusted := func() string {
		return b.sh("ls /usr/share/keyrings/openziti.asc /etc/apt/sources.list.d/openziti.list 2>/dev/null || true")
	}

	out, err := b.tryInstallFromKit(w, env, pkgs, nil, []string{"MONKY_DEPLOYD_OPENZITI_KEY_URL=" + keys.URL + "/tun/package-repos.gpg"})
	if err == nil {
		t.Fatalf("install.sh trusted a planted OpenZiti key:\n%s", out)
	}
	if !strings.Contains(out, plantedFpr) || !strings.Contains(out, pinned) || !strings.Contains(out, "not trusted") {
		t.Errorf("install.sh's refusal does not show both fingerprints (%s, pinned %s):\n%s", plantedFpr, pinned, out)
	}
	if got := trusted(); got != "" {
		t.Errorf("install.sh left the refused key trusted: %s", got)
	}

	playbook, err := exec.LookPath("ansible-playbook")
	if err != nil {
		missing(t, "ansible-playbook not found (scripts/packaging-deps.sh installs Debian's ansible)")
	}
	out, err = roleTrier(t, playbook, w, env, pkgs, b)(`{"monky_deployd_ziti_repo_key_url": "` + keys.URL + `/tun/package-repos.gpg"}`)
	if err == nil {
		t.Fatalf("the role trusted a planted OpenZiti key:\n%s", out)
	}
	if !strings.Contains(out, plantedFpr) || !strings.Contains(out, pinned) {
		t.Errorf("the role's refusal does not show both fingerprints (%s, pinned %s):\n%s", plantedFpr, pinned, out)
	}
	if got := trusted(); got != "" {
		t.Errorf("the role left the refused key trusted: %s", got)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// setUpExporter gives the box the exporter's settings as OPERATIONS.md says to: the controller
// and tenancy's admin API in /etc/fleetctl/config.yaml, their secrets in the root-only
// /etc/fleetctl/exporter.env, the listen address on loopback at port.
func setUpExporter(t *testing.T, b *box, w *devstack.World, port int) {
	t.Helper()
	stackDir := filepath.Dir(w.Stack.FleetctlConfig())
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(stackDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	ca, err := os.ReadFile(filepath.Join(stackDir, "ziti-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	b.write("/etc/fleetctl/ziti-ca.pem", string(ca))
	b.write("/etc/fleetctl/config.yaml", fmt.Sprintf("ziti:\n  url: %s\n  username: admin\n  ca_file: /etc/fleetctl/ziti-ca.pem\n"+
		"tenancy:\n  url: %s\nexporter:\n  listen: 127.0.0.1:%d\n", w.Stack.ZitiURL(), w.Stack.Admin.URL, port))
	b.write("/etc/fleetctl/exporter.env", "FLEETCTL_ZITI_PASSWORD="+read("ziti-password")+"\nFLEETCTL_TENANCY_TOKEN="+read("tenancy-token")+"\n")
	b.sh("chmod 0600 /etc/fleetctl/exporter.env")
}

// waitMetrics waits until the exporter on the box serves a verdict for env.
func (b *box) waitMetrics(port int, env string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	var out string
	for ctx.Err() == nil {
		out, _ = b.exec("curl", "-fsS", url)
		if strings.Contains(out, `monky_fleet_env_verdict{`) && strings.Contains(out, `env="`+env+`"`) {
			return
		}
		time.Sleep(time.Second)
	}
	b.t.Fatalf("the exporter on the box serves no verdict for %s at %s:\n%s\nits journal:\n%s", env, url, out,
		b.sh("journalctl --no-pager -o cat -n 30 -u "+exporterUnit))
}
