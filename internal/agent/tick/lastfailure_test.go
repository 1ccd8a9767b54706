package tick_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// The reason a deploy failed outlives the tick that failed: kept in state.json, sent in every
// check-in while the sha backs off, counted per attempt, and gone once a success makes it moot.
func TestLastFailureOutlivesTheTickThatFailed(t *testing.T) {
	h := newHarness(t)
	_, v2 := failingV2(t, h, nil)
	failedAt := h.clock.Now()
	h.expectExit(tick.ExitFailed)
	f := h.state().LastFailure
	if f == nil || f.Sha != v2 || f.Code != protocol.FailUnhealthy || f.Attempts != 1 ||
		!strings.HasPrefix(f.Detail, "not healthy after 30s: api: running/unhealthy") || f.At.Before(failedAt) {
		t.Fatalf("last_failure after the failed apply = %+v", f)
	}

	// The second and third ticks back off: their check-ins still say why.
	for range 2 {
		h.clock.Advance(30 * time.Second) // within the 2m backoff
		h.expectExit(tick.ExitFailed)
		if st := h.state(); st.Backoff == nil || st.Backoff.Attempts != 1 {
			t.Fatalf("the tick was not a backing-off one: %+v", st.Backoff)
		}
		lf := h.lastCheckin().LastFailure
		if lf == nil || lf.Sha != v2 || lf.Code != protocol.FailUnhealthy || lf.Attempts != 1 || lf.Detail != f.Detail ||
			lf.At != f.At.UTC().Format(time.RFC3339) {
			t.Fatalf("check-in while backing off carries last_failure %+v, want %+v", lf, f)
		}
	}

	// The retry fails again: the same failure, one more attempt.
	h.endBackoff()
	h.expectExit(tick.ExitFailed)
	if f := h.state().LastFailure; f == nil || f.Attempts != 2 {
		t.Fatalf("last_failure after the second failed apply = %+v, want attempts 2", f)
	}

	// The retry that works clears it, and the next check-in carries none.
	h.docker.ImageHealth[badAPI] = "healthy"
	h.endBackoff()
	h.expectExit(tick.ExitOK)
	if f := h.state().LastFailure; f != nil {
		t.Fatalf("last_failure after %.12s applied = %+v", v2, f)
	}
	h.expectLog("last failure of " + v2[:12] + " (UNHEALTHY) cleared: " + v2[:12] + " applied")
	h.expectExit(tick.ExitOK)
	if lf := h.lastCheckin().LastFailure; lf != nil {
		t.Errorf("the check-in after the success still carries %+v", lf)
	}
}

// What makes a failure moot besides its own success: another desired sha applied, tenancy going
// back to the release that runs healthy, a retire. A refusal is kept the same way, and a
// remembered refusal repeated each tick is no new attempt.
func TestLastFailureClears(t *testing.T) {
	t.Run("a new desired sha applied", func(t *testing.T) {
		h := newHarness(t)
		failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		v3 := h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
		h.expectExit(tick.ExitOK)
		if f := h.state().LastFailure; f != nil {
			t.Errorf("last_failure after %.12s applied = %+v", v3, f)
		}
	})
	t.Run("tenancy back on the release that runs healthy", func(t *testing.T) {
		h := newHarness(t)
		v1, v2 := failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		h.ten.SetDesired(env, makeFiles(bundleSpec{}))
		h.expectExit(tick.ExitOK)
		if f := h.state().LastFailure; f != nil {
			t.Errorf("last_failure with %.12s desired and healthy = %+v", v1, f)
		}
		h.expectLog("last failure of " + v2[:12] + " (UNHEALTHY) cleared: tenancy now wants " + v1[:12] + ", which runs healthy")
	})
	t.Run("a retire", func(t *testing.T) {
		h := newHarness(t)
		failingV2(t, h, nil)
		h.expectExit(tick.ExitFailed)
		h.ten.Retire(env, false)
		h.expectExit(tick.ExitOK)
		if f := h.state().LastFailure; f != nil {
			t.Errorf("last_failure after the retire = %+v", f)
		}
	})
	t.Run("a refusal is kept, its repeats are no attempts", func(t *testing.T) {
		h := newHarness(t)
		sha := h.desire(bundleSpec{compose: "services:\n  api:\n    image: x/api:1\n    privileged: true\n"})
		for range 3 {
			h.expectExit(tick.ExitFailed)
			h.clock.Advance(time.Minute)
		}
		f := h.state().LastFailure
		if f == nil || f.Sha != sha || f.Code != protocol.CodePrivileged || f.Attempts != 1 || !strings.HasPrefix(f.Detail, "PRIVILEGED_REFUSED: ") {
			t.Fatalf("last_failure of a refused bundle = %+v", f)
		}
		if lf := h.lastCheckin().LastFailure; lf == nil || lf.Code != protocol.CodePrivileged {
			t.Errorf("check-in after the refusal carries %+v", lf)
		}
	})
}

// A tick names itself in its check-in and its report (tenancy keeps both ids for fleetctl), and
// the exit code of the tick before rides in the next check-in.
func TestTickIDAndLastExitCodeReachTenancy(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	if err := tick.New(h.cfg, h.deps(), tick.Options{TickID: "3f9a0c1d2e4b"}).Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	if req := h.lastCheckin(); req.TickID != "3f9a0c1d2e4b" || req.ApplyTimeoutS != protocol.TickTimeoutS || req.LastExitCode != nil {
		t.Errorf("first check-in: tick_id %q, apply_timeout_s %d, last_exit_code %v", req.TickID, req.ApplyTimeoutS, req.LastExitCode)
	}
	if r := h.lastReport(); r.TickID != "3f9a0c1d2e4b" {
		t.Errorf("report tick_id %q", r.TickID)
	}
	a, _ := h.ten.AdminAgent(env)
	if a.CheckinTickID != "3f9a0c1d2e4b" || a.ResultTickID != "3f9a0c1d2e4b" || a.LastAction != protocol.ActionApply {
		t.Errorf("admin view: checkin_tick_id %q result_tick_id %q last_action %q", a.CheckinTickID, a.ResultTickID, a.LastAction)
	}
	// The CLI records each tick's exit code in state.json; the next check-in sends it.
	st := h.state()
	code := 75
	st.LastExitCode = &code
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		t.Fatal(err)
	}
	h.expectExit(tick.ExitOK)
	if req := h.lastCheckin(); req.LastExitCode == nil || *req.LastExitCode != 75 || req.TickID != "" {
		t.Errorf("second check-in: last_exit_code %v, tick_id %q (the harness names no tick)", req.LastExitCode, req.TickID)
	}
}
