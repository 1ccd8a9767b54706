package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kitKeys = "# Written by install.sh for env-qa-02. Re-running the kit sets only its own keys.\n\n" +
	"env_id: env-qa-02\nsite: cbs\ntransport: proxy\n"

func TestConfigMerge(t *testing.T) {
	dir := t.TempDir()
	kit := filepath.Join(dir, "kit.yaml")
	if err := os.WriteFile(kit, []byte(kitKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	tuned := "env_id: env-qa-02\nsite: cbs\ntransport: sdk\n# node_exporter lives elsewhere here\ntextfile_dir: /srv/prom\n"
	if err := os.WriteFile(cfg, []byte(tuned), 0o640); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, nil, "--config", cfg, "config", "merge", "--kit", kit)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "transport: proxy") || !strings.Contains(out, "textfile_dir: /srv/prom") || !strings.Contains(out, "# node_exporter lives elsewhere here") {
		t.Errorf("stdout:\n%s", out)
	}
	if !strings.Contains(errOut, "the kit sets (header), transport in "+cfg) {
		t.Errorf("stderr: %q", errOut)
	}
	if got, _ := os.ReadFile(cfg); string(got) != tuned {
		t.Error("merge wrote the config itself; the kit places it")
	}
	// The merged file merges to itself: nothing to write.
	if err := os.WriteFile(cfg, []byte(out), 0o640); err != nil {
		t.Fatal(err)
	}
	code, again, errOut := runCLI(t, nil, "--config", cfg, "config", "merge", "--kit", kit)
	if code != 0 || again != out || !strings.Contains(errOut, "unchanged") {
		t.Errorf("second merge: exit %d, changed output %v, stderr %q", code, again != out, errOut)
	}
}

func TestConfigMergeRefuses(t *testing.T) {
	dir := t.TempDir()
	kit := filepath.Join(dir, "kit.yaml")
	if err := os.WriteFile(kit, []byte(kitKeys), 0o600); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "shadow")
	if err := os.WriteFile(victim, []byte("root:secret-hash:::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, "planted.yaml")
	if err := os.Symlink(victim, planted); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("env_id: env-qa-02\nsite: cbs\ntimeout: 3\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a symlink at the config's name", []string{"--config", planted, "config", "merge", "--kit", kit}, "is a symlink"},
		{"a key the agent does not know", []string{"--config", bad, "config", "merge", "--kit", kit}, "timeout"},
		{"no kit", []string{"--config", bad, "config", "merge", "--kit", filepath.Join(dir, "absent")}, "the kit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, tc.args...)
			if code != 78 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stderr %q; want 78 and %q", code, errOut, tc.want)
			}
			if out != "" || strings.Contains(errOut, "secret-hash") {
				t.Errorf("a refused merge printed %q / %q", out, errOut)
			}
		})
	}
	// A missing config is the kit's whole file.
	code, out, _ := runCLI(t, nil, "--config", filepath.Join(dir, "none.yaml"), "config", "merge", "--kit", kit)
	if code != 0 || out != kitKeys {
		t.Errorf("no config: exit %d, stdout %q", code, out)
	}
}
