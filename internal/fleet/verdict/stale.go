package verdict

import (
	"cmp"
	"fmt"
	"time"
)

// A stale env's next step comes from what its agent last said, not from a guess: the same
// "enable the timer" once greeted a box locked out of tenancy, one whose config exited 78 every
// tick, and one in the middle of a long apply.

// Causes of a stale env (Result.Cause, the exporter's monky_fleet_env_stale_cause).
const (
	CauseApplying       = "applying"          // an apply the last check-in started may still run
	CauseApplyOverdue   = "apply_overdue"     // that apply outlived the tick's timeout
	CauseTimerDisabled  = "timer_disabled"    // the last check-in said the timer is disabled
	CauseTimerInactive  = "timer_inactive"    // enabled, but not active
	CauseTimerUnknown   = "timer_unknown"     // the agent could not tell (no systemd)
	CauseTicksNotLanded = "ticks_not_landing" // the timer runs, but no tick reaches tenancy
	CauseHostDown       = "host_down"         // the host is off the mesh
)

// Causes lists every cause, for the exporter.
func Causes() []string {
	return []string{CauseApplying, CauseApplyOverdue, CauseTimerDisabled, CauseTimerInactive, CauseTimerUnknown, CauseTicksNotLanded, CauseHostDown}
}

// DefaultApplyTimeout is the unit's TimeoutStartSec, for agents that do not send apply_timeout_s.
const DefaultApplyTimeout = time.Hour

// staleStep decides a stale env's cause and next step from the evidence of its last check-in.
func staleStep(a *Agent, online bool, age time.Duration) (cause, step string) {
	timeout := cmp.Or(a.ApplyTimeout, DefaultApplyTimeout)
	ran := "last ran " + cmp.Or(a.Version, "an unknown version")
	applying := a.LastAction == "apply" && a.LastCheckin != nil && (a.LastResultAt == nil || a.LastResultAt.Before(*a.LastCheckin))
	switch {
	case applying && age <= timeout:
		return CauseApplying, fmt.Sprintf("applying %s since its last check-in %s ago (a tick may run %s): wait, or follow it on the box: journalctl -u monky-deployd -f",
			cmp.Or(Short(a.DesiredSha), "the desired release"), Human(age), Human(timeout))
	case applying:
		return CauseApplyOverdue, fmt.Sprintf("an apply of %s started %s ago, past the tick's %s timeout: on the box, systemctl status monky-deployd.service and journalctl -u monky-deployd (the next tick counts it failed and reverts)",
			cmp.Or(Short(a.DesiredSha), "the desired release"), Human(age), Human(timeout))
	case !online:
		return CauseHostDown, offlineStep(a, age)
	case a.TimerEnabled != nil && !*a.TimerEnabled:
		return CauseTimerDisabled, fmt.Sprintf("agent stopped on a live host: systemctl enable --now monky-deployd.timer (timer reported disabled; %s)", ran)
	case a.TimerActive != nil && !*a.TimerActive:
		return CauseTimerInactive, fmt.Sprintf("timer enabled but not running on a live host: systemctl start monky-deployd.timer, then systemctl status monky-deployd.timer (%s)", ran)
	case a.TimerEnabled == nil:
		return CauseTimerUnknown, fmt.Sprintf("agent silent on a live host, its timer state never reported: on the box, systemctl status monky-deployd.timer (if it is off: systemctl enable --now monky-deployd.timer), then journalctl -u monky-deployd (%s)", ran)
	}
	// Enabled and active at the last check-in: either its ticks fail before they reach tenancy,
	// or the timer was stopped after it; the box says which.
	step = "the timer ran at its last check-in, but no tick has reached tenancy since: on the box, journalctl -u monky-deployd -n 30 and monky-deployd doctor say why (a rejected config exits 78 every tick; a superseded token asks for the install kit; a timer stopped since: systemctl enable --now monky-deployd.timer)"
	if c := a.LastExitCode; c != nil && *c != 0 {
		step += fmt.Sprintf("; the tick before its last check-in exited %d%s", *c, exitMeaning(*c))
	}
	return CauseTicksNotLanded, step + " (" + ran + ")"
}

// offlineStep: where the box's identity lives decides what to look at.
func offlineStep(a *Agent, age time.Duration) string {
	last := fmt.Sprintf("mesh offline, last check-in %s ago", Human(age))
	switch a.Transport {
	case "system":
		return "host or tunneller down: " + last + ": is the box up? then systemctl status ziti-edge-tunnel on it"
	case "proxy":
		return "host or proxy down: " + last + ": is the box up? then systemctl status monky-deployd-proxy on it"
	case "sdk":
		return "host down, or its ticks stop before the mesh: " + last + " (transport sdk: only a running tick is on the mesh): is the box up? then journalctl -u monky-deployd on it"
	}
	return "host or tunneller down: " + last
}

// exitMeaning says what a tick's exit code means (PROTOCOL.md, exit codes).
func exitMeaning(code int) string {
	switch code {
	case 1:
		return " (failed or refused)"
	case 75:
		return " (temporary: mesh, tenancy or OpenBao unreachable)"
	case 78:
		return " (config rejected, or the token belongs to another env)"
	}
	return ""
}

// failureWords: `(UNHEALTHY: not healthy after 5m0s: api: exited) 3×`.
func failureWords(f *Failure) string {
	s := "(" + f.Code + ": " + cmp.Or(oneLine(f.Detail), "no detail") + ")"
	if f.Attempts > 1 {
		s += fmt.Sprintf(" %d×", f.Attempts)
	}
	return s
}
