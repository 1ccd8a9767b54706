//go:build integration

package debtest

import (
	"os"
	"strings"
	"testing"
)

// firstInstall runs install.sh once on a fresh installBox, as the kit does.
func firstInstall(t *testing.T) (*box, []string) {
	t.Helper()
	a := build(t)
	b := installBox(t)
	reg := newRegistry(t, a.version, a.deb)
	env := []string{"MONKY_DEPLOYD_BASE_URL=" + reg.base(), "MONKY_DEPLOYD_TOKEN=" + deployToken}
	out, err := b.installSh(env, "--env", envID, "--site", "cbs", "--bootstrap-file", "/root/kit/bootstrap.jwt",
		"--enrol-jwt", "/root/kit/monky-host."+envID+".jwt")
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	if !b.enabled(timer) {
		t.Fatal("the first install did not enable the timer")
	}
	return b, env
}

// TestInstallScriptHonoursTheOptOut: on a box switched off on purpose (the opt-out file),
// install.sh — a --version upgrade included — leaves the timer and the proxy unit off and says
// so; --enable-timer overrides it and removes the file.
func TestInstallScriptHonoursTheOptOut(t *testing.T) {
	a := build(t)
	b, env := firstInstall(t)
	b.mustSh("systemctl disable --now " + timer + " && touch " + optOut)
	b.clearCalls()
	out, err := b.installSh(env, "--env", envID, "--site", "cbs", "--transport", "proxy", "--version", a.version)
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	if b.enabled(timer) || b.active(timer) || b.enabled(proxy) || b.active(proxy) {
		t.Errorf("install.sh switched units on despite %s; calls %q\n%s", optOut, b.calls("systemctl"), out)
	}
	if want := "NOT enabling monky-deployd.timer (nor the proxy unit): " + optOut + " exists"; !strings.Contains(out, want) {
		t.Errorf("install.sh did not say %q:\n%s", want, out)
	}
	if !strings.Contains(out, "--enable-timer") {
		t.Errorf("install.sh did not name the override:\n%s", out)
	}
	if !b.exists(optOut) {
		t.Error("install.sh removed the opt-out file without --enable-timer")
	}

	b.clearCalls()
	out, err = b.installSh(env, "--env", envID, "--site", "cbs", "--transport", "proxy", "--version", a.version, "--enable-timer")
	if err != nil {
		t.Fatalf("install.sh --enable-timer: %v\n%s", err, out)
	}
	if !b.enabled(timer) || !b.active(timer) || !b.enabled(proxy) {
		t.Errorf("--enable-timer: timer %v/%v proxy %v; calls %q\n%s", b.enabled(timer), b.active(timer), b.enabled(proxy), b.calls("systemctl"), out)
	}
	if b.exists(optOut) {
		t.Error("--enable-timer kept the opt-out file")
	}
	if !strings.Contains(out, "removed "+optOut+" (--enable-timer)") {
		t.Errorf("install.sh did not report removing the opt-out file:\n%s", out)
	}
}

// reissuedJWT is the bootstrap grant of a reissued kit (fleetctl onboard --reissue).
const reissuedJWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhZ2VudDplbnYtcWEtMDIiLCJyZWlzc3VlZCI6dHJ1ZX0.c2lnbmF0dXJlMg"

