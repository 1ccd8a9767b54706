//go:build integration

package boxtest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// TestBoxAnsibleRole applies ansible/monky-deployd.yml to a box through the community.docker
// connection (shipped in Debian's ansible), with the kit's host_vars.yml and its secrets as the
// vaulted variables it names: the enrolment restarts the box's ziti-edge-tunnel unit (transport
// system), the agent checks in on its own, a second run changes (and restarts) nothing, and
// install.sh run afterwards with the same kit finds nothing to change either — the role and the
// script reach the same end state.
func TestBoxAnsibleRole(t *testing.T) {
	a := build(t)
	playbook, err := exec.LookPath("ansible-playbook")
	if err != nil {
		missing(t, "ansible-playbook not found (scripts/packaging-deps.sh installs Debian's ansible)")
	}
	w := theWorld(t)
	env := newEnv(t, w, "role")
	pkgs := newPackageServer(t, a)
	b := newBox(t, a)

	play := rolePlayer(t, playbook, w, env, pkgs, b)
	// The tunneller's unit (the box's stand-in) runs before the role: the enrolment's handler
	// must restart it (transport system, a unit loaded), which gives it a new invocation.
	zet := func() string { return b.unitProp("ziti-edge-tunnel.service", "InvocationID") }
	zetBefore := zet()
	if zetBefore == "" {
		t.Fatal("the box's ziti-edge-tunnel unit has no invocation before the role runs")
	}

	out := play()
	applied := time.Now()
	if recap := playRecap(out); !strings.Contains(recap, "failed=0") || strings.Contains(recap, "changed=0 ") {
		t.Errorf("the first run's recap: %s", recap)
	}
	zetAfter := zet()
	if zetAfter == zetBefore {
		t.Errorf("the role enrolled the identity (transport system) but did not restart ziti-edge-tunnel.service (invocation %s unchanged):\n%s", zetBefore, out)
	}
	if en, act := b.unit("ziti-edge-tunnel.service"); act != "active" {
		t.Errorf("after the role ziti-edge-tunnel.service is %s/%s, want active", en, act)
	}
	if strings.Contains(out, "no ziti-edge-tunnel.service is loaded here") {
		t.Errorf("the play says no tunneller unit is loaded on a box that has one:\n%s", out)
	}
	waitCheckin(t, w, env, applied.Add(-time.Second), firstFire, "the first tick after the role", nil)
	first := b.endState(env)

	out = play()
	if recap := playRecap(out); !strings.Contains(recap, "changed=0 ") || !strings.Contains(recap, "failed=0") {
		t.Errorf("the second run changed something: %s\n%s", recap, out)
	}
	if got := zet(); got != zetAfter {
		t.Errorf("the second run, which enrolled nothing, restarted ziti-edge-tunnel.service (invocation %s, then %s)", zetAfter, got)
	}

	// install.sh with the same kit: the package is there, the identity enrolled; what it writes
	// is what the role wrote, comments aside.
	b.installFromKit(w, env, pkgs)
	if after := b.endState(env); after != first {
		t.Errorf("install.sh after the role changed the box's state:\nafter the role:\n%s\nafter install.sh:\n%s", first, after)
	}

	// The operator tunes the config by hand: the role owns only its keys, so a run keeps the
	// tuning, and — with no value of its own changed — writes nothing and restarts nothing.
	b.tune()
	tuned := b.sh("cat /etc/monky-deployd/config.yaml")
	if !strings.Contains(tuned, "timeout_s: 90") || !strings.Contains(tuned, "healthy_timeout_s: 900") {
		t.Fatalf("the test's tuning did not land:\n%s", tuned)
	}
	stamp := func() string {
		return b.sh("stat -c '%i %Y' /etc/monky-deployd/config.yaml; systemctl show -p ActiveEnterTimestampMonotonic --value monky-deployd.timer")
	}
	before := stamp()
	out = play()
	if recap := playRecap(out); !strings.Contains(recap, "changed=0 ") {
		t.Errorf("a run over the operator's tuning changed something: %s\n%s", recap, out)
	}
	if got := b.sh("cat /etc/monky-deployd/config.yaml"); got != tuned || stamp() != before {
		t.Errorf("a run changed the tuned config (or restarted the timer):\n%s\nwant:\n%s", got, tuned)
	}
	// monky_deployd_extra_config: a key the play owns from now on; the tuning stays.
	out = play(`{"monky_deployd_extra_config": {"log_level": "DEBUG"}}`)
	if recap := playRecap(out); strings.Contains(recap, "changed=0 ") {
		t.Errorf("monky_deployd_extra_config changed nothing: %s", recap)
	}
	cfg := b.sh("cat /etc/monky-deployd/config.yaml")
	for _, want := range []string{"log_level: DEBUG", "timeout_s: 90", "# tenancy answers this box slowly", "healthy_timeout_s: 900", "# tuned here"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("after the run with extra config the config lacks %q:\n%s", want, cfg)
		}
	}
	// The agent loads what the role and the operator wrote together.
	merged := time.Now()
	waitCheckin(t, w, env, merged, firstFire, "a tick on the merged config", nil)
	// install.sh with the same kit keeps the tuning and the play's extra key alike.
	b.installFromKit(w, env, pkgs)
	cfg = b.sh("cat /etc/monky-deployd/config.yaml")
	for _, want := range []string{"log_level: DEBUG", "timeout_s: 90", "healthy_timeout_s: 900"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("install.sh after the role lost %q:\n%s", want, cfg)
		}
	}
}

