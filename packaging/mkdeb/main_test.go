package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// standin builds a small static Go program to package (a Go binary: the copyright file is made
// from its build information).
func standin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string]string{"go.mod": "module example.com/standin\n\ngo 1.26\n", "main.go": "package main\n\nfunc main() {}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "standin")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bin := standin(t)
	versionFile := filepath.Join(dir, "VERSION")
	if err := os.WriteFile(versionFile, []byte("0.3.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"-deployd", bin, "-fleetctl", bin, "-packaging", "..", "-out", filepath.Join(dir, "dist"), "-version-file", versionFile,
		"-modcache", goEnv(t, "GOMODCACHE"), "-goroot", goEnv(t, "GOROOT")}
	for _, tc := range []struct {
		name     string
		args     []string
		epoch    string
		wantCode int
		wantOut  []string
	}{
		{"version from the file", common, "1796000000", 0, []string{"monky-deployd_0.3.0_amd64.deb", "monky-fleetctl_0.3.0_amd64.deb"}},
		{"version flag wins", append([]string{"-version", "0.3.1"}, common...), "", 0, []string{"monky-deployd_0.3.1_amd64.deb", "monky-fleetctl_0.3.1_amd64.deb"}},
		{"bad SOURCE_DATE_EPOCH", common, "yesterday", 2, []string{"SOURCE_DATE_EPOCH"}},
		{"bad version", append([]string{"-version", "latest"}, common...), "", 2, []string{"Version"}},
		{"no module cache", append(common, "-modcache", ""), "", 2, []string{"ModCache"}},
		{"unknown flag", []string{"-colour"}, "", 2, []string{"colour"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, tc.epoch, &out, &errOut)
			for _, w := range tc.wantOut {
				if code != tc.wantCode || !strings.Contains(out.String()+errOut.String(), w) {
					t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.wantCode, out.String(), errOut.String(), w)
				}
			}
			if code == 0 {
				for _, p := range strings.Fields(out.String()) {
					if _, err := os.Stat(p); err != nil {
						t.Errorf("a printed path does not exist: %v", err)
					}
				}
			}
		})
	}
}