// TestInstallScriptReplacesPlantedSymlinks: /etc/monky-deployd is writable by the agent's group;
// symlinks planted at every name install.sh writes there are replaced, never written through.
func TestInstallScriptReplacesPlantedSymlinks(t *testing.T) {
	a := build(t)
	b, env := firstInstall(t)
	before := b.read("/etc/monky-deployd/config.yaml")
	names := []string{"config.yaml.prev", "config.yaml.new", "openbao-ca.pem", "bootstrap.jwt"}
	for i, name := range names {
		v := "/etc/victim" + string(rune('1'+i))
		b.write(v, "secret "+name+"\n", 0o600)
		b.mustSh("rm -f /etc/monky-deployd/" + name + " && ln -s " + v + " /etc/monky-deployd/" + name)
	}
	// A reissued kit's grant: install.sh stages a grant once (issue 23), so the first install's
	// grant would leave the planted link alone and this test would not look at bootstrap.jwt.
	b.write("/root/kit2/bootstrap.jwt", reissuedJWT+"\n", 0o600)
	out, err := b.installSh(env, "--env", envID, "--site", "cbs", "--transport", "proxy", "--version", a.version,
		"--bao-ca", "/root/kit/openbao-ca.pem", "--bootstrap-file", "/root/kit2/bootstrap.jwt")
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	for i, name := range names {
		v := "/etc/victim" + string(rune('1'+i))
		if got := b.read(v); got != "secret "+name+"\n" {
			t.Errorf("install.sh wrote through the symlink at %s into %s: %q", name, v, got)
		}
		if st, err := os.Stat(b.path(v)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode changed (%v)", v, err)
		}
	}
	for _, name := range []string{"config.yaml.prev", "openbao-ca.pem", "bootstrap.jwt", "config.yaml"} {
		st, err := os.Lstat(b.path("/etc/monky-deployd/" + name))
		if err != nil || !st.Mode().IsRegular() {
			t.Errorf("/etc/monky-deployd/%s is not a regular file: %v", name, err)
		}
	}
	if got := strings.TrimSpace(b.read("/etc/monky-deployd/bootstrap.jwt")); got != reissuedJWT {
		t.Errorf("bootstrap.jwt = %q, want the reissued kit's grant", got)
	}
	if got := b.read("/etc/monky-deployd/config.yaml.prev"); got != before {
		t.Errorf("config.yaml.prev = %q, want the previous config", got)
	}
	gid, uid := b.id("group", "monky-deployd"), b.id("passwd", "monky-deployd")
	assertMode(t, b, "/etc/monky-deployd/config.yaml", 0o640, 0, gid)
	assertMode(t, b, "/etc/monky-deployd/config.yaml.prev", 0o640, 0, gid)
	assertMode(t, b, "/etc/monky-deployd/bootstrap.jwt", 0o600, uid, gid)
	assertMode(t, b, "/etc/monky-deployd/openbao-ca.pem", 0o644, 0, 0)

	// config.yaml itself a symlink: install.sh merges the kit's keys into the config it reads,
	// so it would read the target into a file the agent can read. It stops and names the link
	// (issue 23), and neither reads, writes nor replaces what the link points at.
	prev := b.read("/etc/monky-deployd/config.yaml.prev")
	b.write("/etc/victim9", "secret config\n", 0o600)
	b.mustSh("rm -f /etc/monky-deployd/config.yaml && ln -s /etc/victim9 /etc/monky-deployd/config.yaml")
	out, err = b.installSh(env, "--env", envID, "--site", "cbs", "--version", a.version)
	if err == nil || !strings.Contains(out, "/etc/monky-deployd/config.yaml is a symlink") || !strings.Contains(out, "rm /etc/monky-deployd/config.yaml") {
		t.Errorf("install.sh did not stop at a symlinked config and name it: %v\n%s", err, out)
	}
	if strings.Contains(out, "secret config") {
		t.Errorf("install.sh printed what the symlinked config points at:\n%s", out)
	}
	if got := b.read("/etc/victim9"); got != "secret config\n" {
		t.Errorf("install.sh wrote through config.yaml into its target: %q", got)
	}
	if st, err := os.Stat(b.path("/etc/victim9")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("/etc/victim9: mode changed (%v)", err)
	}
	if got := b.read("/etc/monky-deployd/config.yaml.prev"); got != prev {
		t.Errorf("config.yaml.prev changed to %q: the symlinked config was read or backed up", got)
	}
	// install.sh stages in /etc/.monky-deployd-install.XXXXXX and removes it on exit.
	left, err := os.ReadDir(b.path("/etc"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range left {
		if strings.HasPrefix(e.Name(), ".monky-deployd-install.") {
			t.Errorf("install.sh left its staging directory /etc/%s", e.Name())
		}
	}
}

// TestInstallScriptRefusesPlantedIdentitySymlinks: the identity directory is writable by group
// ziti, which the agent's own account belongs to. A symlink planted at the identity's name (or
// at the directory's, where its parent is ziti's) must make a re-run stop, not chown, chmod or
// set ACLs on what it points at.
func TestInstallScriptRefusesPlantedIdentitySymlinks(t *testing.T) {
	b, env := firstInstall(t)
	zitiUID, zitiGID := b.id("passwd", "ziti"), b.id("group", "ziti")
	args := []string{"--env", envID, "--site", "cbs"}
	victim := func(t *testing.T, b *box, p string) {
		t.Helper()
		assertMode(t, b, p, 0o600, 0, 0)
		for _, c := range b.calls("setfacl") {
			if strings.HasSuffix(c, " "+p) {
				t.Errorf("setfacl ran on the symlink's target: %q", c)
			}
		}
	}

	t.Run("at the identity", func(t *testing.T) {
		b := b.with(t)
		b.write("/etc/victim-id", "root secret\n", 0o600)
		b.mustSh("mv " + identityPath + " /root/identity.saved && ln -s /etc/victim-id " + identityPath)
		if err := os.Lchown(b.path(identityPath), zitiUID, zitiGID); err != nil {
			t.Fatal(err)
		}
		b.clearCalls()
		out, err := b.installSh(env, args...)
		if err == nil || !strings.Contains(out, identityPath+" is a symlink") || !strings.Contains(out, "rm "+identityPath) {
			t.Errorf("install.sh over a planted identity symlink: %v\n%s", err, out)
		}
		victim(t, b, "/etc/victim-id")
		b.mustSh("rm " + identityPath + " && mv /root/identity.saved " + identityPath)
	})

	t.Run("at the identity directory", func(t *testing.T) {
		b := b.with(t)
		if err := os.MkdirAll(b.path("/etc/victim-dir"), 0o700); err != nil {
			t.Fatal(err)
		}
		b.write("/etc/victim-dir/monky-host."+envID+".json", "{}\n", 0o600)
		b.mustSh("mv " + identityDir + " /root/identities.saved && ln -s /etc/victim-dir " + identityDir)
		if err := os.Lchown(b.path(identityDir), zitiUID, zitiGID); err != nil {
			t.Fatal(err)
		}
		b.clearCalls()
		out, err := b.installSh(env, args...)
		if err == nil || !strings.Contains(out, identityDir+" is a symlink (owned by uid") {
			t.Errorf("install.sh over a planted directory symlink: %v\n%s", err, out)
		}
		assertMode(t, b, "/etc/victim-dir", 0o700, 0, 0)
		victim(t, b, "/etc/victim-dir/monky-host."+envID+".json")
		b.mustSh("rm " + identityDir + " && mv /root/identities.saved " + identityDir)
	})

	t.Run("root's own symlink at the directory is followed", func(t *testing.T) {
		b := b.with(t)
		const real = "/opt/openziti/etc/real-identities"
		b.mustSh("mv " + identityDir + " " + real + " && chgrp root " + real + " && chmod 0700 " + real + " && ln -s " + real + " " + identityDir)
		b.clearCalls()
		out, err := b.installSh(env, args...)
		if err != nil {
			t.Fatalf("install.sh over root's own directory symlink: %v\n%s", err, out)
		}
		st, err := os.Stat(b.path(real))
		if err != nil {
			t.Fatal(err)
		}
		if _, g := owner(st); g != zitiGID || st.Mode().Perm()&0o050 != 0o050 {
			t.Errorf("%s is group %d mode %04o after install.sh, want group ziti with g+rx", real, g, st.Mode().Perm())
		}
		if calls := b.calls("setfacl"); !contains(calls, "-P -m u:monky-deployd:rx "+real) {
			t.Errorf("the ACL did not go on the directory the symlink names: %q", calls)
		}
		b.mustSh("rm " + identityDir + " && mv " + real + " " + identityDir + " && chgrp ziti " + identityDir + " && chmod 0750 " + identityDir)
	})

	t.Run("a re-run on a clean box changes nothing there", func(t *testing.T) {
		b := b.with(t)
		b.clearCalls()
		out, err := b.installSh(env, args...)
		if err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		// Transport sdk: the agent owns its identity, to renew it (issue 21).
		assertMode(t, b, identityPath, 0o640, b.id("passwd", "monky-deployd"), zitiGID)
	})
}
