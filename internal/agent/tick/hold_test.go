package tick_test

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// hold saves a hold as `monky-deployd hold` does, from now for d.
func (h *harness) hold(reason string, d time.Duration) *state.Hold {
	h.t.Helper()
	st := h.state()
	now := h.clock.Now().UTC()
	st.Hold = &state.Hold{Reason: reason, By: "alice", Since: now, Until: now.Add(d)}
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		h.t.Fatal(err)
	}
	return st.Hold
}

func (h *harness) lastCheckin() protocol.CheckinRequest {
	h.t.Helper()
	cs := h.ten.Checkins(env)
	if len(cs) == 0 {
		h.t.Fatal("no check-in")
	}
	return cs[len(cs)-1].Request
}

// While held, a tick checks in (with the hold) and reports, but applies, retires and corrects
// nothing; when the hold runs out it ends by itself with a journal line, and the tick goes on.
func TestAHoldStopsEveryChangeButNotTheReport(t *testing.T) {
	h := newHarness(t)
	v1 := applied(t, h)
	hold := h.hold("debugging the db", 4*time.Hour)
	note := "held by alice until 2026-12-02T14:00:00Z: debugging the db"

	v2 := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	fetches := len(h.ten.BundleFetches(env))
	h.docker.Stop("worker")
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitOK)
	req := h.lastCheckin()
	want := protocol.Hold{Reason: "debugging the db", By: "alice", Since: "2026-12-02T10:00:00Z", Until: "2026-12-02T14:00:00Z"}
	if req.Hold == nil || *req.Hold != want {
		t.Fatalf("check-in hold = %+v, want %+v", req.Hold, want)
	}
	if len(h.ten.BundleFetches(env)) != fetches || h.docker.Count("compose up") != ups {
		t.Fatal("a held box fetched a bundle or ran compose up")
	}
	r := h.lastReport()
	if r.Sha != v1 || r.Result != "unhealthy" || !strings.Contains(r.Detail, note) || r.DriftCorrected != nil {
		t.Errorf("heartbeat while held = %+v", r)
	}
	h.expectLog("INFO held: not applying " + v2[:12] + "; " + note)
	h.expectLog("WARN drift not corrected while held: worker: exited")

	// Retired while held: nothing goes down.
	h.ten.Retire(env, false)
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose down") != 0 {
		t.Fatal("a held box was retired")
	}
	h.expectLog("INFO held: not retiring the env; " + note)

	// The hold runs out: one journal line, no hold in the check-in, and the retire goes ahead.
	h.clock.Advance(hold.Until.Sub(h.clock.Now()))
	h.expectExit(tick.ExitOK)
	h.expectLog("INFO hold ended: its time ran out (held by alice since 2026-12-02T10:00:00Z until 2026-12-02T14:00:00Z: debugging the db)")
	if req := h.lastCheckin(); req.Hold != nil {
		t.Errorf("the check-in after the hold carries %+v", req.Hold)
	}
	if st := h.state(); st.Hold != nil || h.docker.Count("compose down") != 1 {
		t.Errorf("after the hold: %+v, downs %d", st.Hold, h.docker.Count("compose down"))
	}
}

// A converged box under a hold reports healthy with the hold in its detail.
func TestAHeldHealthyBoxSaysSo(t *testing.T) {
	h := newHarness(t)
	applied(t, h)
	h.hold("quiet please", time.Hour)
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "healthy" || r.Detail != "held by alice until 2026-12-02T11:00:00Z: quiet please" {
		t.Errorf("report = %+v", r)
	}
	h.expectLog("INFO held by alice until 2026-12-02T11:00:00Z: quiet please")
}

