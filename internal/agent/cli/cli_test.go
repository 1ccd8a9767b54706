package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb, func(k string) string { return env[k] })
	return code, out.String(), errb.String()
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigErrorsExit78NamingKeyAndFile(t *testing.T) {
	for _, tc := range []struct {
		name, text, key string
	}{
		{"unknown key", "env_id: env-qa-02\ntenancy:\n  prot: 443\n", "tenancy.prot"},
		{"bad type", "env_id: env-qa-02\ntenancy:\n  port: abc\n", "tenancy.port"},
		{"legacy approle", "env_id: env-qa-02\nbao:\n  approle:\n    role_id: x\n", "bao.approle"},
		{"missing env_id", "site: cbs\n", "env_id"},
		{"apply window 25:00", "env_id: env-qa-02\napply_windows: [\"Mon 25:00-26:00\"]\n", "apply_windows"},
		{"apply window zone", "env_id: env-qa-02\napply_windows_tz: Mars/Olympus\n", "apply_windows_tz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.text)
			for _, cmd := range []string{"tick", "status"} {
				code, _, stderr := runCLI(t, nil, "--config", path, cmd)
				if code != 78 || !strings.Contains(stderr, tc.key) || !strings.Contains(stderr, path) {
					t.Errorf("%s: exit %d, stderr %q; want 78 naming %s and the file", cmd, code, stderr, tc.key)
				}
			}
		})
	}
}

func TestConfigPathFromEnvironment(t *testing.T) {
	path := writeConfig(t, "env_id: [\n")
	code, _, stderr := runCLI(t, map[string]string{"MONKY_DEPLOYD_CONFIG": path}, "tick")
	if code != 78 || !strings.Contains(stderr, path) {
		t.Errorf("exit %d stderr %q: MONKY_DEPLOYD_CONFIG not used", code, stderr)
	}
	// The flag beats the environment.
	other := writeConfig(t, "env_id: env-qa-02\nnope: 1\n")
	code, _, stderr = runCLI(t, map[string]string{"MONKY_DEPLOYD_CONFIG": path}, "--config", other, "tick")
	if code != 78 || !strings.Contains(stderr, other) {
		t.Errorf("exit %d stderr %q: --config not preferred", code, stderr)
	}
}

