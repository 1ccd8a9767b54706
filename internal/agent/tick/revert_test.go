package tick_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const (
	goodAPI = "harbor.tikali.net/monky/api:1.4.2"
	badAPI  = "harbor.tikali.net/monky/api:1.4.3" // never turns healthy
)

// v2Spec is a release whose api image never turns healthy; agent is bundle.json's agent block.
func v2Spec(agentBlock map[string]any) bundleSpec {
	if agentBlock == nil {
		agentBlock = map[string]any{}
	}
	if _, ok := agentBlock["healthy_timeout_s"]; !ok {
		agentBlock["healthy_timeout_s"] = 30
	}
	return bundleSpec{compose: strings.Replace(defaultCompose, goodAPI, badAPI, 1), agent: agentBlock}
}

// failingV2 applies a healthy v1, then desires a v2 that never turns healthy.
func failingV2(t *testing.T, h *harness, agentBlock map[string]any) (v1, v2 string) {
	t.Helper()
	h.docker.ImageHealth[badAPI] = "unhealthy"
	v1 = h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	v2 = h.desire(v2Spec(agentBlock))
	return v1, v2
}

func currentRelease(t *testing.T, h *harness) string {
	t.Helper()
	sha, _, err := release.Current(h.cfg.EnvDir())
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

func TestFailedApplyRevertsToThePreviousRelease(t *testing.T) {
	h := newHarness(t)
	v1, v2 := failingV2(t, h, nil)
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitFailed)

	r := h.lastReport()
	if r.Result != "failed" || r.Sha != v2 || r.RevertedTo != v1 || r.RevertHealthy == nil || !*r.RevertHealthy {
		t.Errorf("report = %+v, want failed %.12s reverted to %.12s (healthy)", r, v2, v1)
	}
	if !strings.Contains(r.Detail, "not healthy after 30s: api: running/unhealthy") || !strings.Contains(r.Detail, "reverted to "+v1[:12]+" (healthy)") {
		t.Errorf("detail = %q", r.Detail)
	}
	if r.LogTail == "" {
		t.Error("the failed release's log tail is missing")
	}
	if got := h.docker.Images()["api"]; got != goodAPI {
		t.Errorf("api runs %s after the revert, want %s", got, goodAPI)
	}
	if n := h.docker.Count("compose up") - ups; n != 2 {
		t.Errorf("%d compose up after v1, want 2 (v2, then v1 back)", n)
	}
	if h.docker.Count("compose pull --policy missing") != 1 {
		t.Errorf("the revert pulled other than missing images: %q", h.docker.Subcommands())
	}
	if cur := currentRelease(t, h); cur != v1 {
		t.Errorf("current → %.12s, want %.12s", cur, v1)
	}
	st := h.state()
	bo := st.Backoff
	if st.AppliedSha != v1 || st.LastResult != "failed" || bo == nil || bo.Sha != v2 || bo.Attempts != 1 ||
		bo.RevertedTo != v1 || bo.RevertPending || bo.RevertHealthy == nil || !*bo.RevertHealthy {
		t.Fatalf("state: applied %.12s result %s backoff %+v", st.AppliedSha, st.LastResult, bo)
	}
	if want := h.clock.Now().Add(2 * time.Minute); !bo.NextAttemptAt.Equal(want) {
		t.Errorf("next attempt %s, want %s", bo.NextAttemptAt, want)
	}
	h.expectLog("reverted to " + v1[:12] + ": healthy")
	h.expectLog("backoff: " + v2[:12] + " failed 1×, reverted to " + v1[:12] + " (healthy); next try at")

	// The next check-in tells tenancy (and fleetctl) about the backoff.
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitFailed)
	cs := h.ten.Checkins(env)
	req := cs[len(cs)-1].Request
	if req.FailedSha != v2 || req.Attempts != 1 || req.NextAttemptAt != bo.NextAttemptAt.Format(time.RFC3339) ||
		req.RevertedTo != v1 || req.RevertHealthy == nil || !*req.RevertHealthy || *req.AppliedSha != v1 {
		t.Errorf("check-in = %+v", req)
	}
}