// An apply a killed tick left, or its revert, waits for the hold: nothing is reverted while held.
func TestAHoldDefersTheRevertOfAKilledApply(t *testing.T) {
	h := newHarness(t)
	v1 := applied(t, h)
	st := h.state()
	st.Applying = &state.ApplyInProgress{Sha: strings.Repeat("e", 64), StartedAt: h.clock.Now()}
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		t.Fatal(err)
	}
	h.hold("hands off", time.Hour)
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose up") != ups || h.state().Applying == nil {
		t.Fatal("a held box finished a killed apply")
	}
	if r := h.lastReport(); r.Sha != v1 || !strings.Contains(r.Detail, "the apply of eeeeeeeeeeee a killed tick left is finished when the hold ends") {
		t.Errorf("report = %+v", r)
	}
	h.clock.Advance(time.Hour)
	h.expectExit(tick.ExitFailed) // the hold over: the killed apply counts as failed and reverts
	if st := h.state(); st.Applying != nil || st.Backoff == nil {
		t.Errorf("after the hold: %+v", st)
	}
}

// The hold's reason is operator text: it passes the redactor like every line (`monky-deployd
// hold` refuses a reason holding a secret of the release; the token is the tick's to mask).
func TestAHoldReasonCarriesNoSecret(t *testing.T) {
	h := newHarness(t)
	applied(t, h)
	raw, err := os.ReadFile(h.cfg.TokenPath())
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(raw))
	h.hold("token is "+tok, time.Hour)
	h.expectExit(tick.ExitOK)
	if strings.Contains(h.logs.String(), tok) || strings.Contains(h.lastReport().Detail, tok) || strings.Contains(h.lastCheckin().Hold.Reason, tok) {
		t.Error("the token in the hold's reason reached the journal, the report or the check-in")
	}
	if !strings.Contains(h.lastReport().Detail, "token is ***") {
		t.Errorf("report = %+v", h.lastReport())
	}
}

// A hold this clock cannot have written (it begins years ahead: the clock ran ahead when it was
// set, or state.json was edited by hand) would stop every apply for years, and the overdue alert
// (age from since) would never fire: it lapses with a warning, and the apply goes ahead.
func TestAHoldFromAClockThatRanAheadLapses(t *testing.T) {
	for _, tc := range []struct {
		name         string
		since, until time.Duration
	}{
		{"begins five years ahead", 5 * 365 * 24 * time.Hour, 5*365*24*time.Hour + 4*time.Hour},
		{"begins an hour ahead", time.Hour, 5 * time.Hour},
		{"ends eight days ahead", 24 * time.Hour, 8 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			applied(t, h)
			st := h.state()
			now := h.clock.Now().UTC().Truncate(time.Second)
			st.Hold = &state.Hold{Reason: "set while the clock ran ahead", By: "alice", Since: now.Add(tc.since), Until: now.Add(tc.until)}
			if err := state.Save(h.cfg.StatePath(), st); err != nil {
				t.Fatal(err)
			}
			h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
			ups := h.docker.Count("compose up")
			h.expectExit(tick.ExitOK)
			if h.docker.Count("compose up") == ups {
				t.Errorf("the hold %+v stopped the apply", st.Hold)
			}
			if h.state().Hold != nil {
				t.Errorf("the lapsed hold is kept: %+v", h.state().Hold)
			}
			if c := h.lastCheckin(); c.Hold != nil {
				t.Errorf("tenancy heard of the lapsed hold: %+v", c.Hold)
			}
			if logs := h.logs.String(); !strings.Contains(logs, "WARN hold lapsed") {
				t.Errorf("no warning says the hold lapsed:\n%s", logs)
			}
		})
	}
	// A hold set a few seconds ahead of this clock (the box's own, rounded) still holds.
	h := newHarness(t)
	applied(t, h)
	st := h.state()
	now := h.clock.Now().UTC()
	st.Hold = &state.Hold{Reason: "debugging", By: "alice", Since: now.Add(30 * time.Second), Until: now.Add(4 * time.Hour)}
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		t.Fatal(err)
	}
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	ups := h.docker.Count("compose up")
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose up") != ups || h.state().Hold == nil {
		t.Error("a hold a few seconds ahead of the clock did not hold")
	}
}

