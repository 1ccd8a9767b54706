package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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
		// Its times are kept to the second: a shorter hold would be written with until == since,
		// which state.json's reader refuses (and the next tick would set the whole state aside).
		{"a nanosecond", []string{"hold", "--reason", "r", "--for", "1ns"}, "less than a minute"},
		{"half a second", []string{"hold", "--reason", "r", "--for", "500ms"}, "less than a minute"},
		{"59 seconds", []string{"hold", "--reason", "r", "--for", "59s"}, "less than a minute"},
		{"until in a few seconds", []string{"hold", "--reason", "r", "--until", time.Now().Add(5 * time.Second).UTC().Format(time.RFC3339)}, "less than a minute ahead"},
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
	if code, _, stderr := runCLI(t, nil, "--config", cfg, "hold", "--reason", "log level info is too loud"); code != 0 || strings.Contains(stderr, "could not be checked") {
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

// appliedRelease lays out an applied release whose .env the agent's own RenderEnv made from
// template and values (each variable read from the KV path of its lower-cased name).
func appliedRelease(t *testing.T, stateDir, template string, values map[string]string) {
	t.Helper()
	var entries []string
	sv := map[string]secret.Value{}
	for k, v := range values {
		entries = append(entries, fmt.Sprintf(`{"var": %q, "path": %q}`, k, strings.ToLower(k)))
		sv[k] = secret.New(v)
	}
	slices.Sort(entries)
	files := map[string]string{
		"bundle.json":        `{"compose_file": "docker-compose.yml"}`,
		"docker-compose.yml": "services:\n  api:\n    image: x\n",
		".env.template":      template,
		"manifest.json":      `{"entries": [` + strings.Join(entries, ",") + `]}`,
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
	env, err := bundle.RenderEnv(template, sv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	if err := os.WriteFile(filepath.Join(rel, ".env"), []byte(env), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := state.Save(filepath.Join(stateDir, "state.json"), &state.State{AppliedSha: sha, AppliedFiles: &state.ReleaseFiles{Sha: sha, Files: names}}); err != nil {
		t.Fatal(err)
	}
}

// Every shape a manifest value takes in the .env is refused in a reason: quoted and escaped
// whole values, and each of several values on one line (a DSN, `user:pass`), which `hold` once
// checked only as the line's whole value. Where a line reads more than one way (a `:` in the
// password of `${U}:${P}`) the part of the value every reading gives is refused and stderr says
// which values were not told apart.
func TestHoldRefusesASecretInAnyShapeOfTheEnv(t *testing.T) {
	for _, tc := range []struct {
		name, template string
		values         map[string]string
		secret         string
		unsure         bool // stderr names values not told apart
	}{
		{"dsn of two values", "DSN=postgres://app:${DB_PASS}@${DB_HOST}/app\n",
			map[string]string{"DB_PASS": "s3cr3t-db-p4ss", "DB_HOST": "db.internal"}, "s3cr3t-db-p4ss", false},
		{"dsn host", "DSN=postgres://app:${DB_PASS}@${DB_HOST}/app\n",
			map[string]string{"DB_PASS": "s3cr3t-db-p4ss", "DB_HOST": "db.internal"}, "db.internal", false},
		{"user:pass", "AUTH=${U}:${P}\n", map[string]string{"U": "svc-user", "P": "pa55-w0rd-x"}, "pa55-w0rd-x", false},
		{"user:pass with a colon in the password", "AUTH=${U}:${P}\n",
			map[string]string{"U": "svc-user", "P": "pa55:w0rd-x"}, "pa55:w0rd-x", true},
		{"the same value twice", "PAIR=${P}/${P}\n", map[string]string{"P": "pa55-w0rd-x"}, "pa55-w0rd-x", false},
		{"dollars", "P=${P}\n", map[string]string{"P": "ab$cd$$ef"}, "ab$cd$$ef", false},
		{"spaces", "P=${P}\n", map[string]string{"P": "correct horse battery"}, "correct horse battery", false},
		{"unicode", "P=${P}\n", map[string]string{"P": "pässwörd-ü"}, "pässwörd-ü", false},
		{"quotes", "P=${P}\n", map[string]string{"P": `a"b'c\d`}, `a"b'c\d`, false},
		{"hash", "P=${P}\n", map[string]string{"P": "abc #def"}, "abc #def", false},
		{"inside a url", "URL=https://u:${P}@h/x\n", map[string]string{"P": "x.y{z}"}, "x.y{z}", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, stateDir := holdBox(t)
			appliedRelease(t, stateDir, tc.template, tc.values)
			code, _, stderr := runCLI(t, nil, "--config", cfg, "hold", "--reason", "the password is "+tc.secret)
			if code != 2 || !strings.Contains(stderr, "holds a secret the box keeps") || loadHold(t, stateDir) != nil {
				t.Errorf("a reason holding %q: exit %d %q; hold %+v", tc.secret, code, stderr, loadHold(t, stateDir))
			}
			if got := strings.Contains(stderr, "not told apart"); got != tc.unsure {
				t.Errorf("stderr names values not told apart: %v, want %v: %q", got, tc.unsure, stderr)
			}
		})
	}
}

// Two values side by side (`${A}${B}`) cannot be told apart at all: only the line's whole value
// is known, and `hold` says so rather than pass the reason as checked.
func TestHoldSaysWhatItCouldNotTellApart(t *testing.T) {
	cfg, stateDir := holdBox(t)
	appliedRelease(t, stateDir, "KEY=${A}${B}\n", map[string]string{"A": "first-half", "B": "second-half"})
	code, _, stderr := runCLI(t, nil, "--config", cfg, "hold", "--reason", "key first-halfsecond-half leaked")
	if code != 2 || loadHold(t, stateDir) != nil {
		t.Errorf("the whole value: exit %d %q", code, stderr)
	}
	code, _, stderr = runCLI(t, nil, "--config", cfg, "hold", "--reason", "half of it is first-half")
	if code != 0 || !strings.Contains(stderr, "KEY A, KEY B: not told apart") {
		t.Errorf("exit %d, stderr %q; want a hold and a warning naming KEY A and KEY B", code, stderr)
	}
	if strings.Contains(stderr, "first-half") || strings.Contains(stderr, "second-half") {
		t.Errorf("the warning quotes a value: %q", stderr)
	}
}
