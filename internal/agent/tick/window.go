package tick

import (
	"context"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/window"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Apply windows: outside every window, an apply or retire that would change a running release
// waits for the next one. A first deploy (nothing applied) does not wait; drift correction and a
// revert never do: they restore what was already approved.

// windowsFor is the tick's schedule: the check-in's windows and zone, each where it sets one,
// else the config's.
func (a *Agent) windowsFor(resp *protocol.CheckinResponse) *window.Schedule {
	if resp.ApplyWindows == nil && resp.ApplyWindowsTZ == nil {
		return a.cfg.Windows
	}
	s, err := tenancy.Windows(resp, a.cfg.ApplyWindows, a.cfg.ApplyWindowsTZ)
	if err != nil {
		return a.cfg.Windows // both halves were checked on arrival and at load: cannot happen
	}
	return s
}

// deferral says until when resp's change waits for its window; ok false when it goes ahead now.
func (a *Agent) deferral(resp *protocol.CheckinResponse) (until time.Time, ok bool) {
	if a.st.AppliedSha == "" {
		return time.Time{}, false // a first deploy (or a retire with nothing applied) changes nothing that runs
	}
	sched := a.windowsFor(resp)
	now := a.deps.Now()
	if sched.Open(now) {
		return time.Time{}, false
	}
	if resp.IgnoreWindow {
		a.log.Info("apply window ignored: tenancy sent ignore_window", "windows", sched.String())
		return time.Time{}, false
	}
	next, found := sched.Next(now)
	if !found {
		// Only a schedule whose every window falls in DST gaps for a year: say so, and wait a day.
		a.log.Warn("no apply window opens within a year; looking again in a day", "windows", sched.String())
		next = now.Add(24 * time.Hour)
	}
	return next.UTC(), true
}

// deferred is a tick whose change waits: the wait is recorded (in the heartbeat's write of
// state.json), logged, and a heartbeat of what runs says until when; exit 0.
func (a *Agent) deferred(ctx context.Context, resp *protocol.CheckinResponse, until time.Time) error {
	d := &state.Deferral{Action: resp.Action, Sha: resp.DesiredSha, Since: a.deps.Now().UTC(), Until: until}
	if resp.Action == protocol.ActionDown {
		d.Sha = ""
	}
	if old := a.st.Deferred; old != nil && old.Action == d.Action && old.Sha == d.Sha {
		d.Since = old.Since
	}
	what := "apply of " + protocol.ShortSha(resp.DesiredSha)
	if resp.Action == protocol.ActionDown {
		what = "retire"
	}
	note := "deferred until " + until.Format(time.RFC3339)
	a.st.Deferred = d // saved with the heartbeat's own write
	a.log.Info(what+" "+note+": outside the apply window", "windows", a.windowsFor(resp).String())
	return a.heartbeat(ctx, resp, note)
}

// endDeferral forgets a recorded wait once it is over (the window opened, the change went away).
func (a *Agent) endDeferral(why string) {
	d := a.st.Deferred
	if d == nil {
		return
	}
	what := "apply of " + protocol.ShortSha(d.Sha)
	if d.Action == protocol.ActionDown {
		what = "retire"
	}
	a.log.Info(what + " no longer deferred: " + why)
	a.st.Deferred = nil
	a.saveOrWarn()
}
