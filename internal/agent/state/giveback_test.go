package state

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func ownerOf(t *testing.T, p string) (int, int) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

// TestGiveBack: root's files under the state directory go to the agent's account; a planted
// symlink is re-owned itself, never its target; a hard link to a file elsewhere, a container's
// files and upgraded-from keep their owners.
func TestGiveBack(t *testing.T) {
	if os.Geteuid() != 0 {
		// CI runs the tests as root: there a missing root is a failure, never a skip.
		if ci := strings.ToLower(os.Getenv("CI")); ci != "" && ci != "false" && ci != "0" {
			t.Fatal("changing owners needs root, and CI runs the tests as root")
		}
		t.Skip("changing owners needs root (the package runs it as root)")
	}
	const agent, container = 900, 999
	outside := t.TempDir()
	dir := t.TempDir()
	if err := os.Chown(dir, agent, agent); err != nil {
		t.Fatal(err)
	}
	mk := func(rel, content string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("state.json", "{}")
	mk("docker/config.json", "{}")
	mk("env-qa-02/releases/aa01/.env", "S=1\n")
	data := mk("env-qa-02/releases/aa01/data/db", "x")
	for _, p := range []string{data, filepath.Dir(data)} {
		if err := os.Chown(p, container, container); err != nil {
			t.Fatal(err)
		}
	}
	mk(UpgradedFromFile, "0.1.9\n")
	victimLink := filepath.Join(outside, "victim-link")
	victimHard := filepath.Join(outside, "victim-hard")
	for _, v := range []string{victimLink, victimHard} {
		if err := os.WriteFile(v, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victimLink, filepath.Join(dir, "planted")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(victimHard, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}

	res, err := GiveBack(dir, agent, agent)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"state.json", "docker", "docker/config.json", "env-qa-02", "env-qa-02/releases",
		"env-qa-02/releases/aa01", "env-qa-02/releases/aa01/.env", "planted"} {
		if u, g := ownerOf(t, filepath.Join(dir, rel)); u != agent || g != agent {
			t.Errorf("%s is %d:%d, want %d:%d", rel, u, g, agent, agent)
		}
	}
	for p, want := range map[string]int{data: container, victimLink: 0, victimHard: 0, filepath.Join(dir, UpgradedFromFile): 0} {
		if u, _ := ownerOf(t, p); u != want {
			t.Errorf("%s is owned by %d, want %d (left as it was)", p, u, want)
		}
	}
	if len(res.Linked) != 1 || res.Linked[0] != filepath.Join(dir, "hard") {
		t.Errorf("Linked = %q, want the hard link named", res.Linked)
	}
	if len(res.Changed) != 8 {
		t.Errorf("Changed %d entries, want 8: %q", len(res.Changed), res.Changed)
	}
	// A second run finds nothing to do.
	res, err = GiveBack(dir, agent, agent)
	if err != nil || len(res.Changed) != 0 {
		t.Errorf("second run: %v, changed %q", err, res.Changed)
	}
}

func TestGiveBackRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := GiveBack(dir, 0, 0); err == nil || !strings.Contains(err.Error(), "root's already") {
		t.Errorf("GiveBack to root: %v", err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := GiveBack(link, 900, 900); err == nil {
		t.Error("GiveBack followed a symlink given as the directory")
	}
}