func TestRevertThatIsNotHealthyEither(t *testing.T) {
	h := newHarness(t)
	v1, v2 := failingV2(t, h, nil)
	h.docker.ImageHealth[goodAPI] = "unhealthy" // what broke v2 broke v1 too (a dead database)
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Sha != v2 || r.RevertedTo != v1 || r.RevertHealthy == nil || *r.RevertHealthy || !strings.Contains(r.Detail, "(unhealthy)") {
		t.Errorf("report = %+v", r)
	}
	h.expectLog("reverted to " + v1[:12] + " but it is not healthy: not healthy after 1m0s: api: running/unhealthy")
	// Within the backoff the heartbeat says what runs: unhealthy, and why nothing is applied.
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitFailed)
	r = h.lastReport()
	if r.Result != "unhealthy" || r.Sha != v1 || !strings.Contains(r.Detail, v2[:12]+" failed 1×") {
		t.Errorf("heartbeat in backoff = %+v", r)
	}
}

func TestNoRevertWithoutAPreviousRelease(t *testing.T) {
	h := newHarness(t)
	h.docker.ImageHealth[badAPI] = "unhealthy"
	v2 := h.desire(v2Spec(nil))
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.RevertedTo != "" || r.RevertHealthy != nil || !strings.Contains(r.Detail, "not reverted: no release ran before this one") {
		t.Errorf("report = %+v", r)
	}
	if h.docker.Count("compose up") != 1 || h.docker.Images()["api"] != badAPI {
		t.Errorf("the failed project was not left as it is: %q", h.docker.Subcommands())
	}
	st := h.state()
	if st.Backoff == nil || st.Backoff.Sha != v2 || st.Backoff.RevertedTo != "" || st.Backoff.NoRevert == "" {
		t.Errorf("backoff = %+v", st.Backoff)
	}
	h.expectLog("not reverted: no release ran before this one")
	// Within the backoff, the heartbeat finds the failed project (left as it is): unhealthy.
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitFailed)
	if r := h.lastReport(); r.Result != "unhealthy" || !strings.Contains(r.Detail, "next try at") {
		t.Errorf("heartbeat in the backoff = %+v", r)
	}
}

// A first deploy that fails before anything started backs off with nothing running: its
// heartbeats are unhealthy, never a healthy "nothing deployed".
func TestFirstDeployFailingBeforeTheStartIsNoHealthyBox(t *testing.T) {
	h := newHarness(t)
	h.bao.FailNext("monky/data/env-qa-02/see/db_password", http.StatusForbidden, 1)
	v := h.desire(bundleSpec{})
	h.expectExit(tick.ExitFailed)
	if st := h.state(); st.Backoff == nil || st.Backoff.Sha != v || st.Backoff.RevertedTo != "" {
		t.Fatalf("backoff = %+v", st.Backoff)
	}
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != "unhealthy" || !strings.HasPrefix(r.Detail, "nothing deployed; "+v[:12]+" failed 1×") {
		t.Errorf("heartbeat in the backoff = %+v", r)
	}
	if st := h.state(); st.LastResult != "unhealthy" {
		t.Errorf("last_result = %q", st.LastResult)
	}
}

func TestAutoRevertOptOut(t *testing.T) {
	for _, tc := range []struct {
		name       string
		config     string
		bundle     map[string]any
		reverts    bool
		noRevertIs string
	}{
		{"bundle opts out", "", map[string]any{"auto_revert": false}, false, "bundle.json agent.auto_revert is false"},
		{"config opts out", "auto_revert: false", nil, false, "config auto_revert is false"},
		{"the bundle wins over the config", "auto_revert: false", map[string]any{"auto_revert": true}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.config)
			v1, _ := failingV2(t, h, tc.bundle)
			h.expectExit(tick.ExitFailed)
			r := h.lastReport()
			if reverted := r.RevertedTo == v1; reverted != tc.reverts {
				t.Fatalf("reverted = %v, want %v: %+v", reverted, tc.reverts, r)
			}
			if tc.reverts {
				return
			}
			if !strings.Contains(r.Detail, "not reverted: "+tc.noRevertIs) || h.docker.Images()["api"] != badAPI {
				t.Errorf("detail %q, api runs %s", r.Detail, h.docker.Images()["api"])
			}
			if st := h.state(); st.AppliedSha != v1 || st.Backoff == nil || st.Backoff.Attempts != 1 {
				t.Errorf("applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
			}
		})
	}
}

