package tick

import (
	"context"
	"fmt"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// A hold is a human's "wait" (`monky-deployd hold`): ticks still check in and report, so the box
// is never silent, but nothing is applied, retired, reverted or corrected until it ends.

// expireHold ends a hold whose until has passed, with a journal line; before the check-in, so
// tenancy never hears of a hold that is over.
func (a *Agent) expireHold() {
	h, now := a.st.Hold, a.deps.Now()
	switch {
	case h == nil || h.Active(now):
		return
	case h.TooFar(now):
		a.log.Warn(fmt.Sprintf("hold lapsed: it runs from %s to %s, which this clock (%s) cannot have written (a hold begins now and lasts at most 7 days: a clock that ran ahead, or a hand edit); applies resume, `monky-deployd hold` sets a new one (held by %s: %s)",
			h.Since.UTC().Format(time.RFC3339), h.Until.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), h.By, h.Reason))
	default:
		a.log.Info(fmt.Sprintf("hold ended: its time ran out (held by %s since %s until %s: %s)",
			h.By, h.Since.UTC().Format(time.RFC3339), h.Until.UTC().Format(time.RFC3339), h.Reason))
	}
	a.st.Hold = nil
	a.saveOrWarn()
}

// seedHoldRedactor adds the secrets the box holds at rest (SecretsOnDisk) to the tick's redactor
// while state.json holds a hold, before its text is redacted: the reason is operator text that
// goes out in the check-in, the heartbeat's detail and the journal, and a held tick reads no KV
// value, so its redactor would know only the token. One that cannot be read is warned about
// without its error, which may quote a line of the .env; the tick goes on with what was read.
func (a *Agent) seedHoldRedactor() {
	if a.st.Hold == nil {
		return
	}
	if err := addSecretsOnDisk(a.redact, a.cfg, a.st); err != nil {
		a.log.Warn("hold: the release's secrets could not all be read to redact the hold's reason; it is redacted with what was read")
	}
}

// heldNow reports whether a hold runs now.
func (a *Agent) heldNow() bool { return a.st.Hold.Active(a.deps.Now()) }

// heldTick is a tick under a hold: what the check-in asked is logged and left, and the heartbeat
// reports what runs, its detail saying held by whom, until when and why.
func (a *Agent) heldTick(ctx context.Context, resp *protocol.CheckinResponse) error {
	note := a.st.Hold.Note()
	switch {
	case resp.Action == protocol.ActionApply:
		a.log.Info("held: not applying " + protocol.ShortSha(resp.DesiredSha) + "; " + note)
	case resp.Action == protocol.ActionDown:
		a.log.Info("held: not retiring the env; " + note)
	default:
		a.log.Info(note)
	}
	switch {
	case a.st.Applying != nil:
		note += "; the apply of " + protocol.ShortSha(a.st.Applying.Sha) + " a killed tick left is finished when the hold ends"
	case a.st.Backoff != nil && a.st.Backoff.RevertPending:
		note += "; the revert to " + protocol.ShortSha(a.st.Backoff.RevertedTo) + " a killed tick left is finished when the hold ends"
	}
	return a.heartbeat(ctx, resp, note)
}
