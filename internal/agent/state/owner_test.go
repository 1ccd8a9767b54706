package state

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// The files a root tick leaves in the agent's state_dir are named, the package's upgraded-from
// is not, and symlinks are not followed. Needs root to own files as someone else.
func TestForeignFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		itest.Unavailable(t, "needs root to give files to another uid")
	}
	const agent, other = 4711, 0
	dir := filepath.Join(t.TempDir(), "state")
	for _, d := range []string{"", "docker", "docker/buildx", "env-qa-02/releases/aa01", "env-qa-02/releases/bb02", "outside"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]int{
		"state.json":                        other,
		"bao.token":                         agent,
		"upgraded-from":                     other,
		"docker/config.json":                other,
		"env-qa-02/releases/aa01/.env":      agent,
		"env-qa-02/releases/bb02/.env":      other,
		"outside/victim":                    other,
		"docker/buildx/cache":               other, // two levels down, not <env>/releases: not walked
		"env-qa-02/releases/aa01/bundle.js": agent,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink the agent owns, pointing at a foreign tree: listed never, followed never.
	if err := os.Symlink(filepath.Join(dir, "outside"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	walk := func(p string, fn func(string) error) {
		if err := filepath.Walk(p, func(path string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return fn(path)
		}); err != nil {
			t.Fatal(err)
		}
	}
	walk(dir, func(p string) error { return os.Lchown(p, agent, agent) })
	for name, uid := range files {
		if err := os.Lchown(filepath.Join(dir, name), uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	walk(filepath.Join(dir, "outside"), func(p string) error { return os.Lchown(p, other, other) })
	bind := filepath.Join(dir, "env-qa-02/releases/aa01/data")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bind, "db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	walk(bind, func(p string) error { return os.Lchown(p, other, other) })
	if err := os.Lchown(filepath.Join(dir, "env-qa-02/releases/bb02"), other, other); err != nil {
		t.Fatal(err)
	}

	got, truncated, err := ForeignFiles(dir, agent)
	if err != nil || truncated {
		t.Fatalf("ForeignFiles = %v, %v, %v", got, truncated, err)
	}
	var names []string
	for _, f := range got {
		rel, _ := filepath.Rel(dir, f.Path)
		names = append(names, fmt.Sprintf("%s:%d", rel, f.UID))
	}
	// bb02 is listed by its directory; inside aa01, what a container's bind mount left is not.
	want := []string{"docker/config.json:0", "env-qa-02/releases/bb02:0", "outside:0", "outside/victim:0", "state.json:0"}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("foreign = %v\nwant      %v", names, want)
	}
	if got, _, err := ForeignFiles(filepath.Join(dir, "missing"), agent); got != nil || err != nil {
		t.Errorf("a missing state_dir: %v, %v", got, err)
	}
}

func TestForeignFilesStopsAtTheCap(t *testing.T) {
	dir := t.TempDir()
	for i := range maxForeign + 5 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Everything here is the test process's own: judged for another uid, all of it is foreign.
	got, truncated, err := ForeignFiles(dir, uint32(os.Geteuid())+1)
	if err != nil || !truncated || len(got) != maxForeign {
		t.Errorf("ForeignFiles = %d entries, truncated %v, %v; want %d, true", len(got), truncated, err, maxForeign)
	}
}