// The failing sha is tried again after 2, 4, 8, 16, 32 minutes, then every hour; between tries
// the containers are not touched.
func TestBackoffSchedule(t *testing.T) {
	h := newHarness(t)
	_, v2 := failingV2(t, h, nil)
	want := []time.Duration{2, 4, 8, 16, 32, 60, 60}
	for i, minutes := range want {
		h.expectExit(tick.ExitFailed)
		st := h.state()
		delay := time.Duration(minutes) * time.Minute
		if st.Backoff.Attempts != i+1 || !st.Backoff.NextAttemptAt.Equal(h.clock.Now().Add(delay)) {
			t.Fatalf("after failure %d: %+v at %s, want the next try %s later", i+1, st.Backoff, h.clock.Now(), delay)
		}
		// A tick a second before the next try touches nothing.
		calls := len(h.docker.Calls())
		fetches := len(h.ten.BundleFetches(env))
		h.clock.Advance(delay - time.Second - 2*time.Second) // the heartbeat's ps takes no time
		err := h.tickErr()
		if tick.ExitCode(err) != tick.ExitFailed || !strings.Contains(err.Error(), v2[:12]+" failed") || !strings.Contains(err.Error(), "next try at") {
			t.Fatalf("tick in backoff: %v", err)
		}
		for _, c := range h.docker.Calls()[calls:] {
			if sc := c.String(); !strings.Contains(sc, " ps ") {
				t.Fatalf("tick in backoff ran %s", sc)
			}
		}
		if len(h.ten.BundleFetches(env)) != fetches {
			t.Fatal("tick in backoff fetched the bundle")
		}
		if r := h.lastReport(); r.Result != "healthy" || !strings.Contains(r.Detail, "next try at") {
			t.Fatalf("heartbeat in backoff = %+v", r)
		}
		h.clock.Advance(3 * time.Second)
	}
	h.expectExit(tick.ExitFailed)
	h.expectLog("backoff over: trying " + v2[:12] + " again (attempt 8)")
}

