package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReownRefuses(t *testing.T) {
	asRoot := process{euid: func() int { return 0 }}
	rootDir := t.TempDir() // the test's own: root's when the tests run as root (CI)
	for _, tc := range []struct {
		name string
		proc process
		dir  string
		want string
	}{
		{"not root", process{euid: func() int { return 1000 }}, t.TempDir(), "run as root"},
		{"a file, not a directory", asRoot, writeFile(t, "f"), "not a directory"},
		{"nothing there", asRoot, filepath.Join(t.TempDir(), "absent"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := runReown(reownOptions{dir: tc.dir}, &cliDeps{stdout: &out, stderr: &out, proc: tc.proc})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("runReown: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("runReown: %v, want %q", err, tc.want)
			}
		})
	}
	if os.Geteuid() == 0 {
		err := runReown(reownOptions{dir: rootDir}, &cliDeps{stdout: &bytes.Buffer{}, proc: asRoot})
		if err == nil || !strings.Contains(err.Error(), "root's own") {
			t.Errorf("a root-owned state directory: %v", err)
		}
	}
}

func writeFile(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
