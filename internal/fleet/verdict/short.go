package verdict

import (
	"fmt"
	"regexp"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

// The 120-column table shows a short next step: the action first, about 60 columns; the whole
// sentence (NextStep) is in -o wide, describe and the JSON. A step cut at its column's edge once
// read "agent stopped on a live host: systemctl enable --now mon…", and the JSON carried the cut.

// codeRE finds the CODE a refusal's detail starts with (`DISK_INSUFFICIENT: …`).
var codeRE = regexp.MustCompile(`^([A-Z][A-Z0-9_]{2,}):`)

// shortStep is r's next step in short; "" when this version has none for the verdict (the
// table then shortens NextStep on a word).
func shortStep(in Input, r Result, now time.Time) string {
	a := in.Agent
	switch r.Verdict {
	case OrphanIdentity:
		return "no backend: onboard the env, or delete its identity"
	case OK:
		return ""
	}
	if a == nil {
		return ""
	}
	switch r.Verdict {
	case NoIdentity:
		site := a.Site
		if site == "" {
			site = "SITE"
		}
		return fmt.Sprintf("fleetctl onboard %s --site %s", a.EnvID, site)
	case AttrsMissing:
		return "fleetctl repair-attrs " + a.EnvID
	case NeverCheckedIn:
		return "run the install kit; journalctl -u monky-deployd"
	case Silent, Offline:
		return staleShort(a, r)
	case Failing:
		code := failureCode(a)
		if code == "" {
			return fmt.Sprintf("%s: fleetctl describe %s", a.LastResult, a.EnvID)
		}
		return fmt.Sprintf("%s %s: fleetctl describe %s", a.LastResult, code, a.EnvID)
	case BackingOff:
		s := fmt.Sprintf("%s failed %d×", Short(a.Backoff.FailedSha), a.Backoff.Attempts)
		if code := failureCode(a); code != "" {
			s += " (" + code + ")"
		}
		return s + ": publish a fixed bundle"
	case Drift:
		return fmt.Sprintf("%s not applied for %s: fleetctl describe %s", Short(a.DesiredSha), Human(now.Sub(*a.DesiredAt)), a.EnvID)
	case Held:
		// A hold is a human's wish, not a fault: who and until when, and what ends it.
		return fmt.Sprintf("held by %s until %s: monky-deployd unhold ends it", clip.Runes(oneLine(a.Hold.By), 16), a.Hold.Until.UTC().Format("01-02 15:04Z"))
	case Deferred:
		return fmt.Sprintf("%s waits for its apply window until %s", Short(a.DesiredSha), a.DeferredUntil.UTC().Format("01-02 15:04Z"))
	}
	return "" // OUTDATED's own step is short already
}

func staleShort(a *Agent, r Result) string {
	switch r.Cause {
	case CauseApplying:
		return fmt.Sprintf("applying %s: wait (journalctl -u monky-deployd -f)", Short(a.DesiredSha))
	case CauseApplyOverdue:
		return "apply overdue: systemctl status monky-deployd.service"
	case CauseTimerDisabled:
		return "systemctl enable --now monky-deployd.timer"
	case CauseTimerInactive:
		return "systemctl start monky-deployd.timer"
	case CauseTimerUnknown:
		return "systemctl status monky-deployd.timer on the box"
	case CauseTicksNotLanded:
		if c := a.LastExitCode; c != nil && *c != 0 {
			return fmt.Sprintf("ticks exit %d: journalctl -u monky-deployd; doctor", *c)
		}
		return "ticks do not land: journalctl -u monky-deployd; doctor"
	case CauseHostDown:
		switch a.Transport {
		case "system":
			return "box or ziti-edge-tunnel down: is the box up?"
		case "proxy":
			return "box or monky-deployd-proxy down: is the box up?"
		case "sdk":
			return "box down? then journalctl -u monky-deployd on it"
		}
		return "host or tunneller down: is the box up?"
	}
	return ""
}

// failureCode is the code of the failure behind a FAILING or BACKOFF env: the agent's last
// failure of the desired sha, else the CODE its last detail starts with.
func failureCode(a *Agent) string {
	if f := a.LastFailure; f != nil && f.Sha == a.DesiredSha {
		return f.Code
	}
	if m := codeRE.FindStringSubmatch(a.LastDetail); m != nil {
		return m[1]
	}
	return ""
}