func TestBackoffResets(t *testing.T) {
	t.Run("on a new desired sha", func(t *testing.T) {
		h := newHarness(t)
		failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		v3 := h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
		h.expectExit(tick.ExitOK)
		if st := h.state(); st.AppliedSha != v3 || st.Backoff != nil {
			t.Errorf("applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
		}
		cs := h.ten.Checkins(env)
		h.expectExit(tick.ExitOK)
		if req := h.ten.Checkins(env)[len(cs)].Request; req.FailedSha != "" || req.Attempts != 0 || req.NextAttemptAt != "" {
			t.Errorf("check-in still carries the backoff: %+v", req)
		}
	})
	t.Run("on tenancy going back to the running release", func(t *testing.T) {
		h := newHarness(t)
		v1, _ := failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		h.ten.SetDesired(env, makeFiles(bundleSpec{}))
		h.expectExit(tick.ExitOK)
		if st := h.state(); st.AppliedSha != v1 || st.Backoff != nil {
			t.Errorf("applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
		}
	})
	t.Run("on a kit re-run", func(t *testing.T) {
		h := newHarness(t)
		_, v2 := failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		h.docker.ImageHealth[badAPI] = "healthy" // the operator fixed what broke it
		h.writeBootstrap()
		h.expectExit(tick.ExitOK)
		if st := h.state(); st.AppliedSha != v2 || st.Backoff != nil {
			t.Errorf("applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
		}
		h.expectLog("kit re-run: backoff of " + v2[:12] + " reset")
	})
	t.Run("on the retry that works", func(t *testing.T) {
		h := newHarness(t)
		_, v2 := failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		h.docker.ImageHealth[badAPI] = "healthy"
		h.endBackoff()
		h.expectExit(tick.ExitOK)
		if st := h.state(); st.AppliedSha != v2 || st.Backoff != nil {
			t.Fatalf("applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
		}
		n := len(h.ten.Checkins(env))
		h.expectExit(tick.ExitOK)
		if req := h.ten.Checkins(env)[n].Request; req.FailedSha != "" || req.Attempts != 0 {
			t.Errorf("the check-in after the successful retry still carries the backoff: %+v", req)
		}
	})
	t.Run("not on a refusal", func(t *testing.T) {
		h := newHarness(t)
		_, v2 := failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		h.endBackoff()
		h.free[h.docker.RootDir] = 1 << 20 // the retry is refused for disk: no attempt counted
		if err := os.MkdirAll(h.docker.RootDir, 0o755); err != nil {
			t.Fatal(err)
		}
		h.expectExit(tick.ExitFailed)
		if r := h.lastReport(); r.Result != "refused" {
			t.Fatalf("report = %+v", r)
		}
		if st := h.state(); st.Backoff == nil || st.Backoff.Sha != v2 || st.Backoff.Attempts != 1 {
			t.Errorf("backoff = %+v", st.Backoff)
		}
	})
}

// The steps of a failed apply's revert; Deps.Step is called after each.
var revertSteps = []string{"failed", "revert-judged", "revert-promote", "revert-up", "revert-healthy", "reverted"}

// A tick killed at any step of a revert leaves a box the next tick converges: v1 running and
// healthy, current on v1, the failure reported with what the revert did, v2 backing off. v1's
// app wrote ./data beside its release: the read-back of the staged files ignores it each time.
func TestATickKilledDuringARevertIsRecoveredByTheNext(t *testing.T) {
	for _, at := range revertSteps {
		t.Run(at, func(t *testing.T) {
			h := newHarness(t)
			v1, v2 := failingV2(t, h, nil)
			plantAppData(t, release.Dir(h.cfg.EnvDir(), v1))
			reached := false
			h.step = func(name string) error {
				if name == at {
					reached = true
					return errCrash
				}
				return nil
			}
			if code := h.tick(); code == tick.ExitOK || !reached {
				t.Fatalf("crash at %s: exit %d, reached %v", at, code, reached)
			}
			st, err := state.Load(h.cfg.StatePath())
			if err != nil {
				t.Fatalf("state.json unreadable after a crash at %s: %v", at, err)
			}
			if st.AppliedSha != v1 || st.Backoff == nil || st.Backoff.Sha != v2 {
				t.Fatalf("after a crash at %s: applied %.12s backoff %+v", at, st.AppliedSha, st.Backoff)
			}
			assertNoTempFiles(t, h.cfg.StateDir)

			h.step = nil
			reports := len(h.ten.Reports(env))
			h.clock.Advance(time.Minute) // still inside the backoff
			h.expectExit(tick.ExitFailed)
			if got := h.docker.Images()["api"]; got != goodAPI || len(h.docker.Running()) != 2 {
				t.Errorf("api runs %s (running %v), want v1's %s", got, h.docker.Running(), goodAPI)
			}
			if cur := currentRelease(t, h); cur != v1 {
				t.Errorf("current → %.12s, want %.12s", cur, v1)
			}
			st = h.state()
			if bo := st.Backoff; bo.RevertPending || bo.RevertHealthy == nil || !*bo.RevertHealthy || bo.Attempts != 1 {
				t.Errorf("backoff after recovery = %+v", bo)
			}
			var failed *protocol.Report
			for _, r := range h.ten.Reports(env) {
				if r.Report.Result == "failed" {
					failed = &r.Report
				}
			}
			if at != "reverted" && (failed == nil || failed.RevertedTo != v1 || failed.RevertHealthy == nil || !*failed.RevertHealthy) {
				t.Errorf("no failed report with the revert: %+v", failed)
			}
			// The report a finished revert owes carries the failure's own cause, not a stand-in.
			if failed != nil && strings.HasPrefix(failed.Detail, "apply failed") {
				t.Errorf("the failed report after recovery says %q, not why v2 failed", failed.Detail)
			}
			if r := h.lastReport(); r.Result != "healthy" || r.Sha != v1 || len(h.ten.Reports(env)) == reports {
				t.Errorf("last report after recovery = %+v", r)
			}

			ups := h.docker.Count("compose up")
			h.expectExit(tick.ExitFailed)
			if h.docker.Count("compose up") != ups {
				t.Error("a tick in the backoff ran compose up")
			}
		})
	}
}

// A revert needs the previous release on disk; one removed by hand is not guessed at.
// redeployTenancy answers `apply` for the running release (a redeploy): the protocol lets tenancy
// send an apply whatever the box reported applied.
type redeployTenancy struct{ tick.Tenancy }

func (r redeployTenancy) Checkin(ctx context.Context, tok secret.Value, req protocol.CheckinRequest) (*protocol.CheckinResponse, error) {
	resp, err := r.Tenancy.Checkin(ctx, tok, req)
	if err == nil && resp.Action == protocol.ActionNone && resp.DesiredSha != "" {
		resp.Action = protocol.ActionApply
	}
	return resp, err
}

// The running release, applied again and failing, has nothing before it to go back to: the
// failed project is left as it is and the report says why, never a "revert" to itself.
func TestNoRevertWhenTheFailedReleaseIsTheOneThatRanBefore(t *testing.T) {
	h := newHarness(t)
	v1 := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.wrap = func(d *tick.Deps) { d.Tenancy = redeployTenancy{d.Tenancy} }
	// What ran healthy is not any more (a dead database): api exited, and up starts it unhealthy.
	h.docker.ImageHealth[goodAPI] = "unhealthy"
	h.docker.Stop("api")
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitFailed)

	r := h.lastReport()
	if r.Result != "failed" || r.Sha != v1 || r.RevertedTo != "" || r.RevertHealthy != nil ||
		!strings.Contains(r.Detail, "; not reverted: the failed release is the one that ran before") {
		t.Errorf("report = %+v", r)
	}
	if n := h.docker.Count("compose up") - ups; n != 1 {
		t.Errorf("%d compose up in the failing tick, want 1 (the redeploy, no revert): %q", n, h.docker.Subcommands())
	}
	st := h.state()
	if bo := st.Backoff; bo == nil || bo.Sha != v1 || bo.RevertedTo != "" || bo.RevertPending ||
		bo.NoRevert != "the failed release is the one that ran before" {
		t.Errorf("backoff = %+v", bo)
	}
	if st.AppliedSha != v1 {
		t.Errorf("applied %.12s, want %.12s kept", st.AppliedSha, v1)
	}
	h.expectLog("not reverted: the failed release is the one that ran before")
}

func TestNoRevertWhenThePreviousReleaseIsGone(t *testing.T) {
	h := newHarness(t)
	v1, _ := failingV2(t, h, nil)
	if err := os.RemoveAll(filepath.Join(h.cfg.EnvDir(), "releases", v1)); err != nil {
		t.Fatal(err)
	}
	h.expectExit(tick.ExitFailed)
	if r := h.lastReport(); r.RevertedTo != "" || !strings.Contains(r.Detail, "not reverted: release "+v1[:12]+" is no longer on disk") {
		t.Errorf("report = %+v", r)
	}
}

// A stray 401 on the failure's own report re-bootstraps (a kit was re-run meanwhile): the failure
// just recorded is not forgotten, or the box would retry on the next tick.
func TestARebootstrapDuringTheFailureReportKeepsTheBackoff(t *testing.T) {
	h := newHarness(t)
	_, v2 := failingV2(t, h, nil)
	h.step = func(name string) error {
		if name == "failed" {
			h.writeBootstrap() // a re-reveal: the token is refused from now on
		}
		return nil
	}
	h.expectExit(tick.ExitFailed)
	if n := strings.Count(h.logs.String(), "bootstrap login ok"); n != 2 {
		t.Fatalf("%d bootstrap logins, want 2 (the first tick's, the report's re-bootstrap):\n%s", n, h.logs.String())
	}
	if strings.Contains(h.logs.String(), "kit re-run: backoff") {
		t.Error("the backoff of this tick's own failure was reset")
	}
	if st := h.state(); st.Backoff == nil || st.Backoff.Sha != v2 || st.Backoff.Attempts != 1 {
		t.Fatalf("backoff = %+v", st.Backoff)
	}
	if r := h.lastReport(); r.Result != "failed" || r.Sha != v2 {
		t.Errorf("the failure report was not delivered after the re-bootstrap: %+v", r)
	}
	h.step = nil
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitFailed)
	if h.docker.Count("compose up") != ups {
		t.Error("the next tick retried at once")
	}
}

// A next try written far beyond the longest backoff (a clock set back, a hand edit) does not hold
// the sha for longer than the schedule allows.
func TestABackoffFromTheFutureIsDue(t *testing.T) {
	h := newHarness(t)
	failingV2(t, h, nil)
	h.expectExit(tick.ExitFailed)
	st := h.state()
	st.Backoff.NextAttemptAt = h.clock.Now().Add(30 * 24 * time.Hour)
	saveState(t, h, st)
	h.expectExit(tick.ExitFailed)
	h.expectLog("backoff over: trying")
	if st := h.state(); st.Backoff.Attempts != 2 {
		t.Errorf("backoff = %+v, want a second attempt", st.Backoff)
	}
}

// A release's bundle.json is read back the way the bundle reader read it: a container that can
// write the release directory does not pick the compose file with a key in other case or a key
// given twice (encoding/json would take the last of either).
func TestReleaseMetaIsReadBackStrictly(t *testing.T) {
	for name, meta := range map[string]string{
		"other case": `{"compose_file": "docker-compose.yml", "Compose_File": "evil.yml"}`,
		"twice":      `{"compose_file": "docker-compose.yml", "compose_file": "evil.yml"}`,
		"outside":    `{"compose_file": "../../evil.yml"}`,
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			v1 := h.desire(bundleSpec{})
			h.expectExit(tick.ExitOK)
			dir := release.Dir(h.cfg.EnvDir(), v1)
			if err := os.WriteFile(filepath.Join(dir, "bundle.json"), []byte(meta), 0o600); err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(time.Minute)
			h.expectExit(tick.ExitOK)
			var files []string
			for _, c := range h.docker.Calls() {
				for i := 0; i+1 < len(c.Args); i++ {
					if c.Args[i] == "-f" && strings.Contains(strings.Join(c.Args, " "), " ps") {
						files = append(files, c.Args[i+1])
					}
				}
			}
			if len(files) == 0 {
				t.Fatal("the heartbeat ran no compose ps with -f")
			}
			if want := filepath.Join(dir, "docker-compose.yml"); files[len(files)-1] != want {
				t.Errorf("compose ps -f %s, want %s", files[len(files)-1], want)
			}
		})
	}
}

