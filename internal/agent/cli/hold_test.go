package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/registryauth"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// holdBox is a config and a state_dir a tick has used.
func holdBox(t *testing.T) (cfgPath, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	stateDir = filepath.Join(dir, "state")
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	return writeConfig(t, "env_id: env-qa-02\nsite: cbs\nstate_dir: "+stateDir+"\n"), stateDir
}

func loadHold(t *testing.T, stateDir string) *state.Hold {
	t.Helper()
	st, err := state.Load(filepath.Join(stateDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	return st.Hold
}

func TestHoldRefusesBadFlags(t *testing.T) {
	cfg, stateDir := holdBox(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no reason", []string{"hold"}, `required flag(s) "reason" not set`},
		{"blank reason", []string{"hold", "--reason", "  "}, "--reason: empty"},
		{"a newline", []string{"hold", "--reason", "a\nb"}, "contains U+000A"},
		{"an escape", []string{"hold", "--reason", "red \x1b[31m"}, "contains U+001B, a control or format character"},
		{"a right-to-left override", []string{"hold", "--reason", "db \u202etsil"}, "--reason: contains U+202E"},
		{"a zero-width space", []string{"hold", "--reason", "r", "--by", "ali\u200bce"}, "by: contains U+200B"},
		{"a long name", []string{"hold", "--reason", "r", "--by", strings.Repeat("x", 65)}, "by: 65 characters, at most 64"},
		{"too long", []string{"hold", "--reason", strings.Repeat("x", 201)}, "201 characters, at most 200"},
		{"both ends", []string{"hold", "--reason", "r", "--for", "1h", "--until", "2999-01-01T00:00:00Z"}, "none of the others can be"},
		{"more than 7 days", []string{"hold", "--reason", "r", "--for", "169h"}, "more than 7 days"},
		{"8 days", []string{"hold", "--reason", "r", "--for", "8d"}, "want a duration"},
		{"zero", []string{"hold", "--reason", "r", "--for", "0s"}, "positive"},
		{"not a duration", []string{"hold", "--reason", "r", "--for", "soon"}, "want a duration"},
		{"past", []string{"hold", "--reason", "r", "--until", "2020-01-01T00:00:00Z"}, "not in the future"},
		{"far", []string{"hold", "--reason", "r", "--until", "2999-01-01T00:00:00Z"}, "more than 7 days ahead"},
		{"not a time", []string{"hold", "--reason", "r", "--until", "tomorrow"}, "want RFC 3339"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, nil, append([]string{"--config", cfg}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d stderr %q, want 2 with %q", code, stderr, tc.want)
			}
			if _, err := os.Stat(filepath.Join(stateDir, "state.json")); err == nil {
				t.Error("a refused hold wrote state.json")
			}
		})
	}
}

func TestHoldAndUnhold(t *testing.T) {
	cfg, stateDir := holdBox(t)
	before := time.Now()
	code, stdout, stderr := runCLI(t, map[string]string{"SUDO_USER": "alice"}, "--config", cfg, "hold", "--reason", "db migration by hand")
	if code != 0 {
		t.Fatalf("hold: exit %d %s%s", code, stdout, stderr)
	}
	h := loadHold(t, stateDir)
	if h == nil || h.By != "alice" || h.Reason != "db migration by hand" || h.Until.Sub(h.Since) != 4*time.Hour || h.Since.Before(before.Add(-time.Second)) {
		t.Fatalf("hold = %+v, want alice's for the default 4h", h)
	}
	if !strings.Contains(stdout, "held by alice until "+h.Until.Format(time.RFC3339)+": db migration by hand (4h0m0s from now)") ||
		!strings.Contains(stdout, "ticks still check in and report") {
		t.Errorf("stdout %q", stdout)
	}
	// status shows it, as text and JSON.
	_, out, _ := runCLI(t, nil, "--config", cfg, "status")
	if !strings.Contains(out, "hold:            held by alice until") {
		t.Errorf("status:\n%s", out)
	}
	_, out, _ = runCLI(t, nil, "--config", cfg, "status", "--json")
	var doc struct {
		Hold *state.Hold `json:"hold"`
	}
	if json.Unmarshal([]byte(out), &doc) != nil || doc.Hold == nil || doc.Hold.By != "alice" {
		t.Errorf("status --json: %s", out)
	}

	// A second hold replaces the first and says so; --for in days, --until in local time.
	code, stdout, _ = runCLI(t, map[string]string{"SUDO_USER": "bob"}, "--config", cfg, "hold", "--reason", "longer", "--for", "2d")
	if h := loadHold(t, stateDir); code != 0 || h.By != "bob" || h.Until.Sub(h.Since) != 48*time.Hour || !strings.Contains(stdout, "replacing the hold held by alice") {
		t.Errorf("exit %d, %+v, %q", code, h, stdout)
	}
	at := time.Now().Add(3 * time.Hour).Truncate(time.Minute)
	if code, _, stderr := runCLI(t, nil, "--config", cfg, "hold", "--reason", "r", "--until", at.Format("2006-01-02 15:04")); code != 0 || !loadHold(t, stateDir).Until.Equal(at) {
		t.Errorf("--until local: exit %d %s, hold %+v", code, stderr, loadHold(t, stateDir))
	}

	code, stdout, _ = runCLI(t, nil, "--config", cfg, "unhold")
	if code != 0 || loadHold(t, stateDir) != nil || !strings.Contains(stdout, "hold ended: held by") {
		t.Errorf("unhold: exit %d %q", code, stdout)
	}
	code, stdout, _ = runCLI(t, nil, "--config", cfg, "unhold")
	if code != 0 || strings.TrimSpace(stdout) != "not held" {
		t.Errorf("a second unhold: exit %d %q", code, stdout)
	}
	_, out, _ = runCLI(t, nil, "--config", cfg, "status")
	if !strings.Contains(out, "hold:            -") {
		t.Errorf("status after unhold:\n%s", out)
	}
}

// A hold's reason leaves the box in the journal, reports and check-ins: one that holds a secret
// of the running release is refused.
func TestHoldRefusesAReasonHoldingASecret(t *testing.T) {
	cfg, stateDir := holdBox(t)
	files := map[string]string{
		"bundle.json":        `{"compose_file": "docker-compose.yml"}`,
		"docker-compose.yml": "services:\n  api:\n    image: x\n",
		".env.template":      "DB=${DB_PASSWORD}\nURL=https://${HOST}/api\nLOG=info\n",
		"manifest.json":      `{"entries": [{"var": "DB_PASSWORD", "path": "db"}, {"var": "HOST", "path": "host"}]}`,
	}
	sha := bundle.Sha(files)
	rel := filepath.Join(stateDir, "env-qa-02", "releases", sha)
	if err := os.MkdirAll(rel, 0o700); err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, content := range files {
		names = append(names, name)
		if err := os.WriteFile(filepath.Join(rel, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(names)
	if err := os.WriteFile(filepath.Join(rel, ".env"), []byte("DB=s3cr3t-db-p4ss\nURL=https://internal-host.example/api\nLOG=info\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "bao.token"), []byte("s.the-agents-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The registry credential is never in the .env: only in the agent's own Docker config.
	if err := registryauth.WriteDockerConfig(filepath.Join(stateDir, "docker"), registryauth.Auth{Registry: "registry.example:5000", Username: "puller", Password: secret.New("r3g-pull-s3cret")}); err != nil {
		t.Fatal(err)
	}
	if err := state.Save(filepath.Join(stateDir, "state.json"), &state.State{AppliedSha: sha, AppliedFiles: &state.ReleaseFiles{Sha: sha, Files: names}}); err != nil {
		t.Fatal(err)
	}
	encoded := base64.StdEncoding.EncodeToString([]byte("puller:r3g-pull-s3cret"))
	for _, reason := range []string{"pw is s3cr3t-db-p4ss", "host internal-host.example is down", "token s.the-agents-token",
		"registry login r3g-pull-s3cret fails", "auth " + encoded} {
		code, _, stderr := runCLI(t, nil, "--config", cfg, "hold", "--reason", reason)
		if code != 2 || !strings.Contains(stderr, "holds a secret the box keeps") || loadHold(t, stateDir) != nil {
			t.Errorf("%q: exit %d %q", reason, code, stderr)
		}
		if strings.Contains(stderr, reason) {
			t.Errorf("the refusal repeats the secret: %q", stderr)
		}
	}
	if code, _, stderr := runCLI(t, nil, "--config", cfg, "hold", "--reason", "log level info is too loud"); code != 0 || strings.Contains(stderr, "could not be read") {
		t.Errorf("a reason without a secret: exit %d %q", code, stderr)
	}
}

// hold waits for a running tick rather than race its state.json writes.
func TestHoldWaitsForTheRunningTick(t *testing.T) {
	cfg, stateDir := holdBox(t)
	f, err := os.OpenFile(filepath.Join(stateDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	stderr := &signalWriter{on: "waiting for it to end", ch: waiting}
	done := make(chan int)
	go func() {
		var out bytes.Buffer
		done <- run(context.Background(), []string{"--config", cfg, "hold", "--reason", "r"}, &out, stderr, func(string) string { return "" })
	}()
	<-waiting
	if loadHold(t, stateDir) != nil {
		t.Fatal("hold wrote while the tick held the lock")
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 0 || loadHold(t, stateDir) == nil {
		t.Fatalf("after the tick: exit %d", code)
	}
}

type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	on   string
	ch   chan struct{}
	done bool
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.on) {
		w.done = true
		close(w.ch)
	}
	return len(p), nil
}

func TestHeldBy(t *testing.T) {
	p := process{euid: func() int { return 998 }, loginUser: func() string { return "carol" }, userName: func() string { return "monky-deployd" }}
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if got := heldBy(env(map[string]string{"SUDO_USER": "alice"}), p); got != "alice" {
		t.Errorf("with SUDO_USER: %q", got)
	}
	if got := heldBy(env(nil), p); got != "carol" {
		t.Errorf("the login user: %q", got)
	}
	if got := heldBy(env(map[string]string{"SUDO_USER": "bad\nname"}), p); got != "carol" {
		t.Errorf("a SUDO_USER no line can carry: %q", got)
	}
	p.loginUser = func() string { return "" }
	if got := heldBy(env(nil), p); got != "monky-deployd" {
		t.Errorf("the account running: %q", got)
	}
	p.userName = func() string { return "" }
	if got := heldBy(env(nil), p); got != "uid 998" {
		t.Errorf("nobody known: %q", got)
	}
}

// Run as root where state_dir is the agent's, hold re-runs as the agent's user carrying who
// asked (the re-run no longer sees SUDO_USER), as tick does.
func TestHoldAsRootReRunsAsTheAgent(t *testing.T) {
	cfg, _ := holdBox(t)
	agentAcct := account{name: "monky-deployd", uid: 998, gid: 997, groups: []uint32{997}, home: "/var/lib/monky-deployd"}
	fp := &fakeProcess{euid: 0, owner: 998, accounts: map[uint32]account{998: agentAcct}}
	p := fp.process()
	p.loginUser, p.userName = func() string { return "" }, func() string { return "root" }
	var out, errb bytes.Buffer
	args := []string{"--config", cfg, "hold", "--reason", "r", "--for", "1h"}
	g := &cliDeps{configPath: cfg, stdout: &out, stderr: &errb, getenv: func(k string) string { return map[string]string{"SUDO_USER": "alice"}[k] }, args: args, proc: p}
	err := runHold(context.Background(), holdOptions{reason: "r", forD: "1h"}, g, time.Now())
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 78 || !strings.Contains(err.Error(), "Run the hold as that user: sudo -u monky-deployd monky-deployd --config "+cfg+" hold --reason") {
		t.Fatalf("err = %v (the fake's re-run fails)", err)
	}
	if want := append(append([]string{"monky-deployd"}, args...), "--by", "alice"); !slices.Equal(fp.argv, want) {
		t.Errorf("re-ran %q, want %q", fp.argv, want)
	}
}
