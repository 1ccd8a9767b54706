package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// TestMain points the default textfile directory at a temporary one: the tests' configs leave
// textfile_dir at its default, and this machine may have node_exporter's real directory.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "cli-textfile-")
	if err != nil {
		panic(err)
	}
	defaultTextfileDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func readTextfile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "monky_deployd.prom"))
	if err != nil {
		t.Fatalf("no textfile: %v", err)
	}
	return string(b)
}

func wantSeries(t *testing.T, text string, series ...string) {
	t.Helper()
	for _, s := range series {
		if !strings.Contains(text, "\n"+s+"\n") {
			t.Errorf("textfile lacks %q:\n%s", s, text)
		}
	}
}

// A config error (exit 78) names no textfile_dir: the default directory gets the textfile.
func TestTextfileOnConfigError(t *testing.T) {
	os.Remove(filepath.Join(defaultTextfileDir, "monky_deployd.prom"))
	code, _, _ := runCLI(t, nil, "--config", writeConfig(t, "env_id: env-qa-02\nnope: 1\n"), "tick")
	if code != 78 {
		t.Fatalf("exit %d, want 78", code)
	}
	wantSeries(t, readTextfile(t, defaultTextfileDir), "monky_deployd_last_tick_exit_code 78", "monky_deployd_last_tick_lock_held 0")
}

// A tick that fails (here: its identity is missing, exit 1) and one that finds the lock held
// (exit 0, did nothing) both leave a textfile in textfile_dir; neither records a success, and
// the lock-held one keeps state.json's counters without writing state.json.
func TestTextfileOnFailureAndLockHeld(t *testing.T) {
	dir := t.TempDir()
	textfiles := filepath.Join(dir, "textfile")
	os.MkdirAll(filepath.Join(dir, "state"), 0o700)
	os.MkdirAll(textfiles, 0o755)
	ok := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	st := &state.State{EnvID: "env-qa-02", LastResult: "healthy", Counters: state.Counters{Applies: 7, Leases: 2}, LastTickOKAt: &ok}
	if err := state.Save(filepath.Join(dir, "state", "state.json"), st); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "state", "state.json"))
	cfg := "env_id: env-qa-02\ntransport: sdk\nidentity: " + dir + "/missing-identity.json\nstate_dir: " + dir + "/state\ntextfile_dir: " + textfiles + "\n"
	path := writeConfig(t, cfg)

	code, _, _ := runCLI(t, nil, "--config", path, "tick")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	text := readTextfile(t, textfiles)
	wantSeries(t, text,
		`monky_deployd_last_tick_exit_code{env="env-qa-02"} 1`,
		`monky_deployd_applies_total{env="env-qa-02"} 7`,
		`monky_deployd_last_success_timestamp_seconds{env="env-qa-02"} 1.7962884e+09`)

	f, err := os.OpenFile(filepath.Join(dir, "state", "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(textfiles, "monky_deployd.prom"))
	if code, _, _ := runCLI(t, nil, "--config", path, "tick"); code != 0 {
		t.Fatalf("lock held: exit %d, want 0", code)
	}
	wantSeries(t, readTextfile(t, textfiles),
		`monky_deployd_last_tick_exit_code{env="env-qa-02"} 0`,
		`monky_deployd_last_tick_lock_held{env="env-qa-02"} 1`,
		`monky_deployd_leases_total{env="env-qa-02"} 2`,
		`monky_deployd_last_success_timestamp_seconds{env="env-qa-02"} 1.7962884e+09`)
	after, _ := os.ReadFile(filepath.Join(dir, "state", "state.json"))
	if string(before) != string(after) {
		t.Errorf("state.json changed by ticks that did no work:\n%s\n---\n%s", before, after)
	}
}

// A textfile_dir that does not exist means no node_exporter: nothing is written, nothing is
// created, and the tick's exit is its own.
func TestNoTextfileDirectory(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no-node-exporter")
	cfg := "env_id: env-qa-02\nidentity: " + dir + "/missing-identity.json\nstate_dir: " + dir + "/state\ntextfile_dir: " + missing + "\n"
	code, _, stderr := runCLI(t, nil, "--config", writeConfig(t, cfg), "tick")
	if code != 1 || strings.Contains(stderr, "metrics") {
		t.Errorf("exit %d, stderr %q: want 1 and no metrics line", code, stderr)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Error("the tick created the textfile directory")
	}
}

// A textfile directory the agent cannot write to is a journal line, not a failed tick: a file
// where the directory should be (which stops root too, as CI runs), and, for any other user, a
// read-only directory.
func TestTextfileNotWritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	targets := []string{file}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.MkdirAll(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, ro)
	}
	for _, target := range targets {
		cfg := "env_id: env-qa-02\nidentity: " + dir + "/missing-identity.json\nstate_dir: " + dir + "/state\ntextfile_dir: " + target + "\n"
		code, _, stderr := runCLI(t, nil, "--config", writeConfig(t, cfg), "tick")
		if code != 1 || !strings.Contains(stderr, "metrics: textfile not written") {
			t.Errorf("textfile_dir %s: exit %d, stderr %q", target, code, stderr)
		}
	}
}
