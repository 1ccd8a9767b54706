//go:build integration

package boxtest

import (
	"context"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// TestBoxProxyService: monky-deployd-proxy.service under real systemd, against a real OpenZiti
// controller and edge router (`ziti edge quickstart` on the host's loopback; the box shares the
// host's network). install.sh run with the kit's command and --transport proxy enables and
// starts the unit; the timer's ticks reach tenancy and OpenBao only through it (the router hosts
// both, the box has no tunneller in the path); the daemon outlives a restart of the controller
// and router — same process, no restart by systemd — and carries ticks again afterwards; and
// `systemctl stop` stops it cleanly: inactive, result success, not failed.
func TestBoxProxyService(t *testing.T) {
	a := build(t)
	itest.Require(t, itest.PartZiti)
	w := theWorld(t)
	env := newEnv(t, w, "proxy")
	pkgs := newPackageServer(t, a)
	ctrl := itest.StartZiti(t)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	u, err := url.Parse(w.Stack.Tenancy.URL)
	if err != nil {
		t.Fatal(err)
	}
	// The services under the names the kit's config uses (tenancy.service from the kit, bao's
	// default service name), with the dial roles fleetctl onboard gives an agent's identity.
	if err := ctrl.HostService(ctx, tenancyName, u.Host, "monky-deploy-agent"); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.HostService(ctx, "openbao", net.JoinHostPort("127.0.0.1", portOf(t, bao.URL)), "openbao-client"); err != nil {
		t.Fatal(err)
	}
	idDir := t.TempDir()
	identity, err := ctrl.Identity(ctx, "monky-host."+env, []string{"monky-deploy-agent", "openbao-client"}, idDir)
	if err != nil {
		t.Fatal(err)
	}

	b := newBox(t, a)
	// The enrolled identity where the tunneller's enrol would have left it (root, 0600):
	// install.sh finds it enrolled and grants the agent's account the read.
	boxIdentity := "/opt/openziti/etc/identities/monky-host." + env + ".json"
	b.sh("install -d -m 0770 /opt/openziti/etc/identities")
	b.cp(identity, "/root/identity.json")
	b.sh("install -m 0600 -o root -g root /root/identity.json " + boxIdentity + " && rm /root/identity.json")
	out := b.installFromKitEdited(w, env, pkgs, func(line string) string {
		edited := strings.Replace(line, " --transport system", " --transport proxy", 1)
		if edited == line {
			t.Fatalf("the kit's command has no --transport system to change:\n%s", line)
		}
		return edited
	})
	installed := time.Now()
	if !strings.Contains(out, "enabled and started monky-deployd-proxy.service") {
		t.Errorf("install.sh did not say it started the proxy unit:\n%s", out)
	}
	if en, act := b.unit("monky-deployd-proxy.service"); en != "enabled" || act != "active" {
		t.Fatalf("after install.sh the proxy unit is %s/%s, want enabled/active", en, act)
	}
	proxied := func(c tenancytest.CheckinRecord) bool { return c.Request.Transport == "proxy" }
	c := waitCheckin(t, w, env, installed.Add(-time.Second), firstFire, "the first tick through the proxy", proxied)
	c = waitCheckin(t, w, env, c.At, interval+15*time.Second, "the next tick through the proxy", proxied)
	pid, restarts := b.unitProp("monky-deployd-proxy.service", "MainPID"), b.unitProp("monky-deployd-proxy.service", "NRestarts")
	if pid == "0" || pid == "" {
		t.Fatalf("the proxy unit has no main process (MainPID %q)", pid)
	}

	rctx, rcancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer rcancel()
	if err := ctrl.Restart(rctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitCheckin(t, w, env, restarted, 2*time.Minute, "a tick through the proxy after the controller and router restarted", proxied)
	if got := b.unitProp("monky-deployd-proxy.service", "MainPID"); got != pid {
		t.Errorf("the proxy's main process changed across the controller's restart: %s, then %s", pid, got)
	}
	if got := b.unitProp("monky-deployd-proxy.service", "NRestarts"); got != restarts {
		t.Errorf("systemd restarted the proxy across the controller's restart: NRestarts %s, then %s", restarts, got)
	}

	// The kit run again, unchanged: nothing rewritten, the proxy not restarted.
	pid, restarts = b.unitProp("monky-deployd-proxy.service", "MainPID"), b.unitProp("monky-deployd-proxy.service", "NRestarts")
	out = b.installFromKitEdited(w, env, pkgs, func(line string) string {
		return strings.Replace(line, " --transport system", " --transport proxy", 1)
	})
	if !strings.Contains(out, "Nothing changed") {
		t.Errorf("an unchanged re-run of the kit did not say that nothing changed:\n%s", out)
	}
	if got := b.unitProp("monky-deployd-proxy.service", "MainPID"); got != pid || b.unitProp("monky-deployd-proxy.service", "NRestarts") != restarts {
		t.Errorf("an unchanged re-run of the kit restarted the proxy (MainPID %s, then %s)", pid, got)
	}

	b.sh("systemctl stop monky-deployd-proxy.service")
	if got := b.unitProp("monky-deployd-proxy.service", "ActiveState"); got != "inactive" {
		t.Errorf("after systemctl stop the proxy is %q, want inactive", got)
	}
	if got := b.unitProp("monky-deployd-proxy.service", "Result"); got != "success" {
		t.Errorf("the proxy's stop ended with result %q (main status %s), want success; its journal:\n%s", got,
			b.unitProp("monky-deployd-proxy.service", "ExecMainStatus"),
			b.sh("journalctl --no-pager -o cat -n 30 -u monky-deployd-proxy.service"))
	}
	if out, err := b.exec("systemctl", "is-failed", "monky-deployd-proxy.service"); err == nil {
		t.Errorf("systemctl is-failed says the stopped proxy failed: %s", out)
	}
}

// unitProp is one property of unit (systemctl show -p NAME --value).
func (b *box) unitProp(unit, name string) string {
	b.t.Helper()
	return b.sh("systemctl show -p " + name + " --value " + unit)
}

// portOf is the port of rawURL.
func portOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() == "" {
		t.Fatalf("no port in %q: %v", rawURL, err)
	}
	return u.Port()
}
