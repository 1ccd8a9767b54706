//go:build integration

package cli

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// giveEmptyDir and makeDirFor judge and give the one directory they opened: root's and empty,
// given to the account; anything else, nothing given.
func TestGiveAndMakeTheAgentsStateDir(t *testing.T) {
	if os.Geteuid() != 0 {
		if itest.InCI(os.Getenv("CI")) {
			t.Fatal("needs root (chown), and CI is set")
		}
		t.Skip("needs root (chown)")
	}
	dir := t.TempDir()
	owner := func(p string) uint32 {
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Uid
	}
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	if names, err := giveEmptyDir(empty, 4244, 4244); err != nil || names != nil || owner(empty) != 4244 {
		t.Errorf("empty: %v, %v, owner %d", names, err, owner(empty))
	}
	if _, err := giveEmptyDir(empty, 4245, 4245); err == nil || owner(empty) != 4244 {
		t.Errorf("a directory no longer root's was given again: %v", err)
	}
	full := filepath.Join(dir, "full")
	os.Mkdir(full, 0o700)
	os.WriteFile(filepath.Join(full, "state.json"), nil, 0o600)
	if names, err := giveEmptyDir(full, 4244, 4244); err != nil || !slices.Equal(names, []string{"state.json"}) || owner(full) != 0 {
		t.Errorf("full: %v, %v, owner %d", names, err, owner(full))
	}
	made := filepath.Join(dir, "made")
	if err := makeDirFor(made, 4244, 4244); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(made); owner(made) != 4244 || fi.Mode().Perm() != 0o700 {
		t.Errorf("made: owner %d, mode %v", owner(made), fi.Mode())
	}
	if err := makeDirFor(filepath.Join(dir, "no", "parent"), 4244, 4244); err == nil {
		t.Error("made a directory and its parent")
	}
}