// A revert judges the release it brings back as its apply did: a v1 whose staged files were
// rewritten, removed, or replaced by a link, a FIFO or a directory is not run again; the failed
// v2 stays, and the report says why nothing was reverted.
func TestRevertRefusesAReleaseChangedOnDisk(t *testing.T) {
	// aside moves the staged file name to data/name and puts what make makes in its place.
	aside := func(name string, make func(old, p string) error) func(dir string) error {
		return func(dir string) error {
			if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
				return err
			}
			p, old := filepath.Join(dir, name), filepath.Join(dir, "data", name)
			if err := os.Rename(p, old); err != nil {
				return err
			}
			return make(old, p)
		}
	}
	why := map[string]string{
		"compose file rewritten":                      "BUNDLE_SHA_MISMATCH",
		"staged file removed":                         "statat .env.template: no such file",
		"fifo in a staged file's place":               "manifest.json is not a regular file (fifo)",
		"directory in a staged file's place":          ".env.template is not a regular file (directory)",
		"link to a copy in place of the compose file": "docker-compose.yml is not a regular file (symlink)",
		"link in place of .env":                       ".env is not a regular file (symlink)",
		"file grown huge":                             "holds more than 16 MiB",
		"files grown past the cap together":           "holds more than 16 MiB",
	}
	for name, tamper := range map[string]func(dir string) error{
		"compose file rewritten": func(dir string) error {
			f := filepath.Join(dir, "docker-compose.yml")
			raw, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			return os.WriteFile(f, []byte(strings.Replace(string(raw), "image:", "privileged: true\n    image:", 1)), 0o600)
		},
		"staged file removed": func(dir string) error {
			return os.Remove(filepath.Join(dir, ".env.template"))
		},
		"fifo in a staged file's place": aside("manifest.json", func(_, p string) error {
			return syscall.Mkfifo(p, 0o600)
		}),
		"directory in a staged file's place": aside(".env.template", func(_, p string) error {
			return os.Mkdir(p, 0o700)
		}),
		// the link's target holds the very same bytes: only its type gives it away
		"link to a copy in place of the compose file": aside("docker-compose.yml", func(old, p string) error {
			return os.Symlink("data/docker-compose.yml", p)
		}),
		"link in place of .env": aside(".env", func(old, p string) error {
			return os.Symlink("data/.env", p)
		}),
		"file grown huge": func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, "docker-compose.yml"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(64 << 20) // sparse: no disk is used
		},
		// each under the cap, together over it: the cap counts the whole read-back
		"files grown past the cap together": func(dir string) error {
			for _, name := range []string{"docker-compose.yml", ".env.template"} {
				if err := os.Truncate(filepath.Join(dir, name), 9<<20); err != nil {
					return err
				}
			}
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			v1, v2 := failingV2(t, h, nil)
			if err := tamper(release.Dir(h.cfg.EnvDir(), v1)); err != nil {
				t.Fatal(err)
			}
			ups := h.docker.Count("compose up")
			h.expectExit(tick.ExitFailed)
			if n := h.docker.Count("compose up") - ups; n != 1 {
				t.Errorf("%d compose up, want 1 (v2 only; the changed v1 is not run)", n)
			}
			r := h.lastReport()
			if r.Result != "failed" || r.Sha != v2 || r.RevertedTo != "" || r.RevertHealthy != nil ||
				!strings.Contains(r.Detail, "not reverted: release "+v1[:12]+" refused: ") {
				t.Errorf("report = %+v", r)
			}
			if cur := currentRelease(t, h); cur != v2 {
				t.Errorf("current → %.12s, want the failed %.12s (nothing was brought back)", cur, v2)
			}
			st := h.state()
			if bo := st.Backoff; bo == nil || bo.Attempts != 1 || bo.RevertPending || bo.RevertedTo != "" || !strings.Contains(bo.NoRevert, "refused") {
				t.Errorf("backoff = %+v", bo)
			}
			h.expectLog("not reverted: release " + v1[:12] + " refused: changed on disk since it was applied: " + why[name])
		})
	}
}

