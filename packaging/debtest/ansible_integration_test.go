//go:build integration

package debtest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// roleTasks runs one task file of the ansible role on this machine (connection local), with the
// role's defaults and the given extra variables, and returns ansible's output.
func roleTasks(t *testing.T, tasks string, vars map[string]any) (string, error) {
	t.Helper()
	return roleTasksThen(t, tasks, vars, "")
}

// roleTasksThen is roleTasks followed by more tasks of the play (YAML, indented as a task list).
func roleTasksThen(t *testing.T, tasks string, vars map[string]any, then string) (string, error) {
	t.Helper()
	playbookBin := need(t, "ansible-playbook")
	root := repoRoot(t)
	dir := t.TempDir()
	play := fmt.Sprintf(`---
- name: Run part of the role
  hosts: localhost
  gather_facts: false
  tasks:
    - name: The role's %s
      ansible.builtin.include_role:
        name: monky_deployd
        tasks_from: %s
%s`, tasks, tasks, then)
	if err := os.WriteFile(filepath.Join(dir, "play.yml"), []byte(play), 0o644); err != nil {
		t.Fatal(err)
	}
	extra, err := json.Marshal(vars)
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "ANSIBLE_ROLES_PATH="+filepath.Join(root, "ansible", "roles"), "NO_COLOR=1",
		"ANSIBLE_NOCOLOR=1", "ANSIBLE_LOCALHOST_WARNING=false", "ANSIBLE_INVENTORY_UNPARSED_WARNING=false",
		"ANSIBLE_PYTHON_INTERPRETER=auto_silent")
	return run(t, dir, env, playbookBin, "-i", "localhost,", "-c", "local", "play.yml", "-e", string(extra))
}

// TestAnsibleDownloadRedirectKeepsTheToken: the role's download, against a registry that
// redirects to object storage on another port, gets the package and sends the deploy token to
// the registry only (get_url forwards every header on a redirect unless told not to).
func TestAnsibleDownloadRedirectKeepsTheToken(t *testing.T) {
	needRoot(t)
	a := build(t)
	reg := newRegistry(t, a.version, a.deb)
	store := newStorage(t, a.deb)
	reg.redirect = store.srv.URL
	dl := t.TempDir()
	out, err := roleTasks(t, "download.yml", map[string]any{
		"monky_deployd_version": a.version, "monky_deployd_gitlab_base_url": reg.base(),
		"monky_deployd_download_token": deployToken, "monky_deployd_download_dir": dl,
	})
	if err != nil {
		t.Fatalf("ansible: %v\n%s", err, out)
	}
	if strings.Contains(out, deployToken) {
		t.Errorf("ansible printed the deploy token:\n%s", out)
	}
	deb := filepath.Join(dl, fmt.Sprintf("monky-deployd_%s_amd64.deb", a.version))
	if got, want := readAll(t, deb), readAll(t, a.deb); got != want {
		t.Error("the downloaded package differs from the published one")
	}
	hits, withToken := reg.redirectedTo(t, store)
	if hits == 0 {
		t.Error("the storage host was never asked")
	}
	if withToken != 0 {
		t.Errorf("the role sent the deploy token to the storage host the registry redirected to (%d times)", withToken)
	}
}

// TestAnsibleDockerDataRootMatchesInstallScript: the role writes docker's data-root, and refuses
// to move one or to rewrite an existing daemon.json, as install.sh does — with its words.
func TestAnsibleDockerDataRootMatchesInstallScript(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name     string
		existing string // daemon.json before; "-" = no file
		want     string // in ansible's output when the play must fail; "" = must succeed
	}{
		{"no daemon.json", "-", ""},
		{"empty daemon.json", "", ""},
		{"the same data-root", "{\n  \"data-root\": \"%s\"\n}\n", ""},
		{"another data-root", "{\n  \"data-root\": \"/elsewhere\"\n}\n", "already sets another data-root; change it by hand (moving it strands every image)"},
		{"other settings", "{\n  \"log-driver\": \"journald\"\n}\n", "exists; add \"data-root\": \"%s\" to it by hand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dataRoot := filepath.Join(dir, "docker-data")
			daemonJSON := filepath.Join(dir, "etc-docker", "daemon.json")
			if tc.existing != "-" {
				if err := os.MkdirAll(filepath.Dir(daemonJSON), 0o755); err != nil {
					t.Fatal(err)
				}
				content := tc.existing
				if strings.Contains(content, "%s") {
					content = fmt.Sprintf(content, dataRoot)
				}
				if err := os.WriteFile(daemonJSON, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			before, _ := os.ReadFile(daemonJSON)
			out, err := roleTasks(t, "docker_data_root.yml", map[string]any{
				"monky_deployd_docker_data_root": dataRoot, "monky_deployd_docker_daemon_json": daemonJSON,
			})
			if tc.want != "" {
				want := tc.want
				if strings.Contains(want, "%s") {
					want = fmt.Sprintf(want, dataRoot)
				}
				// ansible prints the message as a JSON string: its quotes come escaped.
				if err == nil || !strings.Contains(strings.ReplaceAll(out, `\"`, `"`), want) {
					t.Errorf("want a failure saying %q; err %v\n%s", want, err, out)
				}
				if after, _ := os.ReadFile(daemonJSON); string(after) != string(before) {
					t.Errorf("a refused daemon.json was changed: %q", after)
				}
				return
			}
			if err != nil {
				t.Fatalf("ansible: %v\n%s", err, out)
			}
			var doc map[string]any
			if err := json.Unmarshal([]byte(readAll(t, daemonJSON)), &doc); err != nil || doc["data-root"] != dataRoot {
				t.Errorf("daemon.json %q (%v), want data-root %s", readAll(t, daemonJSON), err, dataRoot)
			}
			st, err := os.Stat(daemonJSON)
			if err != nil || st.Mode().Perm() != 0o644 {
				t.Errorf("daemon.json mode: %v %v", st, err)
			}
			if tc.existing == "-" || tc.existing == "" {
				st, err := os.Stat(dataRoot)
				if err != nil || st.Mode().Perm() != 0o711 {
					t.Errorf("data-root %s: %v (mode want 0711, as install.sh makes it)", dataRoot, err)
				}
			}
		})
	}
}

