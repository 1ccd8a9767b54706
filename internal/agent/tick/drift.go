package tick

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Drift: the applied release is not what runs. A container stopped, removed or started from a
// hand-edited file is brought back by `compose up` of the release on disk, after the revert's
// read-back and both judgements; a correction that does not end healthy backs off like a deploy.

// learnRelease remembers what the release's own `compose up` made of it: each service's config
// hash (as compose labelled the containers) and count. Nothing is learned from no containers; a
// container without a readable hash (compose before 2.21) leaves the hashes unknown.
func (a *Agent) learnRelease(sha string, cs []protocol.Container, correct *bool) *state.DriftMemory {
	if len(cs) == 0 {
		return a.st.MemoryFor(sha)
	}
	services := map[string]state.ServiceHash{}
	for _, c := range cs {
		h := services[c.Service]
		if !state.IsConfigHash(c.ConfigHash) || (h.ConfigHash != "" && h.ConfigHash != c.ConfigHash) {
			services = nil
			break
		}
		services[c.Service] = state.ServiceHash{ConfigHash: c.ConfigHash, Containers: h.Containers + 1}
	}
	a.st.Drift = &state.DriftMemory{Sha: sha, Services: services, Correct: correct}
	return a.st.Drift
}

// stopped: a container compose's restart policy is not bringing back (`restarting` is).
func stopped(state string) bool {
	switch state {
	case "exited", "created", "dead":
		return true
	}
	return false
}

// findDrift lists what of mem's release is not running as its `up` left it, one
// `service: what` each, in service order; mem without services checks container states only.
func findDrift(mem *state.DriftMemory, cs []protocol.Container) []string {
	var out []string
	add := func(s string) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	if len(cs) == 0 && (mem == nil || len(mem.Services) == 0) {
		return []string{"no containers"}
	}
	byService := map[string][]protocol.Container{}
	for _, c := range cs {
		byService[c.Service] = append(byService[c.Service], c)
	}
	var known map[string]state.ServiceHash
	if mem != nil {
		known = mem.Services
	}
	for _, svc := range slices.Sorted(maps.Keys(byService)) {
		want, isKnown := known[svc]
		if len(known) > 0 && !isKnown {
			add(svc + ": not in the release")
			continue
		}
		for _, c := range byService[svc] {
			switch {
			case stopped(c.State):
				add(svc + ": " + c.State)
			case isKnown && c.ConfigHash != "" && c.ConfigHash != want.ConfigHash:
				add(svc + ": config differs from the release")
			}
		}
	}
	for _, svc := range slices.Sorted(maps.Keys(known)) {
		switch have, want := len(byService[svc]), known[svc].Containers; {
		case have == 0:
			add(svc + ": missing")
		case have < want:
			add(fmt.Sprintf("%s: %d of %d containers missing", svc, want-have, want))
		}
	}
	slices.SortStableFunc(out, func(x, y string) int {
		sx, _, _ := strings.Cut(x, ": ")
		sy, _, _ := strings.Cut(y, ": ")
		return strings.Compare(sx, sy)
	})
	return out
}

// driftCorrectionOff says why drift of the release in dir is only reported, "" when it is corrected.
func (a *Agent) driftCorrectionOff(mem *state.DriftMemory, dir string) string {
	var bundleSays *bool
	if mem != nil {
		bundleSays = mem.Correct
	} else {
		bundleSays = readReleaseMeta(dir).Agent.DriftCorrection
	}
	switch {
	case bundleSays != nil && !*bundleSays:
		return "bundle.json agent.drift_correction is false"
	case bundleSays == nil && !a.cfg.DriftCorrection:
		return "config drift_correction is false"
	}
	return ""
}

// checkDrift looks at the applied release's containers on a converged tick. It reports and returns
// true when it found drift (corrected, backing off, refused or only reported); false leaves the
// heartbeat to report readiness. No drift adds no state write, save the one that learns a release.
func (a *Agent) checkDrift(ctx context.Context, resp *protocol.CheckinResponse, sha, dir string, cs []protocol.Container, note string) (bool, error) {
	mem := a.st.MemoryFor(sha)
	drift := findDrift(mem, cs)
	if len(drift) == 0 {
		// What changes here rides in the heartbeat's own write of state.json: no write of its own.
		switch {
		case mem == nil:
			// Applied before this agent kept hashes: learn them from what runs, once.
			if m := a.learnRelease(sha, cs, readReleaseMeta(dir).Agent.DriftCorrection); m.Services != nil {
				a.log.Info("drift: config hashes of release " + protocol.ShortSha(sha) + " taken from its running containers (it was applied before they were kept)")
			}
		case mem.Attempts > 0:
			a.log.Info("drift: gone without a correction (put right by hand)", "release", protocol.ShortSha(sha))
			mem.Attempts, mem.NextAttemptAt, mem.Refused = 0, nil, ""
		}
		return false, nil
	}
	list := strings.Join(drift, ", ")
	if a.heldNow() {
		a.log.Warn("drift not corrected while held: " + list)
		return false, nil // the heartbeat reports readiness, its note the hold
	}
	if why := a.driftCorrectionOff(mem, dir); why != "" {
		detail := withNoteOf(note, "drift (not corrected: "+why+"): "+list)
		a.log.Warn("drift not corrected (" + why + "): " + list)
		a.reportUnhealthy(ctx, detail, cs, nil)
		return true, nil
	}
	now := a.deps.Now().UTC()
	if mem.BackingOff(now) {
		detail := "drift: " + list + "; " + driftBackoffNote(mem)
		a.log.Warn(detail)
		a.reportUnhealthy(ctx, withNoteOf(note, detail), cs, nil)
		return true, nil
	}
	return true, a.correctDrift(ctx, sha, dir, mem, drift, note)
}