func TestMissingConfigFile(t *testing.T) {
	code, _, stderr := runCLI(t, nil, "--config", "/nonexistent/config.yaml", "tick")
	if code != 78 || !strings.Contains(stderr, "/nonexistent/config.yaml") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

// version and --version print the same line, with the commit and the build date (issue 20).
func TestVersion(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, "version")
	line := regexp.MustCompile(`^monky-deployd ` + regexp.QuoteMeta(version.Version) + ` \(commit ([0-9a-f]{1,12}|unknown), built [^,]+, go1\.[0-9.]+, [a-z0-9]+/[a-z0-9]+\)\n$`)
	if code != 0 || !line.MatchString(stdout) {
		t.Errorf("version: exit %d stdout %q", code, stdout)
	}
	for _, args := range [][]string{{"--version"}, {"-v"}, {"--config", "/nonexistent", "--version"}} {
		code, flag, stderr := runCLI(t, nil, args...)
		if code != 0 || flag != stdout || stderr != "" {
			t.Errorf("%q: exit %d stdout %q (want %q) stderr %q", args, code, flag, stdout, stderr)
		}
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	if code, _, _ := runCLI(t, nil, "tick", "--no-such-flag"); code != 2 {
		t.Errorf("unknown flag exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, nil, "no-such-command"); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
	// A mistyped command is answered with the one meant, as cobra does (the root's own RunE, for
	// --version, must not lose that), and so is a word after --version.
	for _, args := range [][]string{{"stauts"}, {"--version", "stauts"}} {
		code, stdout, stderr := runCLI(t, nil, args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, `unknown command "stauts" for "monky-deployd"`) ||
			!strings.Contains(stderr, "Did you mean this?\n\tstatus") {
			t.Errorf("%q: exit %d stdout %q stderr %q; want 2 suggesting status", args, code, stdout, stderr)
		}
	}
}

func TestTickWithoutTokenOrGrantAsksForTheKit(t *testing.T) {
	dir := t.TempDir()
	path := writeConfig(t, "env_id: env-qa-02\ntransport: system\ntenancy:\n  base_url: http://127.0.0.1:1\nstate_dir: "+dir+"/state\nbootstrap_file: "+dir+"/bootstrap.jwt\n")
	code, _, stderr := runCLI(t, nil, "--config", path, "tick")
	if code != 1 || !strings.Contains(stderr, "re-run the install kit") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
}

func TestTickWithTenancyUnreachableIsTemporary(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	os.WriteFile(dir+"/state/bao.token", []byte("s.sometoken\n"), 0o600)
	cfg := "env_id: env-qa-02\ntransport: system\ntenancy:\n  base_url: http://127.0.0.1:1\n  timeout_s: 2\nstate_dir: " + dir + "/state\nbootstrap_file: " + dir + "/bootstrap.jwt\n"
	code, _, stderr := runCLI(t, nil, "--config", writeConfig(t, cfg), "tick")
	if code != 75 || !strings.Contains(stderr, "temporary network failure") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
	if strings.Contains(stderr, "s.sometoken") {
		t.Error("the token leaked into stderr")
	}
	code, _, stderr = runCLI(t, nil, "--config", writeConfig(t, cfg+"laptop_mode: true\n"), "tick")
	if code != 0 {
		t.Errorf("laptop mode: exit %d stderr %q", code, stderr)
	}
}

func TestStatus(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	os.WriteFile(dir+"/state/state.json", []byte(`{"env_id":"env-qa-02","applied_sha":"7a10aa","history":["7a10aa"],"last_result":"applied","token":{"source":"lease","obtained_at":"2026-12-02T09:00:00Z","ttl_s":86400},"future_field":1}`), 0o600)
	path := writeConfig(t, "env_id: env-qa-02\nsite: cbs\nstate_dir: "+dir+"/state\n")
	code, stdout, stderr := runCLI(t, nil, "--config", path, "status")
	if code != 0 || !strings.Contains(stdout, "applied:") || !strings.Contains(stdout, "7a10aa") || !strings.Contains(stdout, "lease") {
		t.Errorf("status exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "--config", path, "status", "--json")
	var doc map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil {
		t.Fatalf("status --json exit %d: %s", code, stdout)
	}
	if doc["schema"] != float64(1) || doc["applied_sha"] != "7a10aa" || doc["token_source"] != "lease" || doc["env_id"] != "env-qa-02" {
		t.Errorf("status --json = %s", stdout)
	}
	if _, ok := doc["timer"]; !ok {
		t.Error("status --json lacks timer")
	}
	if v, ok := doc["deploy_backoff"]; !ok || v != nil {
		t.Errorf("status --json deploy_backoff = %v, want null", v)
	}
}

func TestStatusShowsTheBackoff(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	os.WriteFile(dir+"/state/state.json", []byte(`{"env_id":"env-qa-02","applied_sha":"7a10aa","last_result":"healthy",
		"deploy_backoff":{"sha":"9f3e21","attempts":3,"next_attempt_at":"2999-01-01T00:00:00Z","reverted_to":"7a10aa","revert_healthy":true}}`), 0o600)
	path := writeConfig(t, "env_id: env-qa-02\nsite: cbs\nstate_dir: "+dir+"/state\n")
	code, stdout, stderr := runCLI(t, nil, "--config", path, "status")
	if code != 0 || !strings.Contains(stdout, "backoff:         9f3e21 failed 3×, reverted to 7a10aa (healthy); next try at 2999-01-01T00:00:00Z") {
		t.Errorf("status exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "--config", path, "status", "--json")
	var doc struct {
		Backoff struct {
			Sha           string `json:"sha"`
			Attempts      int    `json:"attempts"`
			NextAttemptAt string `json:"next_attempt_at"`
			RevertedTo    string `json:"reverted_to"`
		} `json:"deploy_backoff"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.Backoff.Sha != "9f3e21" || doc.Backoff.Attempts != 3 ||
		doc.Backoff.NextAttemptAt != "2999-01-01T00:00:00Z" || doc.Backoff.RevertedTo != "7a10aa" {
		t.Errorf("status --json exit %d: %s", code, stdout)
	}
}

func TestTickWhileAnotherHoldsTheLockDoesNothingEvenWithABrokenIdentity(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	cfg := "env_id: env-qa-02\ntransport: sdk\nidentity: " + dir + "/missing-identity.json\nstate_dir: " + dir + "/state\n"
	path := writeConfig(t, cfg)
	f, err := os.OpenFile(dir+"/state/lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, nil, "--config", path, "tick")
	if code != 0 || !strings.Contains(stderr, "another tick is running") {
		t.Errorf("exit %d stderr %q", code, stderr)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	code, _, stderr = runCLI(t, nil, "--config", path, "tick")
	if code == 0 || !strings.Contains(stderr, "missing-identity.json") {
		t.Errorf("without the lock held: exit %d stderr %q, want the identity named", code, stderr)
	}
}

// `status` shows the last failure until it no longer matters, and the last tick's exit code.
func TestStatusShowsTheLastFailure(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	os.WriteFile(dir+"/state/state.json", []byte(`{"env_id":"env-qa-02","applied_sha":"7a10aa","last_result":"healthy","last_exit_code":1,
		"last_failure":{"sha":"9f3e21d07a1b2c3d","code":"PULL_FAILED","detail":"compose pull: pull access denied for x/api","at":"2026-12-02T09:58:00Z","attempts":2}}`), 0o600)
	path := writeConfig(t, "env_id: env-qa-02\nsite: cbs\nstate_dir: "+dir+"/state\n")
	code, stdout, stderr := runCLI(t, nil, "--config", path, "status")
	if code != 0 || !strings.Contains(stdout, "last failure:    9f3e21d07a1b PULL_FAILED at 2026-12-02T09:58:00Z, 2 attempts: compose pull: pull access denied for x/api\n") ||
		!strings.Contains(stdout, "last tick exit:  1\n") {
		t.Errorf("status exit %d:\n%s%s", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "--config", path, "status", "--json")
	var doc struct {
		LastFailure *struct {
			Sha, Code, Detail, At string
			Attempts              int
		} `json:"last_failure"`
		LastExitCode *int `json:"last_exit_code"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.LastFailure == nil || doc.LastFailure.Code != "PULL_FAILED" ||
		doc.LastFailure.Attempts != 2 || doc.LastFailure.At != "2026-12-02T09:58:00Z" || doc.LastExitCode == nil || *doc.LastExitCode != 1 {
		t.Errorf("status --json exit %d: %s", code, stdout)
	}
}

// `status --json` always prints a document: without a config (or a readable state) it says why,
// and exits as the text form does.
func TestStatusJSONWithoutConfig(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	textCode, textOut, textErr := runCLI(t, nil, "--config", missing, "status")
	code, stdout, stderr := runCLI(t, nil, "--config", missing, "status", "--json")
	var doc struct {
		Schema int    `json:"schema"`
		Config string `json:"config"`
		Error  string `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("status --json without a config printed %q: %v", stdout, err)
	}
	if doc.Schema != 1 || doc.Config != missing || !strings.Contains(doc.Error, "nope.yaml") {
		t.Errorf("document %+v", doc)
	}
	if code != textCode || code != 78 || stderr != textErr || textOut != "" {
		t.Errorf("--json: exit %d stderr %q; text: exit %d stdout %q stderr %q", code, stderr, textCode, textOut, textErr)
	}
	dir := t.TempDir()
	os.WriteFile(dir+"/state.json", []byte(`{"applied_sha": 5}`), 0o600)
	path := writeConfig(t, "env_id: env-qa-02\nstate_dir: "+dir+"\n")
	code, stdout, _ = runCLI(t, nil, "--config", path, "status", "--json")
	if code != 1 || json.Unmarshal([]byte(stdout), &doc) != nil || !strings.Contains(doc.Error, "state.json") {
		t.Errorf("an unreadable state: exit %d, %q", code, stdout)
	}
}
