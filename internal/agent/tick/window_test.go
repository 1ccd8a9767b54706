package tick_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

// The harness clock starts Wednesday 2026-12-02 10:00 UTC (11:00 in Berlin): outside this window.
const nightWindow = `apply_windows: ["Mon-Fri 02:00-05:00"]
apply_windows_tz: Europe/Berlin`

// Outside the window a first deploy goes ahead; a change to the running release waits, says
// until when (heartbeat detail, the next check-in's deferred_until), and applies once it opens.
func TestAnApplyWaitsForItsWindow(t *testing.T) {
	h := newHarness(t, nightWindow)
	v1 := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	if st := h.state(); st.AppliedSha != v1 || st.Deferred != nil {
		t.Fatalf("a first deploy waited: %+v", st)
	}

	v2 := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	fetches := len(h.ten.BundleFetches(env))
	h.expectExit(tick.ExitOK)
	r := h.lastReport()
	// Thursday 02:00 in Berlin is 01:00 UTC.
	if r.Result != "healthy" || r.Sha != v1 || r.Detail != "deferred until 2026-12-03T01:00:00Z" {
		t.Fatalf("report = %+v", r)
	}
	if len(h.ten.BundleFetches(env)) != fetches || h.state().AppliedSha != v1 {
		t.Fatal("a deferred apply fetched the bundle or applied")
	}
	h.expectLog("INFO apply of " + v2[:12] + " deferred until 2026-12-03T01:00:00Z: outside the apply window env=env-qa-02 windows=\"Mon-Fri 02:00-05:00 (Europe/Berlin)\"")
	d := h.state().Deferred
	if d == nil || d.Action != "apply" || d.Sha != v2 || !d.Until.Equal(time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("deferred = %+v", d)
	}

	// The next tick's check-in says so; the wait is not rewritten.
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitOK)
	if req := h.lastCheckin(); req.DeferredUntil != "2026-12-03T01:00:00Z" {
		t.Errorf("check-in deferred_until = %q", req.DeferredUntil)
	}
	if again := h.state().Deferred; *again != *d {
		t.Errorf("the wait changed: %+v → %+v", d, again)
	}

	// A second before the window: still waiting. At its start: applied, the wait forgotten.
	h.clock.Advance(time.Date(2026, 12, 3, 0, 59, 59, 0, time.UTC).Sub(h.clock.Now()))
	h.expectExit(tick.ExitOK)
	if h.state().AppliedSha != v1 {
		t.Fatal("applied a second before the window")
	}
	h.clock.Advance(time.Second)
	h.expectExit(tick.ExitOK)
	if st := h.state(); st.AppliedSha != v2 || st.Deferred != nil {
		t.Fatalf("at the window: applied %.12s deferred %+v", st.AppliedSha, st.Deferred)
	}
	h.expectLog("INFO apply of " + v2[:12] + " no longer deferred: applying now")
	h.expectExit(tick.ExitOK)
	if req := h.lastCheckin(); req.DeferredUntil != "" {
		t.Errorf("the check-in after the apply still says deferred until %s", req.DeferredUntil)
	}
}

// A retire of a running release waits as an apply does; with nothing applied it does not.
func TestARetireWaitsForItsWindow(t *testing.T) {
	h := newHarness(t, nightWindow)
	applied(t, h)
	h.ten.Retire(env, false)
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose down") != 0 || h.lastReport().Detail != "deferred until 2026-12-03T01:00:00Z" {
		t.Fatalf("retire outside the window: downs %d, report %+v", h.docker.Count("compose down"), h.lastReport())
	}
	if d := h.state().Deferred; d == nil || d.Action != "down" || d.Sha != "" {
		t.Fatalf("deferred = %+v", d)
	}
	h.expectLog("INFO retire deferred until 2026-12-03T01:00:00Z")

	// tenancy's emergency change: ignore_window.
	h.ten.SetApplyWindows(env, nil, nil, true)
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose down") != 1 || h.state().Deferred != nil {
		t.Fatal("ignore_window did not retire at once")
	}
	h.expectLog("apply window ignored: tenancy sent ignore_window")

	// Nothing applied any more: a second retire has nothing to wait for.
	h2 := newHarness(t, nightWindow)
	h2.ten.Retire(env, false)
	h2.expectExit(tick.ExitOK)
	if h2.docker.Count("compose down") != 1 {
		t.Error("a retire with nothing applied waited")
	}
}

