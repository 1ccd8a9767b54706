//go:build integration

package boxtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/pkgtest"
)

// TestBoxDockerGroupAppearsLater: a box with no group docker when the package is installed
// (docker comes after the agent). Under real systemd the tick must start — no 216/GROUP, which
// SupplementaryGroups=docker in the unit used to cause — check in and report unhealthy with
// "docker is not usable" and the usermod that fixes it. Then docker's package arrives (a
// stand-in shipping /usr/sbin/dockerd whose postinst creates the group, as docker.io's does):
// dpkg runs our file trigger, the postinst adds the agent's account to the group, and the next
// tick uses docker, with nobody typing usermod.
func TestBoxDockerGroupAppearsLater(t *testing.T) {
	a := build(t)
	w := theWorld(t)
	env := newEnv(t, w, "nogrp")
	b := newBoxWith(t, a, boxOptions{noDockerGroup: true})
	if got := b.sh("getent group docker || echo none"); got != "none" {
		t.Fatalf("the box has a docker group before the test made one: %s", got)
	}

	b.cp(a.deb, "/root/new.deb")
	b.sh("dpkg -i /root/new.deb")
	configureAsInstalled(t, b, w, env)
	// The premise: the agent's account cannot reach the engine (the socket's gid is no group of it).
	if out, err := b.exec("runuser", "-u", "monky-deployd", "--", "docker", "info", "--format", "{{.ServerVersion}}"); err == nil {
		t.Fatalf("the agent's account reaches the engine without group docker (%s; its groups: %s): the test proves nothing here",
			strings.TrimSpace(out), b.sh("id -nG monky-deployd"))
	}
	b.sh("systemctl enable --now monky-deployd.timer")
	enabled := time.Now()

	r := waitReport(t, w, env, enabled.Add(-time.Second), firstFire, "an unhealthy report without group docker", func(r protocol.Report) bool {
		return r.Result == protocol.ResultUnhealthy
	})
	if !strings.Contains(r.Detail, "docker is not usable") || !strings.Contains(r.Detail, "usermod -a -G docker monky-deployd") {
		t.Errorf("the report without group docker says %q, want 'docker is not usable' with the usermod", r.Detail)
	}
	if st := b.sh("systemctl show -p ExecMainStatus --value monky-deployd.service"); st == "216" {
		t.Errorf("the tick's unit exited 216 (GROUP)")
	}
	if j := b.sh("journalctl --no-pager -o cat -u monky-deployd.service"); strings.Contains(j, "216/GROUP") || strings.Contains(j, "status=216") {
		t.Errorf("the unit's journal shows a 216/GROUP start failure:\n%s", j)
	}
	if en, act := b.unit("monky-deployd.timer"); en != "enabled" || act != "active" {
		t.Errorf("without group docker the timer is %s/%s, want enabled/active", en, act)
	}

	// docker's package arrives: dpkg runs our trigger after its postinst made the group.
	b.cp(dockerStandin(t, socketGID(t)), "/root/docker-standin.deb")
	out := b.sh("dpkg -i /root/docker-standin.deb 2>&1")
	installed := time.Now()
	if !strings.Contains(out, "monky-deployd joined group docker") {
		t.Errorf("dpkg's output does not show the trigger adding the agent to group docker:\n%s", out)
	}
	if groups := b.sh("id -nG monky-deployd"); !strings.Contains(" "+groups+" ", " docker ") {
		t.Fatalf("after docker's package the agent's groups are %q, want docker among them; dpkg said:\n%s", groups, out)
	}
	r = waitReport(t, w, env, installed, firstFire, "a healthy report once group docker exists", func(r protocol.Report) bool {
		return r.Result == protocol.ResultHealthy
	})
	if r.Detail != "nothing deployed" {
		t.Errorf("the first healthy report says %q, want 'nothing deployed'", r.Detail)
	}
	if j := b.sh("journalctl --no-pager -o cat -t monky-deployd-postinst"); !strings.Contains(j, "joined group docker") {
		t.Errorf("the trigger's line is not in the journal:\n%s", j)
	}
}

// waitReport waits up to within for a report of env accepted after since that satisfies match,
// and returns it.
func waitReport(t *testing.T, w *devstack.World, env string, since time.Time, within time.Duration,
	what string, match func(protocol.Report) bool) protocol.Report {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var seen []tenancytest.ReportRecord
		for _, r := range w.Stack.Tenancy.Reports(env) {
			if r.At.After(since) {
				if match(r.Report) {
					return r.Report
				}
				seen = append(seen, r)
			}
		}
		if time.Now().After(deadline) {
			var got []string
			for _, r := range seen {
				got = append(got, fmt.Sprintf("%s %q", r.Report.Result, r.Report.Detail))
			}
			t.Fatalf("no report of %s (%s) within %s; reports since %s: %v", env, what, within, since.Format(time.TimeOnly), got)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dockerStandin is a package standing in for docker.io as far as we are concerned: it ships
// /usr/sbin/dockerd (one of the paths our trigger watches) and its postinst creates group docker
// — with the host socket's gid, so that membership opens the host's engine.
func dockerStandin(t *testing.T, gid int) string {
	t.Helper()
	dir := t.TempDir()
	dockerd := filepath.Join(dir, "dockerd")
	postinst := filepath.Join(dir, "postinst")
	if err := os.WriteFile(dockerd, []byte("#!/bin/sh\necho 'dockerd stand-in: the engine is the host one' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nset -e\nif [ \"$1\" = configure ] && ! getent group docker >/dev/null; then " + dockerGroupAdd(gid) + "; fi\n"
	if err := os.WriteFile(postinst, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	deb, err := pkgtest.Standin{Name: "docker-standin", Version: "1.0", Description: "stand-in for docker.io: dockerd and group docker",
		Files: []pkgtest.File{{Source: dockerd, Dest: "/usr/sbin/dockerd", Mode: 0o755}}, PostInstall: postinst}.Build(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	return deb
}
