package agent_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/state"
)

// The steps of a tick, in order; Deps.Step is called after each.
var steps = []string{"lock", "token", "checkin", "bundle", "checks", "lease", "secrets", "stage", "promote", "pull", "up", "healthy", "state"}

var errCrash = errors.New("injected crash")

// A tick that dies after any step leaves the previous release running, state.json readable,
// no temp file behind, and the next tick converges.
func TestATickKilledAtAnyStepIsRecoveredByTheNext(t *testing.T) {
	for _, at := range steps {
		t.Run(at, func(t *testing.T) {
			h := newHarness(t)
			first := h.desire(bundleSpec{})
			h.expectExit(agent.ExitOK)

			second := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
			reached := false
			h.step = func(name string) error {
				if name == at {
					reached = true
					return errCrash
				}
				return nil
			}
			if code := h.tick(); code == agent.ExitOK {
				t.Fatalf("the crashed tick exited 0")
			}
			if !reached {
				t.Fatalf("step %q never reached", at)
			}
			st, err := state.Load(h.cfg.StatePath())
			if err != nil {
				t.Fatalf("state.json unreadable after a crash at %s: %v", at, err)
			}
			// The previous release keeps running (nothing was stopped), and applied_sha names
			// what runs until a new one is healthy.
			if len(h.docker.Running()) != 2 {
				t.Errorf("running = %v after a crash at %s", h.docker.Running(), at)
			}
			if at != "state" && st.AppliedSha != first {
				t.Errorf("applied_sha = %.12s after a crash at %s, want the previous %.12s", st.AppliedSha, at, first)
			}
			assertNoTempFiles(t, h.cfg.StateDir)

			h.step = nil
			h.expectExit(agent.ExitOK)
			if st := h.state(); st.AppliedSha != second {
				t.Errorf("the next tick did not converge: applied %.12s", st.AppliedSha)
			}
			h.expectExit(agent.ExitOK)
			if r := h.lastReport(); r.Result != "healthy" {
				t.Errorf("after recovery: %+v", r)
			}
		})
	}
}

// assertNoTempFiles fails on any leftover of an atomic write or a staging directory.
func assertNoTempFiles(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if strings.Contains(name, ".tmp") {
			t.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
}

// No secret value, token or grant appears in anything the tick wrote that is not meant to hold
// it: the journal, the reports, state.json, errors, and the argv and env of docker calls.
func TestSecretsNeverLeak(t *testing.T) {
	h := newHarness(t)
	grant, _ := os.ReadFile(h.cfg.BootstrapFile)
	h.docker.Logs = "api-1 | GEMINI=" + geminiKey + "\napi-1 | pw " + dbPassword + " " + registryPwd + "\n"
	h.desire(bundleSpec{})
	h.expectExit(agent.ExitOK)
	h.expectExit(agent.ExitOK)
	// A failing apply whose logs and pull output echo secrets.
	h.docker.PullFail = "pull failed for robot$pull:" + registryPwd + " with " + dbPassword
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(agent.ExitFailed)
	h.docker.PullFail = ""
	h.docker.Health["api"] = "unhealthy"
	h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
	h.expectExit(agent.ExitFailed)

	token, _ := os.ReadFile(h.cfg.TokenPath())
	secrets := map[string]string{
		"gemini key": geminiKey, "db password": dbPassword, "registry password": registryPwd,
		"bootstrap grant": strings.TrimSpace(string(grant)), "token": strings.TrimSpace(string(token)),
	}
	var haystacks = map[string]string{"journal": h.logs.String()}
	for i, r := range h.ten.Reports(env) {
		haystacks["report "+string(rune('0'+i))] = r.Report.Detail + "\n" + r.Report.LogTail
	}
	st, _ := os.ReadFile(h.cfg.StatePath())
	haystacks["state.json"] = string(st)
	for _, c := range h.docker.Calls() {
		haystacks["docker call "+c.String()] = c.String() + "\n" + strings.Join(c.Env, "\n")
	}
	for where, text := range haystacks {
		for what, value := range secrets {
			if value != "" && strings.Contains(text, value) {
				t.Errorf("%s leaked into %s", what, where)
			}
		}
	}
	// And the failing reports still say what failed, masked.
	if !strings.Contains(h.ten.Reports(env)[2].Report.Detail, "***") {
		t.Errorf("pull failure detail not redacted: %q", h.ten.Reports(env)[2].Report.Detail)
	}
}
