package tick_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

// applied brings a box to a converged, healthy release and returns its sha.
func applied(t *testing.T, h *harness) string {
	t.Helper()
	sha := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	if st := h.state(); st.AppliedSha != sha || st.Drift == nil || st.Drift.Sha != sha || len(st.Drift.Services) != 2 {
		t.Fatalf("after the apply: applied %.12s, drift memory %+v", st.AppliedSha, st.Drift)
	}
	return sha
}

// Each kind of drift is brought back by the next converged tick: `compose up` of the release on
// disk with no fetch, lease or pull of present images; the report says healthy and names it.
func TestDriftIsCorrected(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drift func(h *harness)
		want  []string
	}{
		{"a container stopped by hand", func(h *harness) { h.docker.Stop("worker") }, []string{"worker: exited"}},
		{"a container removed", func(h *harness) { h.docker.Remove("api") }, []string{"api: missing"}},
		{"up of a hand-edited file", func(h *harness) { h.docker.HandEdit("api", "harbor.tikali.net/monky/api:debug") }, []string{"api: config differs from the release"}},
		{"a service the release does not have", func(h *harness) { h.docker.HandEdit("shell", "busybox") }, []string{"shell: not in the release"}},
		{"everything down", func(h *harness) { h.docker.Remove("api"); h.docker.Remove("worker") }, []string{"api: missing", "worker: missing"}},
		{"two at once", func(h *harness) { h.docker.Stop("worker"); h.docker.Remove("api") }, []string{"api: missing", "worker: exited"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			sha := applied(t, h)
			fetches, leases, reads := len(h.ten.BundleFetches(env)), h.ten.LeasesGranted(env), h.bao.Reads()
			before := h.docker.Subcommands()
			tc.drift(h)

			h.expectExit(tick.ExitOK)
			r := h.lastReport()
			if r.Result != "healthy" || r.Sha != sha || !slices.Equal(r.DriftCorrected, tc.want) ||
				r.Detail != "drift corrected: "+strings.Join(tc.want, ", ") {
				t.Fatalf("report = %+v, want healthy, corrected %q", r, tc.want)
			}
			if got := h.docker.Images(); len(got) != 2 || got["api"] != "harbor.tikali.net/monky/api:1.4.2" || len(h.docker.Running()) != 2 {
				t.Errorf("after the correction: images %v, running %v", got, h.docker.Running())
			}
			if len(h.ten.BundleFetches(env)) != fetches || h.ten.LeasesGranted(env) != leases || h.bao.Reads() != reads {
				t.Error("a drift correction fetched the bundle, leased or read a secret")
			}
			calls := h.docker.Subcommands()[len(before):]
			for _, want := range []string{"compose --profile * config --format json", "compose pull --policy missing", "compose up -d --remove-orphans"} {
				if !slices.Contains(calls, want) {
					t.Errorf("the correction ran %q, want it to include %q", calls, want)
				}
			}
			if slices.Contains(calls, "compose pull") {
				t.Errorf("the correction pulled every image: %q", calls)
			}
			st := h.state()
			if st.Counters.DriftCorrections != 1 || st.Drift.Attempts != 0 || st.Drift.NextAttemptAt != nil || st.LastResult != "healthy" {
				t.Errorf("state after the correction: counters %+v, drift %+v", st.Counters, st.Drift)
			}
			h.expectLog("WARN drift: " + strings.Join(tc.want, ", ") + "; correcting with compose up of release " + sha[:12])
			h.expectLog("INFO drift corrected: " + strings.Join(tc.want, ", ") + " (healthy)")

			// The next tick finds nothing to correct.
			ups := h.docker.Count("compose up")
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); r.Result != "healthy" || r.DriftCorrected != nil || h.docker.Count("compose up") != ups {
				t.Errorf("the tick after: %+v, ups %d → %d", r, ups, h.docker.Count("compose up"))
			}
		})
	}
}