// A tick is killed after its revert pointed current at the release before, whose files then
// change on disk: the next tick, refusing to bring that one back, points current back at the
// failed release. current names what runs (the failed release's containers), not a release
// nothing started.
func TestARefusedRevertPointsCurrentBackAtTheFailedRelease(t *testing.T) {
	h := newHarness(t)
	v1, v2 := failingV2(t, h, nil)
	h.step = func(name string) error {
		if name == "revert-promote" {
			return errCrash
		}
		return nil
	}
	if code := h.tick(); code == tick.ExitOK {
		t.Fatal("the crashed tick exited 0")
	}
	if cur := currentRelease(t, h); cur != v1 {
		t.Fatalf("after the crash current → %.12s, want %.12s (the revert had promoted it)", cur, v1)
	}
	h.step = nil
	if err := os.Truncate(filepath.Join(release.Dir(h.cfg.EnvDir(), v1), "docker-compose.yml"), 64<<20); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitFailed)
	if cur := currentRelease(t, h); cur != v2 {
		t.Errorf("current → %.12s, want the failed %.12s back (what runs)", cur, v2)
	}
	if r := h.lastReport(); r.RevertedTo != "" || !strings.Contains(r.Detail, "not reverted: release "+v1[:12]+" refused: ") {
		t.Errorf("report = %+v", r)
	}
	if bo := h.state().Backoff; bo == nil || bo.RevertPending || bo.RevertedTo != "" || !strings.Contains(bo.NoRevert, "holds more than 16 MiB") {
		t.Errorf("backoff = %+v", bo)
	}
	if strings.Contains(h.logs.String(), "current not pointed back") {
		t.Errorf("the journal says current was not pointed back:\n%s", h.logs.String())
	}
}