// TestAnsibleHonoursTheOptOut: the role leaves the timer alone on a box that carries the opt-out
// file, with a warning, unless monky_deployd_force_enable_timer is true (then the file goes).
func TestAnsibleHonoursTheOptOut(t *testing.T) {
	for _, tc := range []struct {
		name          string
		file, force   bool
		wantOptedOut  bool
		wantFileAfter bool
	}{
		{"no opt-out file", false, false, false, false},
		{"opt-out file", true, false, true, true},
		{"opt-out file, forced", true, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			optOutFile := filepath.Join(t.TempDir(), "timer.disabled-by-operator")
			if tc.file {
				if err := os.WriteFile(optOutFile, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, err := roleTasksThen(t, "timer_opt_out.yml", map[string]any{
				"monky_deployd_timer_opt_out_file": optOutFile, "monky_deployd_force_enable_timer": tc.force,
			}, `    - name: Show the decision
      ansible.builtin.debug:
        msg: "opted-out={{ monky_deployd_timer_opted_out | bool }}"
`)
			if err != nil {
				t.Fatalf("ansible: %v\n%s", err, out)
			}
			want := fmt.Sprintf("opted-out=%v", tc.wantOptedOut)
			if !strings.Contains(strings.ToLower(out), strings.ToLower(want)) {
				t.Errorf("want %s:\n%s", want, out)
			}
			warned := strings.Contains(out, "WARNING: NOT enabling monky-deployd.timer") && strings.Contains(out, "monky_deployd_force_enable_timer=true")
			if warned != tc.wantOptedOut {
				t.Errorf("warning shown = %v, want %v:\n%s", warned, tc.wantOptedOut, out)
			}
			if _, err := os.Stat(optOutFile); (err == nil) != tc.wantFileAfter {
				t.Errorf("opt-out file present after the play = %v, want %v", err == nil, tc.wantFileAfter)
			}
		})
	}
	// The start tasks are guarded by the decision (they cannot run here: no systemd).
	main := readAll(t, filepath.Join(repoRoot(t), "ansible", "roles", "monky_deployd", "tasks", "main.yml"))
	for _, task := range []string{"- name: Run the proxy transport unit", "- name: Enable and start the timer"} {
		i := strings.Index(main, task)
		if i < 0 {
			t.Fatalf("main.yml has no task %q", task)
		}
		block := main[i:]
		if j := strings.Index(block[len(task):], "\n- name:"); j >= 0 {
			block = block[:len(task)+j]
		}
		if !strings.Contains(block, "when: not (monky_deployd_timer_opted_out | bool)") {
			t.Errorf("task %q is not guarded by the opt-out:\n%s", task, block)
		}
	}
}

// TestAnsibleRefusesPlantedIdentitySymlinks: like install.sh, the role stops before changing
// the owner, mode or ACL of a symlink a member of group ziti planted at the identity (or on its
// directory), and lets a regular identity and a root-owned directory symlink through.
func TestAnsibleRefusesPlantedIdentitySymlinks(t *testing.T) {
	needRoot(t)
	base := t.TempDir()
	real := filepath.Join(base, "opt", "openziti", "etc", "real-identities")
	if err := os.MkdirAll(real, 0o750); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(base, "victim")
	if err := os.WriteFile(victim, []byte("root secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const zitiUID = 4243 // a member of group ziti: any uid but root
	for _, tc := range []struct {
		name    string
		setup   func(dir, id string)
		refused string // "" when the play must pass
	}{
		{"a regular identity", func(dir, id string) {
			os.MkdirAll(dir, 0o750)
			os.WriteFile(id, []byte("{}\n"), 0o640)
		}, ""},
		{"a symlink at the identity", func(dir, id string) {
			os.MkdirAll(dir, 0o750)
			os.Symlink(victim, id)
			os.Lchown(id, zitiUID, zitiUID)
		}, "monky-host.env-qa-02.json is a symlink (owned by uid 4243)"},
		{"a planted symlink at the directory", func(dir, id string) {
			os.Symlink(real, dir)
			os.Lchown(dir, zitiUID, zitiUID)
		}, "identities is a symlink (owned by uid 4243)"},
		{"root's own symlink at the directory", func(dir, id string) {
			os.Symlink(real, dir)
			os.WriteFile(filepath.Join(real, filepath.Base(id)), []byte("{}\n"), 0o640)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := filepath.Join(base, "opt", "openziti", "etc")
			dir := filepath.Join(parent, "identities")
			os.RemoveAll(dir)
			id := filepath.Join(dir, "monky-host.env-qa-02.json")
			tc.setup(dir, id)
			out, err := roleTasks(t, "identity_links.yml", map[string]any{
				"monky_deployd_identity_dir": dir, "monky_deployd_identity": id,
			})
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("the play failed: %v\n%s", err, out)
			case tc.refused != "" && (err == nil || !strings.Contains(out, tc.refused)):
				t.Errorf("the play did not refuse (%v), want %q:\n%s", err, tc.refused, out)
			}
			fi, err := os.Stat(victim)
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("the victim changed: %v %v", fi.Mode(), err)
			}
		})
	}
}