// rolePlayer returns a function that applies ansible/monky-deployd.yml to box b with env's kit
// (its host_vars.yml, and its secrets as the vaulted variables it names, in a 0600 file: never
// on a command line), with extra `-e` arguments, and returns ansible's output; it fails the test
// when the play fails or prints a secret.
func rolePlayer(t *testing.T, playbook string, w *devstack.World, env string, pkgs *packageServer, b *box) func(extra ...string) string {
	t.Helper()
	try := roleTrier(t, playbook, w, env, pkgs, b)
	return func(extra ...string) string {
		t.Helper()
		out, err := try(extra...)
		if err != nil {
			t.Fatalf("ansible-playbook: %v\n%s", err, out)
		}
		return out
	}
}

// roleTrier is rolePlayer whose function returns the play's error instead of failing the test.
func roleTrier(t *testing.T, playbook string, w *devstack.World, env string, pkgs *packageServer, b *box) func(extra ...string) (string, error) {
	t.Helper()
	dir := t.TempDir()
	kitDir := filepath.Join(w.Kits, env)
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(kitDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	// The vaulted variables host_vars.yml refers to, in a 0600 file: never on a command line.
	secrets, err := json.Marshal(map[string]string{
		"vault_monky_deployd_bootstrap_grant": read(kit.GrantFile),
		"vault_monky_deployd_enrol_jwt":       read(kit.EnrollmentFile(env)),
		"vault_monky_deployd_download_token":  deployToken,
		"monky_deployd_gitlab_base_url":       pkgs.base(),
		"monky_deployd_bao_ca":                string(baoCAPEM),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secrets.json"), secrets, 0o600); err != nil {
		t.Fatal(err)
	}
	inventory := fmt.Sprintf("[monky_backends]\n%s ansible_connection=community.docker.docker ansible_python_interpreter=/usr/bin/python3\n", b.name)
	if err := os.WriteFile(filepath.Join(dir, "inventory"), []byte(inventory), 0o600); err != nil {
		t.Fatal(err)
	}
	root := itest.ModuleRoot(t)
	return func(extra ...string) (string, error) {
		t.Helper()
		// ansible_become=false: the docker connection is root already and the box has no sudo.
		args := []string{"-i", "inventory", filepath.Join(root, "ansible", "monky-deployd.yml"),
			"-e", "@" + filepath.Join(kitDir, "host_vars.yml"), "-e", "@secrets.json", "-e", "ansible_become=false"}
		for _, e := range extra {
			args = append(args, "-e", e)
		}
		out, err := run(dir, append(os.Environ(), "ANSIBLE_ROLES_PATH="+filepath.Join(root, "ansible", "roles"),
			"ANSIBLE_NOCOLOR=1", "ANSIBLE_HOST_KEY_CHECKING=false", "ANSIBLE_PYTHON_INTERPRETER=/usr/bin/python3"),
			playbook, args...)
		for _, s := range []string{deployToken, read(kit.GrantFile)} {
			if strings.Contains(out, s) {
				t.Errorf("ansible printed a secret (the deploy token or the bootstrap grant)")
			}
		}
		return out, err
	}
}

// TestBoxAnsibleRoleWithoutTunnellerUnit: a box with the tunneller's binary but no unit (the
// `sdk` and `proxy` transports need only its `enroll`). The enrolment notifies the "Restart
// ziti-edge-tunnel" handler, which used to fail the play on the missing unit; now the play
// succeeds, says that no unit was restarted, and the agent checks in.
func TestBoxAnsibleRoleWithoutTunnellerUnit(t *testing.T) {
	a := build(t)
	playbook, err := exec.LookPath("ansible-playbook")
	if err != nil {
		missing(t, "ansible-playbook not found (scripts/packaging-deps.sh installs Debian's ansible)")
	}
	w := theWorld(t)
	env := newEnv(t, w, "rolenounit")
	pkgs := newPackageServer(t, a)
	b := newBoxWith(t, a, boxOptions{noTunnellerUnit: true})
	if got := b.sh("systemctl show -p LoadState --value ziti-edge-tunnel.service"); got == "loaded" {
		t.Fatalf("the box has a ziti-edge-tunnel unit (LoadState %s)", got)
	}
	out := rolePlayer(t, playbook, w, env, pkgs, b)()
	applied := time.Now()
	if recap := playRecap(out); !strings.Contains(recap, "failed=0") {
		t.Errorf("the run's recap: %s\n%s", recap, out)
	}
	if !strings.Contains(out, "no ziti-edge-tunnel.service is loaded here") {
		t.Errorf("the play does not say that no tunneller unit was restarted:\n%s", out)
	}
	waitCheckin(t, w, env, applied.Add(-time.Second), firstFire, "the first tick after the role", nil)
}

var recapLine = regexp.MustCompile(`(?m)^\S+\s*:\s*ok=\d+.*$`)

func playRecap(out string) string { return recapLine.FindString(out) + " " }

// endState is what install.sh and the role must agree on, read from the box: the package, the
// units' states, owners and modes of what they write, the agent's groups, the identity's ACL,
// and config.yaml without its comments.
func (b *box) endState(env string) string {
	b.t.Helper()
	identity := "/opt/openziti/etc/identities/monky-host." + env + ".json"
	return b.sh(strings.Join([]string{
		"dpkg-query -W -f='${db:Status-Abbrev}${Version}\\n' monky-deployd",
		"for u in monky-deployd.timer monky-deployd-proxy.service; do echo \"$u $(systemctl is-enabled $u) $(systemctl is-active $u)\"; done",
		"stat -c '%n %U:%G %a' /etc/monky-deployd /etc/monky-deployd/config.yaml /var/lib/monky-deployd /opt/openziti/etc/identities " + identity,
		"id -nG monky-deployd | tr ' ' '\\n' | sort | tr '\\n' ' '; echo",
		"getfacl -cp " + identity + " /opt/openziti/etc/identities 2>/dev/null",
		"grep -v '^#' /etc/monky-deployd/config.yaml",
	}, " && "))
}

// tune edits config.yaml as an operator would: a key inside a section the kit writes
// (tenancy.timeout_s) and one of its own, each under a comment.
func (b *box) tune() {
	b.t.Helper()
	b.sh(`sed -i 's/^tenancy:$/tenancy:\n  # tenancy answers this box slowly\n  timeout_s: 90/' /etc/monky-deployd/config.yaml && ` +
		`printf '# tuned here: the apps on this box are slow to turn healthy\nhealthy_timeout_s: 900\n' >>/etc/monky-deployd/config.yaml`)
}