// A held tick reads no KV value, yet the reason goes out in the check-in, the heartbeat's detail
// and the journal: the tick's redactor learns the release's secrets from disk first, including
// one the release's .env holds only inside a longer value (a DSN, which `hold` once let through).
func TestAHeldTickRedactsTheReleasesSecretsInTheReason(t *testing.T) {
	for _, tc := range []struct {
		name     string
		template string
	}{
		{"a value of its own", defaultTemplate},
		{"inside a dsn", "GEMINI_API_KEY=${GEMINI_API_KEY}\nDSN=postgres://app:${DB_PASSWORD}@db.internal/app\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			sha := h.desire(bundleSpec{template: tc.template})
			h.expectExit(tick.ExitOK)
			if h.state().AppliedSha != sha {
				t.Fatalf("not applied: %+v", h.state())
			}
			h.hold("the db password "+dbPassword+" and the pull password "+registryPwd+" were rotated", 4*time.Hour)
			h.logs.Reset()
			h.expectExit(tick.ExitOK)
			req, r, logs := h.lastCheckin(), h.lastReport(), h.logs.String()
			for name, s := range map[string]string{"db password": dbPassword, "registry password": registryPwd} {
				if req.Hold == nil || strings.Contains(req.Hold.Reason, s) {
					t.Errorf("%s: check-in hold = %+v", name, req.Hold)
				}
				if strings.Contains(r.Detail, s) {
					t.Errorf("%s: report detail = %q", name, r.Detail)
				}
				if strings.Contains(logs, s) {
					t.Errorf("%s: in the journal:\n%s", name, logs)
				}
			}
			if want := "the db password *** and the pull password *** were rotated"; !strings.Contains(r.Detail, want) {
				t.Errorf("report detail = %q, want it to hold %q", r.Detail, want)
			}
			if strings.Contains(logs, "could not all be read") {
				t.Errorf("the release's secrets were readable:\n%s", logs)
			}
		})
	}
}

// A mask can be longer than what it hides ("日本" → "***"): the check-in's hold is cut back to
// the bounds fleetctl reads it by, or one box's hold would refuse the whole fleet's listing.
func TestAHoldRedactedPastItsBoundsIsCutBack(t *testing.T) {
	h := newHarness(t)
	applied(t, h)
	h.wrap = func(d *tick.Deps) { d.Redact.Add("日本") }
	reason := strings.Repeat("日本 ", 66) + "日本" // 200 characters, 267 once masked
	h.hold(reason, time.Hour)
	h.expectExit(tick.ExitOK)
	got := h.lastCheckin().Hold
	if got == nil {
		t.Fatal("no hold in the check-in")
	}
	if err := protocol.CheckSentHoldText(got.Reason, protocol.MaxHoldReason); err != nil || strings.Contains(got.Reason, "日本") {
		t.Errorf("check-in hold reason %q: %v", got.Reason, err)
	}
	if !strings.HasPrefix(got.Reason, "*** *** ") || !strings.HasSuffix(got.Reason, "…") {
		t.Errorf("check-in hold reason %q, want the masked reason cut", got.Reason)
	}
}

// A held tick reads the applied release from disk to learn its secrets (seedHoldRedactor): a
// FIFO put in the release directory's place is refused at once, as every file a tick reads is.
// os.OpenRoot opened it without O_DIRECTORY and waited for a writer, and the tick until
// systemd's timeout, reporting nothing meanwhile.
func TestAHeldTickDoesNotWaitOnAFIFOInPlaceOfTheRelease(t *testing.T) {
	h := newHarness(t)
	sha := applied(t, h)
	h.hold("maintenance", 4*time.Hour)
	dir := release.Dir(h.cfg.EnvDir(), sha)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(dir, 0o600); err != nil {
		t.Fatal(err)
	}
	h.logs.Reset()
	done := make(chan int, 1)
	go func() { done <- h.tick() }()
	select {
	case code := <-done:
		if code != tick.ExitOK {
			t.Errorf("tick exit %d, want %d; journal:\n%s", code, tick.ExitOK, h.logs.String())
		}
	case <-time.After(10 * time.Second):
		// Let the stuck open go: a writer's open ends the reader's wait.
		if w, err := os.OpenFile(dir, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatalf("the held tick still waits on the FIFO at %s after 10 s", dir)
	}
	h.expectLog("WARN hold: the release's secrets could not all be read")
	if r := h.lastReport(); r.Sha != sha || !strings.Contains(r.Detail, "maintenance") {
		t.Errorf("heartbeat = %+v", r)
	}
}
