package tick_test

import (
	"context"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

// The counters the box's metrics show survive the one-shot process in state.json: an apply, a
// lease, a failure and a refusal each count once, a heartbeat counts nothing.
func TestCountersPersistAcrossTicks(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK) // apply, with one lease
	h.expectExit(tick.ExitOK) // heartbeat
	if got, want := h.state().Counters, (state.Counters{Applies: 1, Leases: 1}); got != want {
		t.Errorf("after an apply and a heartbeat: %+v, want %+v", got, want)
	}
	h.desire(bundleSpec{compose: "services:\n  api:\n    image: x\n    privileged: true\n"})
	h.expectExit(tick.ExitFailed)
	h.docker.PullFail = "Error response from daemon: pull access denied\n"
	h.desire(bundleSpec{compose: strings.ReplaceAll(defaultCompose, "1.4.2", "1.4.3")})
	h.expectExit(tick.ExitFailed)
	if got, want := h.state().Counters, (state.Counters{Applies: 1, Leases: 1, Refusals: 1, Failures: 1}); got != want {
		t.Errorf("after a refusal and a failure: %+v, want %+v", got, want)
	}
}

// What the tick observed is handed to the metrics: the last report's result, whether tenancy
// took it, and the containers it carried.
func TestObservedReport(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	a := tick.New(h.cfg, h.deps(), tick.Options{})
	if err := a.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	obs := a.Observed()
	if obs.ReportResult != "healthy" || !obs.ReportDelivered || len(obs.Containers) != 2 {
		t.Errorf("observed %+v", obs)
	}
	if a.State() == nil || a.State().AppliedSha == "" {
		t.Errorf("state %+v", a.State())
	}
}