// The check-in's windows replace the config's for that tick; an empty list allows any time.
func TestTheCheckinsWindowsWin(t *testing.T) {
	h := newHarness(t, nightWindow)
	applied(t, h)
	berlin := "Europe/Berlin"
	// Wednesday 11:00 in Berlin: inside tenancy's window.
	h.ten.SetApplyWindows(env, []string{"Wed 10:00-12:00"}, &berlin, false)
	v2 := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	if h.state().AppliedSha != v2 {
		t.Fatal("tenancy's open window did not apply")
	}
	// Tenancy's zone alone, with the config's windows: 02:00-05:00 in Tokyo is 17:00-20:00 UTC.
	tokyo := "Asia/Tokyo"
	h.ten.SetApplyWindows(env, nil, &tokyo, false)
	v3 := h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Detail != "deferred until 2026-12-02T17:00:00Z" || h.state().AppliedSha != v2 {
		t.Fatalf("report = %+v", r)
	}
	h.ten.SetApplyWindows(env, []string{}, nil, false)
	h.expectExit(tick.ExitOK)
	if h.state().AppliedSha != v3 {
		t.Fatal("an empty list from tenancy did not allow the apply")
	}
}

// Drift correction and the revert of a failed (or killed) apply restore what was approved: they
// never wait for a window.
func TestCorrectionsAndRevertsDoNotWait(t *testing.T) {
	h := newHarness(t, nightWindow)
	v1 := applied(t, h)
	h.docker.Stop("worker")
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); !slices.Equal(r.DriftCorrected, []string{"worker: exited"}) {
		t.Fatalf("drift outside the window: %+v", r)
	}
	st := h.state()
	st.Applying = &state.ApplyInProgress{Sha: strings.Repeat("e", 64), StartedAt: h.clock.Now()}
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		t.Fatal(err)
	}
	h.expectExit(tick.ExitFailed)
	if st := h.state(); st.Applying != nil || st.Backoff == nil || st.Backoff.RevertedTo != v1 || !*st.Backoff.RevertHealthy {
		t.Fatalf("a killed apply outside the window: %+v", st.Backoff)
	}
}

// A deferral is dropped when tenancy has nothing to apply any more.
func TestADeferralEndsWhenTheChangeGoesAway(t *testing.T) {
	h := newHarness(t, nightWindow)
	v1 := applied(t, h)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	if h.state().Deferred == nil {
		t.Fatal("not deferred")
	}
	h.ten.SetDesiredRaw(env, v1, nil)
	h.expectExit(tick.ExitOK)
	if h.state().Deferred != nil {
		t.Fatal("the deferral outlived the change")
	}
	h.expectLog("no longer deferred: tenancy has nothing to apply")
}

// The night Berlin springs forward (02:00 CET → 03:00 CEST): a window that starts in the skipped
// hour opens when the clock jumps, and the tick applies then, not an hour early or late.
func TestAWindowStartingInTheSkippedHour(t *testing.T) {
	h := newHarness(t, "apply_windows: [\"Sun 02:00-05:00\"]\napply_windows_tz: Europe/Berlin")
	v1 := applied(t, h)
	h.clock.Advance(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC).Sub(h.clock.Now())) // (a clock set back)
	v2 := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Detail != "deferred until 2026-03-29T01:00:00Z" {
		t.Fatalf("report = %+v", r)
	}
	h.clock.Advance(29*time.Minute + 59*time.Second) // 01:59:59 CET, the last second before the jump
	h.expectExit(tick.ExitOK)
	if h.state().AppliedSha != v1 {
		t.Fatal("applied before the window")
	}
	h.clock.Advance(time.Second) // 03:00:00 CEST
	h.expectExit(tick.ExitOK)
	if h.state().AppliedSha != v2 {
		t.Fatal("not applied when the window opened")
	}
}