// A tick killed between `compose up` and the recorded outcome (systemd's TimeoutStartSec during
// a long wait for health) is counted by the next tick as a failure: the backoff, a revert to the
// release that ran before, and a `failed` report. Before, the unhealthy release ran unreported.
func TestATickKilledDuringTheApplyIsCountedAsAFailure(t *testing.T) {
	for _, at := range []string{"applying", "up"} {
		t.Run(at, func(t *testing.T) {
			h := newHarness(t)
			v1, v2 := failingV2(t, h, nil)
			h.step = func(name string) error {
				if name == at {
					return errCrash
				}
				return nil
			}
			if code := h.tick(); code == tick.ExitOK {
				t.Fatalf("the crashed tick exited 0")
			}
			st, err := state.Load(h.cfg.StatePath())
			if err != nil {
				t.Fatal(err)
			}
			if st.Applying == nil || st.Applying.Sha != v2 || st.Backoff != nil {
				t.Fatalf("after a crash at %s: applying %+v backoff %+v", at, st.Applying, st.Backoff)
			}
			h.step = nil
			ups := h.docker.Count("compose up")
			h.expectExit(tick.ExitFailed)
			st = h.state()
			if st.Applying != nil || st.Backoff == nil || st.Backoff.Sha != v2 || st.Backoff.Attempts != 1 ||
				st.Backoff.RevertedTo != v1 || st.Backoff.RevertHealthy == nil || !*st.Backoff.RevertHealthy {
				t.Fatalf("state after recovery: applying %+v backoff %+v", st.Applying, st.Backoff)
			}
			if n := h.docker.Count("compose up") - ups; n != 1 {
				t.Errorf("%d compose up, want 1 (v1 back)", n)
			}
			if got := h.docker.Images()["api"]; got != goodAPI {
				t.Errorf("api runs %s, want v1's %s", got, goodAPI)
			}
			r := h.lastReport()
			if r.Result != "failed" || r.Sha != v2 || r.RevertedTo != v1 || !strings.Contains(r.Detail, "killed during compose up") {
				t.Errorf("report = %+v", r)
			}
			h.expectLog("failed: " + v2[:12] + ": the tick was killed during compose up")

			// The next tick backs off instead of applying v2 again.
			h.clock.Advance(time.Minute)
			ups = h.docker.Count("compose up")
			h.expectExit(tick.ExitFailed)
			if h.docker.Count("compose up") != ups {
				t.Error("a tick in the backoff ran compose up")
			}
		})
	}
}