// A container that runs but fails its healthcheck is reported, never recreated.
func TestAnUnhealthyContainerIsNotDrift(t *testing.T) {
	h := newHarness(t)
	applied(t, h)
	ids := h.docker.IDs()
	h.docker.Health["api"] = "unhealthy"
	h.docker.Stop("api") // stopped and started with the same definition by hand: running, unhealthy
	h.docker.Health["api"] = "unhealthy"
	h.expectExit(tick.ExitOK) // the stop is drift: corrected, but api stays unhealthy
	if r := h.lastReport(); r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift correction did not end healthy") {
		t.Fatalf("report = %+v", r)
	}
	h.clock.Advance(3 * time.Minute) // past the backoff
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitOK)
	r := h.lastReport()
	if r.Result != "unhealthy" || !strings.Contains(r.Detail, "api: running/unhealthy") || r.DriftCorrected != nil {
		t.Errorf("report = %+v, want unhealthy naming api, nothing corrected", r)
	}
	if h.docker.Count("compose up") != ups || h.docker.IDs()["api"] != ids["api"] {
		t.Error("a running, unhealthy container was recreated")
	}
	if st := h.state(); st.Drift.Attempts != 0 {
		t.Errorf("no drift left, attempts %d", st.Drift.Attempts)
	}
	h.expectLog("drift: gone without a correction")
}

// A crash-looping service is corrected once, then backs off 2 min, 4, … rather than being
// hammered every minute; a correction that ends healthy ends the backoff.
func TestACrashLoopIsCorrectedOnceThenBacksOff(t *testing.T) {
	h := newHarness(t)
	sha := applied(t, h)
	h.docker.ExitAfterUp["worker"] = true
	h.docker.Stop("worker")

	h.expectExit(tick.ExitOK)
	r := h.lastReport()
	if r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift correction did not end healthy: not healthy after 1m0s: worker: exited") ||
		!strings.Contains(r.Detail, "drift was: worker: exited") || !strings.Contains(r.Detail, "correction backs off until 2026-12-02T10:03:00Z (1 failed)") ||
		!slices.Equal(r.DriftCorrected, []string{"worker: exited"}) {
		t.Fatalf("report = %+v", r)
	}
	ups := h.docker.Count("compose up")
	for _, step := range []time.Duration{30 * time.Second, 30 * time.Second} {
		h.clock.Advance(step)
		h.expectExit(tick.ExitOK)
		if r := h.lastReport(); r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift: worker: exited; correction backs off until") {
			t.Errorf("a tick in the backoff reported %+v", r)
		}
	}
	if h.docker.Count("compose up") != ups {
		t.Fatal("a correction ran inside its backoff")
	}
	h.clock.Advance(2 * time.Minute)
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose up") != ups+1 {
		t.Fatal("no second correction after the backoff")
	}
	st := h.state()
	if st.Drift.Attempts != 2 || st.Drift.NextAttemptAt.Sub(h.clock.Now()) < 4*time.Minute-2*time.Second {
		t.Errorf("after the second failure: %+v (next %s)", st.Drift, st.Drift.NextAttemptAt)
	}
	if st.AppliedSha != sha || st.Backoff != nil {
		t.Errorf("a failed correction touched the deploy: applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
	}

	// The service is fixed (say, its database came back): the next correction ends the backoff.
	delete(h.docker.ExitAfterUp, "worker")
	h.clock.Advance(5 * time.Minute)
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "healthy" || r.Detail != "drift corrected: worker: exited" {
		t.Errorf("report = %+v", r)
	}
	if st := h.state(); st.Drift.Attempts != 0 || st.Drift.NextAttemptAt != nil || st.Counters.DriftCorrections != 3 {
		t.Errorf("after a healthy correction: %+v, counters %+v", st.Drift, st.Counters)
	}
}