// driftBackoffNote: `correction backs off until 2026-12-02T10:08:00Z (2 failed)` and why, if
// refused; no countdown, so that the recorded detail does not change from tick to tick.
func driftBackoffNote(m *state.DriftMemory) string {
	s := fmt.Sprintf("correction backs off until %s (%d failed)", m.NextAttemptAt.UTC().Format(time.RFC3339), m.Attempts)
	if m.Refused != "" {
		s += "; " + m.Refused
	}
	return s
}

// correctDrift brings the applied release back: the attempt is counted and saved first (a killed
// correction backs off too), then read-back and both judgements (a release changed on disk is
// never run), then `compose up` with no fetch, lease or pull of present images, and the health wait.
func (a *Agent) correctDrift(ctx context.Context, sha, dir string, mem *state.DriftMemory, drift []string, note string) error {
	list := strings.Join(drift, ", ")
	a.log.Warn("drift: " + list + "; correcting with compose up of release " + protocol.ShortSha(sha))
	if mem == nil {
		mem = &state.DriftMemory{Sha: sha}
		a.st.Drift = mem
	}
	attempts := mem.Attempts + 1
	mark := func(m *state.DriftMemory) {
		next := a.deps.Now().UTC().Add(state.BackoffDelay(attempts))
		m.Attempts, m.NextAttemptAt = attempts, &next
	}
	mark(mem)
	mem.Refused = ""
	a.saveOrWarn()
	if err := a.step("drift"); err != nil {
		return err
	}
	meta, refusal := a.judgeRelease(ctx, dir, sha)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("drift correction of %s interrupted: %w", protocol.ShortSha(sha), err)
	}
	if refusal != "" {
		mark(mem) // the wait counts from now
		mem.Refused = a.redact.Redact("release " + protocol.ShortSha(sha) + " refused: " + refusal)
		a.saveOrWarn()
		a.log.Error("drift not corrected: " + mem.Refused)
		detail := "drift not corrected: " + mem.Refused + "; drift: " + list + "; " + driftBackoffNote(mem)
		a.reportUnhealthy(ctx, withNoteOf(note, detail), nil, nil)
		return nil
	}
	if err := a.step("drift-judged"); err != nil {
		return err
	}
	a.st.Counters.DriftCorrections++
	healthy, why, after, err := a.runRelease(ctx, dir, meta, "drift")
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("drift correction of %s interrupted: %w", protocol.ShortSha(sha), err)
	}
	m := a.learnRelease(sha, after, meta.Agent.DriftCorrection)
	if healthy {
		m.Attempts, m.NextAttemptAt, m.Refused = 0, nil, ""
		detail := withNoteOf(note, "drift corrected: "+list)
		a.st.LastResult, a.st.LastDetail = protocol.ResultHealthy, a.cutDetail(detail)
		_ = a.saveState()
		a.log.Info("drift corrected: " + list + " (healthy)")
		a.report(ctx, protocol.Report{Sha: sha, Result: protocol.ResultHealthy, Detail: detail, Containers: after, DriftCorrected: drift})
		return nil
	}
	mark(m)
	why = a.redact.Redact(why)
	detail := "drift correction did not end healthy: " + why + "; drift was: " + list + "; " + driftBackoffNote(m)
	a.log.Error(detail)
	a.reportUnhealthy(ctx, withNoteOf(note, detail), after, drift)
	return nil
}

// reportUnhealthy records and reports `unhealthy` for the applied release.
func (a *Agent) reportUnhealthy(ctx context.Context, detail string, cs []protocol.Container, corrected []string) {
	a.st.LastResult, a.st.LastDetail = protocol.ResultUnhealthy, a.cutDetail(detail)
	_ = a.saveState()
	a.report(ctx, protocol.Report{Sha: a.st.AppliedSha, Result: protocol.ResultUnhealthy, Detail: detail, Containers: cs, DriftCorrected: corrected})
}

// withNoteOf appends a tick's note (a backoff, a deferral) to a detail.
func withNoteOf(note, detail string) string {
	switch {
	case note == "":
		return detail
	case detail == "":
		return note
	}
	return detail + "; " + note
}