// plantAppData writes what an app with a writable ./data bind leaves in its release directory:
// files, a FIFO and a link under ./data, and a stray file at the top.
func plantAppData(t *testing.T, dir string) {
	t.Helper()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(filepath.Join(data, "db"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		os.WriteFile(filepath.Join(data, "x"), []byte("written by the app"), 0o644),
		os.WriteFile(filepath.Join(data, "db", "pages"), make([]byte, 4096), 0o644),
		syscall.Mkfifo(filepath.Join(data, "fifo"), 0o600),
		os.Symlink("/etc/passwd", filepath.Join(data, "passwd")),
		os.WriteFile(filepath.Join(dir, "docker-compose.override.yml"), []byte("services: {}\n"), 0o600),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A release whose app wrote ./data beside its staged files is reverted to: the read-back
// verifies the files the agent staged (state.json applied_files) and ignores the rest.
func TestRevertIgnoresWhatTheAppWroteBesideItsRelease(t *testing.T) {
	h := newHarness(t)
	v1, v2 := failingV2(t, h, nil)
	if st := h.state(); st.AppliedFiles == nil || st.AppliedFiles.Sha != v1 ||
		strings.Join(st.AppliedFiles.Files, ",") != ".env.template,bundle.json,docker-compose.yml,manifest.json" {
		t.Fatalf("applied_files = %+v", st.AppliedFiles)
	}
	plantAppData(t, release.Dir(h.cfg.EnvDir(), v1))
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != "failed" || r.Sha != v2 || r.RevertedTo != v1 || r.RevertHealthy == nil || !*r.RevertHealthy {
		t.Fatalf("report = %+v, want failed and reverted to %.12s (healthy)", r, v1)
	}
	if cur := currentRelease(t, h); cur != v1 {
		t.Errorf("current → %.12s, want %.12s", cur, v1)
	}
	if got, err := os.ReadFile(filepath.Join(release.Dir(h.cfg.EnvDir(), v1), "data", "x")); err != nil || string(got) != "written by the app" {
		t.Errorf("the app's data: %q, %v", got, err)
	}
}

// A release applied by an older agent has no applied_files: its whole directory is read back
// strictly, and anything beside the bundle refuses the revert, as before.
func TestRevertWithoutAStagedListReadsTheWholeRelease(t *testing.T) {
	h := newHarness(t)
	v1, _ := failingV2(t, h, nil)
	st := h.state()
	st.AppliedFiles = nil
	h.saveState(st)
	plantAppData(t, release.Dir(h.cfg.EnvDir(), v1))
	h.expectExit(tick.ExitFailed)
	if r := h.lastReport(); r.RevertedTo != "" || !strings.Contains(r.Detail, "not reverted: release "+v1[:12]+" refused: changed on disk since it was applied") {
		t.Errorf("report = %+v", r)
	}
}

// A directory on the way to a staged file replaced by a link (to a copy with the same bytes in
// ./data, which a container could rewrite) refuses the revert.
func TestRevertRefusesALinkedDirectoryOfTheRelease(t *testing.T) {
	h := newHarness(t)
	h.docker.ImageHealth[badAPI] = "unhealthy"
	v1 := h.desire(bundleSpec{extra: map[string]string{"conf/app.conf": "level=info\n"}})
	h.expectExit(tick.ExitOK)
	h.desire(v2Spec(nil))
	dir := release.Dir(h.cfg.EnvDir(), v1)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "conf"), filepath.Join(dir, "data", "conf")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("data/conf", filepath.Join(dir, "conf")); err != nil {
		t.Fatal(err)
	}
	h.expectExit(tick.ExitFailed)
	if r := h.lastReport(); r.RevertedTo != "" || !strings.Contains(r.Detail, "conf is not a directory (symlink)") {
		t.Errorf("report = %+v", r)
	}
}