// A release whose files changed on disk is never run: the drift is reported with why, and the
// next try waits like any failed correction.
func TestATamperedReleaseIsReportedNotRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir string)
		want   string
	}{
		{"the compose file edited", func(t *testing.T, dir string) {
			f := filepath.Join(dir, "docker-compose.yml")
			b, _ := os.ReadFile(f)
			write(t, f, strings.Replace(string(b), "worker:", "worker:\n    privileged: true", 1))
		}, "changed on disk since it was applied"},
		{"the compose file removed", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "docker-compose.yml")); err != nil {
				t.Fatal(err)
			}
		}, "changed on disk since it was applied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			sha := applied(t, h)
			tc.tamper(t, release.Dir(h.cfg.EnvDir(), sha))
			h.docker.Stop("worker")
			ups := h.docker.Count("compose up")

			h.expectExit(tick.ExitOK)
			if h.docker.Count("compose up") != ups {
				t.Fatal("a tampered release was run")
			}
			r := h.lastReport()
			if r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift not corrected: release "+sha[:12]+" refused: "+tc.want) ||
				!strings.Contains(r.Detail, "drift: worker: exited") || r.DriftCorrected != nil {
				t.Fatalf("report = %+v", r)
			}
			h.expectLog("ERROR drift not corrected: release " + sha[:12] + " refused: " + tc.want)
			st := h.state()
			if st.Drift.Attempts != 1 || !strings.Contains(st.Drift.Refused, tc.want) || st.Counters.DriftCorrections != 0 {
				t.Errorf("state: %+v, counters %+v", st.Drift, st.Counters)
			}
			// Within the backoff: reported with the refusal, not judged again.
			configs := h.docker.Count("compose --profile")
			h.clock.Advance(time.Minute)
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); !strings.Contains(r.Detail, "refused: "+tc.want) || h.docker.Count("compose --profile") != configs {
				t.Errorf("in the backoff: %+v", r)
			}
		})
	}
}

// drift_correction false (config, or the bundle's agent block, which wins) only reports.
func TestDriftCorrectionOff(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		agent        map[string]any
		corrected    bool
		why          string
	}{
		{"config off", "drift_correction: false", nil, false, "config drift_correction is false"},
		{"bundle off", "", map[string]any{"drift_correction": false}, false, "bundle.json agent.drift_correction is false"},
		{"bundle on beats config off", "drift_correction: false", map[string]any{"drift_correction": true}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.config)
			h.desire(bundleSpec{agent: tc.agent})
			h.expectExit(tick.ExitOK)
			h.docker.HandEdit("api", "harbor.tikali.net/monky/api:debug")
			ups := h.docker.Count("compose up")
			h.expectExit(tick.ExitOK)
			r := h.lastReport()
			if tc.corrected {
				if r.Result != "healthy" || h.docker.Count("compose up") != ups+1 {
					t.Fatalf("report = %+v", r)
				}
				return
			}
			if h.docker.Count("compose up") != ups {
				t.Fatal("drift was corrected with drift_correction off")
			}
			if r.Result != "unhealthy" || r.Detail != "drift (not corrected: "+tc.why+"): api: config differs from the release" {
				t.Errorf("report = %+v", r)
			}
			h.expectLog("WARN drift not corrected (" + tc.why + "): api: config differs from the release")
			if st := h.state(); st.Counters.DriftCorrections != 0 || st.Drift.Attempts != 0 {
				t.Errorf("state: %+v", st.Drift)
			}
		})
	}
}

// A release applied before the agent kept config hashes (an upgrade from 0.2): its running
// containers teach them once, then a hand edit is seen.
func TestAReleaseAppliedBeforeHashesWereKept(t *testing.T) {
	h := newHarness(t)
	applied(t, h)
	st := h.state()
	st.Drift = nil
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		t.Fatal(err)
	}
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitOK)
	if st := h.state(); st.Drift == nil || len(st.Drift.Services) != 2 || h.docker.Count("compose up") != ups {
		t.Fatalf("nothing learned, or something ran: %+v", st.Drift)
	}
	h.expectLog("drift: config hashes of release")
	h.docker.HandEdit("worker", "harbor.tikali.net/monky/worker:hand")
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Detail != "drift corrected: worker: config differs from the release" {
		t.Errorf("report = %+v", r)
	}
}

