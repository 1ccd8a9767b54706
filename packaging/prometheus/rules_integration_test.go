//go:build integration

package prometheus_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(itest.PromtoolBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Debian's promtool accepts the shipped rules and passes their unit tests: the time each alert
// takes to fire, and silence on a healthy fleet.
func TestPromtoolChecksAndTestsTheRules(t *testing.T) {
	itest.Require(t, itest.PartPromtool)
	if out, err := promtool(t, ".", "check", "rules", "monky-deployd.rules.yml"); err != nil || !strings.Contains(out, "SUCCESS: 12 rules found") {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := promtool(t, ".", "test", "rules", "monky-deployd.rules.test.yml"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	// The unit tests can fail: the same tests against rules whose Silent alert waits 5 minutes
	// instead of 1 must report the alert missing at 4m.
	dir := t.TempDir()
	rules, err := os.ReadFile("monky-deployd.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	// The first `for: 1m` after the alert's name is its own (the summary's words change).
	head, tail, ok := strings.Cut(string(rules), "- alert: MonkyAgentSilent\n")
	slow := string(rules)
	if ok {
		slow = head + "- alert: MonkyAgentSilent\n" + strings.Replace(tail, "        for: 1m\n", "        for: 5m\n", 1)
	}
	block, _, _ := strings.Cut(strings.TrimPrefix(slow, head+"- alert: MonkyAgentSilent\n"), "- alert: ")
	if !ok || !strings.Contains(block, "        for: 5m\n") {
		t.Fatal("could not make the slow copy of the rules")
	}
	tests, err := os.ReadFile("monky-deployd.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"monky-deployd.rules.yml": slow, "monky-deployd.rules.test.yml": string(tests)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := promtool(t, dir, "test", "rules", "monky-deployd.rules.test.yml")
	if err == nil || !strings.Contains(out, "MonkyAgentSilent") {
		t.Errorf("promtool passed rules that fire 4 minutes late: %v\n%s", err, out)
	}
}