// Compose before 2.21 prints no labels: stopped and missing containers are still corrected,
// hand edits cannot be told.
func TestDriftWithoutConfigHashes(t *testing.T) {
	h := newHarness(t)
	h.docker.NoLabels = true
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	if st := h.state(); st.Drift == nil || st.Drift.Services != nil {
		t.Fatalf("memory without hashes: %+v", st.Drift)
	}
	h.docker.HandEdit("api", "x")
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "healthy" || r.DriftCorrected != nil {
		t.Errorf("an edit no hash shows: %+v", r)
	}
	h.docker.Stop("worker")
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Detail != "drift corrected: worker: exited" {
		t.Errorf("report = %+v", r)
	}
}

// The steps of a drift correction; Deps.Step is called after each.
var driftSteps = []string{"drift", "drift-judged", "drift-up", "drift-healthy"}

// A tick killed at any step of a correction leaves state and the release intact; the attempt
// counted, the next correction waits its backoff and then brings the release back.
func TestATickKilledDuringADriftCorrection(t *testing.T) {
	for _, at := range driftSteps {
		t.Run(at, func(t *testing.T) {
			h := newHarness(t)
			sha := applied(t, h)
			h.docker.Stop("worker")
			h.step = func(name string) error {
				if name == at {
					return errCrash
				}
				return nil
			}
			if err := h.tickErr(); !errors.Is(err, errCrash) {
				t.Fatalf("crash at %s: %v", at, err)
			}
			st, err := state.Load(h.cfg.StatePath())
			if err != nil || st.AppliedSha != sha || st.Drift == nil || st.Drift.Attempts != 1 {
				t.Fatalf("after a crash at %s: %v, %+v", at, err, st)
			}
			if cur := currentRelease(t, h); cur != sha {
				t.Errorf("current → %.12s", cur)
			}
			assertNoTempFiles(t, h.cfg.StateDir)
			h.step = nil
			h.clock.Advance(3 * time.Minute)
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); r.Result != "healthy" || len(h.docker.Running()) != 2 {
				t.Errorf("after recovery: %+v, running %v", r, h.docker.Running())
			}
		})
	}
}

// Drift correction restores the release a failed deploy reverted to, during the deploy backoff.
func TestDriftIsCorrectedDuringADeployBackoff(t *testing.T) {
	h := newHarness(t)
	v1, v2 := failingV2(t, h, nil)
	h.expectExit(tick.ExitFailed) // v2 fails, v1 is back
	if st := h.state(); st.AppliedSha != v1 || st.Backoff == nil || st.Backoff.Sha != v2 || st.Drift.Sha != v1 {
		t.Fatalf("state: %+v", st)
	}
	h.docker.Stop("worker")
	h.clock.Advance(30 * time.Second)
	h.expectExit(tick.ExitFailed) // still backing off: exit 1, as before
	if r := h.lastReport(); r.Result != "healthy" || r.Sha != v1 || !slices.Equal(r.DriftCorrected, []string{"worker: exited"}) ||
		!strings.Contains(r.Detail, "next try at") {
		t.Errorf("report = %+v", r)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A process that dies at start looks running to the first `ps` after `up`: the correction looks
// again before it calls the drift corrected, so a crash loop still backs off.
func TestACorrectionLooksTwice(t *testing.T) {
	h := newHarness(t)
	applied(t, h)
	h.docker.DiesAfterFirstLook["worker"] = true
	h.docker.Stop("worker")
	h.expectExit(tick.ExitOK)
	r := h.lastReport()
	if r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift correction did not end healthy: ready, then not 2s later: worker: exited") {
		t.Fatalf("report = %+v", r)
	}
	if st := h.state(); st.Drift.Attempts != 1 || st.Drift.NextAttemptAt == nil {
		t.Errorf("no backoff after a correction that did not hold: %+v", st.Drift)
	}
}
