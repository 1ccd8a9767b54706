package tick

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// report sends r redacted; an undelivered report is only logged (the next check-in has last_result).
func (a *Agent) report(ctx context.Context, r protocol.Report) {
	r.EnvID = a.cfg.EnvID
	r.AgentVersion = version.Version
	r.TickID = a.opt.TickID
	// A detail keeps its start (a refusal's CODE and findings), a log tail its end. An unsaved
	// state.json is said at the end with room kept: tenancy must learn this box's memory is behind.
	if a.stateErr != nil {
		note := a.redact.Redact("state.json not saved: " + a.stateErr.Error())
		if r.Detail == "" {
			r.Detail = a.cutDetail(note)
		} else {
			r.Detail = a.redact.TruncateHead(r.Detail, max(protocol.MaxDetail-len(note)-2, protocol.MaxDetail/2)) + "; " + note
		}
	}
	r.Detail = a.cutDetail(r.Detail)
	r.LogTail = a.redact.Truncate(r.LogTail, protocol.MaxLogTail)
	if r.Containers == nil {
		r.Containers = []protocol.Container{}
	}
	err := a.tok.WithAuth(ctx, "tenancy: report", func(tok secret.Value) error {
		return a.deps.Tenancy.Report(ctx, tok, r)
	})
	if err != nil {
		a.log.Warn("report not delivered", "result", r.Result, "error", a.redact.Redact(err.Error()))
	}
	a.observe(r, err == nil)
}

// refuseOrFail reports a refusal or a failure and returns the error for the exit code; errors that
// are not the bundle's fault pass through unreported.
func (a *Agent) refuseOrFail(ctx context.Context, sha string, err error) error {
	var r *protocol.Refusal
	var stop *stepStop
	switch {
	case errors.Is(err, ErrTemporary), errors.Is(err, ErrEnvMismatch), errors.Is(err, ErrNeedsKit), errors.As(err, &stop):
		return err
	case errors.As(err, &r) && r.Code == protocol.CodeLeaseShape:
		return a.fail(ctx, sha, protocol.CodeLeaseShape, r.Error(), "")
	case errors.As(err, &r):
		detail := a.redact.Redact(r.Error())
		a.log.Error("refused: " + detail)
		a.noteFailure(sha, r.Code, detail)
		a.record(sha, protocol.ResultRefused, detail)
		a.report(ctx, protocol.Report{Sha: sha, Result: protocol.ResultRefused, Detail: detail})
		return fmt.Errorf("%w: %s", ErrRefused, detail)
	default:
		return a.fail(ctx, sha, protocol.FailOther, err.Error(), "")
	}
}

// fail reports `failed`, code naming the step (protocol.Fail*). The running release, if any,
// keeps running: nothing here stops it.
func (a *Agent) fail(ctx context.Context, sha, code, detail, logTail string) error {
	return a.failWith(ctx, sha, code, detail, logTail, nil)
}

// failWith reports `failed`; a failure of the apply under way also backs off and reverts (failApply).
func (a *Agent) failWith(ctx context.Context, sha, code, detail, logTail string, cs []protocol.Container) error {
	detail = a.redact.Redact(detail)
	a.log.Error("failed: " + detail)
	if at := a.attempt; at != nil && at.sha == sha {
		return a.failApply(ctx, at, code, detail, logTail, cs)
	}
	a.noteFailure(sha, code, detail)
	a.record(sha, protocol.ResultFailed, detail)
	a.report(ctx, protocol.Report{Sha: sha, Result: protocol.ResultFailed, Detail: detail, LogTail: logTail, Containers: cs})
	return fmt.Errorf("%w: %s", ErrFailed, detail)
}

// record keeps the outcome in state; applied_sha stays, so a failed apply keeps the previous release.
func (a *Agent) record(sha, result, detail string) {
	a.st.LastSha = sha
	a.st.LastResult = result
	a.st.LastDetail = a.cutDetail(detail)
	a.st.CountOutcome(result)
	a.saveOrWarn()
}

// noteFailure keeps a failed or refused deploy in state for the next check-ins (last_failure);
// the attempts of a sha that backs off are the backoff's.
func (a *Agent) noteFailure(sha, code, detail string) {
	f := a.st.NoteFailure(sha, code, a.cutDetail(detail), a.deps.Now())
	if bo := a.st.Backoff; bo != nil && bo.Sha == sha {
		f.Attempts = bo.Attempts
	}
}

// clearFailure forgets the last failure once it no longer matters: an apply or a retire succeeded,
// or tenancy wants a release that runs healthy and is not the one that failed.
func (a *Agent) clearFailure(why string) {
	if f := a.st.LastFailure; f != nil {
		a.log.Info(fmt.Sprintf("last failure of %s (%s) cleared: %s", protocol.ShortSha(f.Sha), f.Code, why))
		a.st.LastFailure = nil
	}
}

// cutDetail redacts and cuts a detail to protocol.MaxDetail, so `status` and tenancy agree.
func (a *Agent) cutDetail(detail string) string {
	return a.redact.TruncateHead(detail, protocol.MaxDetail)
}

// heartbeat reports healthy or unhealthy for the running project, note added to the detail.
func (a *Agent) heartbeat(ctx context.Context, resp *protocol.CheckinResponse, note string) error {
	withNote := func(detail string) string {
		switch {
		case note == "":
			return detail
		case detail == "":
			return note
		}
		return detail + "; " + note
	}
	// Without a note the heartbeat's report is this tick's last word and its exit 0 (backingOff's
	// note ends it with 1): the write before the report then carries the success stamp, the
	// tick's one write. Saved before the report, so a failed write (stateErr) is named in it.
	save := a.saveState
	if note == "" {
		save = a.saveFinal
	}
	sha, dir, err := a.current()
	if err != nil {
		return err
	}
	if sha == "" && a.st.AppliedSha == "" && note != "" {
		// The first deploy failed before anything started: nothing runs, which is no healthy box.
		detail := withNote("nothing deployed")
		a.log.Warn("unhealthy: " + detail)
		a.st.LastResult, a.st.LastDetail = protocol.ResultUnhealthy, a.cutDetail(detail)
		a.report(ctx, protocol.Report{Sha: resp.DesiredSha, Result: protocol.ResultUnhealthy, Detail: detail})
		return a.saveState()
	}
	if sha == "" && a.st.AppliedSha == "" {
		// Converged with nothing to run: an unusable docker says so now, not at the first apply.
		if err := a.dockerUsable(ctx); err != nil {
			detail := a.redact.Redact("nothing deployed; docker is not usable: " + err.Error() + dockerHint(err))
			a.log.Warn("unhealthy: " + detail)
			a.st.LastResult = protocol.ResultUnhealthy
			a.st.LastDetail = a.cutDetail(detail)
			_ = save()
			a.report(ctx, protocol.Report{Sha: resp.DesiredSha, Result: protocol.ResultUnhealthy, Detail: detail})
			return nil
		}
		_ = save()
		a.report(ctx, protocol.Report{Sha: resp.DesiredSha, Result: protocol.ResultHealthy, Detail: "nothing deployed"})
		a.log.Info("healthy; heartbeat reported", "containers", 0)
		return nil
	}
	file := ""
	if dir != "" {
		file = composeFileOf(dir)
	} else if sha == "" {
		a.log.Warn("no current release link; looking at the compose project by name", "project", a.cfg.ComposeProject)
	}
	cs, err := a.deps.Docker.Ps(ctx, dir, file)
	if err != nil {
		detail := withNote(a.redact.Redact("compose ps: " + err.Error()))
		a.log.Warn("unhealthy: " + detail)
		a.st.LastResult = protocol.ResultUnhealthy
		a.st.LastDetail = a.cutDetail(detail)
		_ = save()
		a.report(ctx, protocol.Report{Sha: a.st.AppliedSha, Result: protocol.ResultUnhealthy, Detail: detail})
		return nil
	}
	if sha != "" && dir != "" && sha == a.st.AppliedSha {
		if found, err := a.checkDrift(ctx, resp, sha, dir, cs, note); found || err != nil {
			return err
		}
	}
	if bad := compose.Unready(cs); len(bad) > 0 || len(cs) == 0 {
		detail := "not running/healthy: " + strings.Join(bad, ", ")
		if len(cs) == 0 {
			detail = "no containers running for project " + a.cfg.ComposeProject
		}
		detail = withNote(detail)
		a.log.Warn("unhealthy: " + detail)
		a.st.LastResult = protocol.ResultUnhealthy
		a.st.LastDetail = a.cutDetail(detail)
		_ = save()
		a.report(ctx, protocol.Report{Sha: a.st.AppliedSha, Result: protocol.ResultUnhealthy, Detail: detail, Containers: cs})
		return nil
	}
	if f := a.st.LastFailure; f != nil && f.Sha != resp.DesiredSha && (resp.DesiredSha == "" || resp.DesiredSha == a.st.AppliedSha) {
		a.clearFailure("tenancy now wants " + protocol.ShortSha(resp.DesiredSha) + ", which runs healthy")
	}
	a.st.LastResult = protocol.ResultHealthy
	a.st.LastDetail = a.cutDetail(note)
	_ = save()
	a.report(ctx, protocol.Report{Sha: a.st.AppliedSha, Result: protocol.ResultHealthy, Detail: note, Containers: cs})
	a.log.Info("healthy; heartbeat reported", "containers", len(cs))
	return nil
}

// dockerUsable is nil when `docker info` answered this tick, or answers now.
func (a *Agent) dockerUsable(ctx context.Context) error {
	if a.dockerInfoFresh {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, dockerInfoTimeout)
	defer cancel()
	info, err := a.deps.Docker.Info(ictx)
	if err != nil {
		return err
	}
	a.noteDockerInfo(info)
	return nil
}

// dockerHint names the usual fix of a docker CLI the agent cannot use.
func dockerHint(err error) string {
	msg := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, runner.ErrNotFound):
		return " (no docker CLI: install docker, or set docker_bin)"
	case strings.Contains(msg, "permission denied"):
		return " (the agent's account is not in group docker: usermod -a -G docker monky-deployd; the next tick picks it up)"
	case strings.Contains(msg, "cannot connect to the docker daemon") || strings.Contains(msg, "is the docker daemon running"):
		return " (the docker daemon is not running: systemctl start docker)"
	}
	return ""
}

// current is the promoted release; a removed directory still names the project.
func (a *Agent) current() (sha, dir string, err error) {
	sha, dir, err = release.Current(a.cfg.EnvDir())
	if errors.Is(err, release.ErrDangling) {
		a.log.Warn("current release directory is missing; using the compose project name alone", "release", protocol.ShortSha(sha))
		return sha, "", nil
	}
	return sha, dir, err
}

// composeFileOf finds a promoted release's compose file from its kept bundle.json.
func composeFileOf(dir string) string {
	return readReleaseMeta(dir).ComposeFile
}

// releaseMetaWire is what the agent reads back of a staged release's bundle.json.
type releaseMetaWire struct {
	ComposeFile string `json:"compose_file"`
	Agent       struct {
		HealthyTimeoutS int   `json:"healthy_timeout_s"`
		DriftCorrection *bool `json:"drift_correction"`
	} `json:"agent"`
}

// readReleaseMeta reads a staged bundle.json as strictly as the bundle reader (no second key wins);
// anything unusable gives defaults, and revert judges the release in full anyway.
func readReleaseMeta(dir string) releaseMetaWire {
	var m releaseMetaWire
	raw, err := capread.File(filepath.Join(dir, bundle.MetaFile), bundle.MaxTotalBytes, nil)
	if err != nil || strictjson.Unmarshal(raw, &m) != nil {
		m = releaseMetaWire{}
	}
	if m.ComposeFile == "" || !filepath.IsLocal(m.ComposeFile) {
		m.ComposeFile = bundle.DefaultComposeFile
	}
	if m.Agent.HealthyTimeoutS < 0 || m.Agent.HealthyTimeoutS > protocol.MaxHealthyTimeoutS {
		m.Agent.HealthyTimeoutS = 0
	}
	return m
}

// down retires the env; volumes go only when tenancy asks AND the config allows it.
func (a *Agent) down(ctx context.Context, resp *protocol.CheckinResponse) error {
	volumes := resp.PurgeVolumes && a.cfg.VolumesOnAbsent == "purge"
	if resp.PurgeVolumes && !volumes {
		a.log.Warn("tenancy asked to purge volumes; config volumes_on_absent is keep, so they stay")
	}
	_, dir, err := a.current()
	if err != nil {
		return err
	}
	file := ""
	if dir != "" {
		file = composeFileOf(dir)
	}
	if err := a.deps.Docker.Down(ctx, dir, file, volumes); err != nil {
		return a.fail(ctx, resp.DesiredSha, protocol.FailDown, "compose down: "+err.Error(), outputOf(err))
	}
	a.clearFailure("the env is retired")
	a.st.LastResult = protocol.ResultDown
	a.st.LastDetail = ""
	a.st.AppliedSha = ""
	a.st.AppliedFiles = nil
	a.st.Drift = nil
	_ = a.saveState() // a failure is named in the report and the exit (stateErr)
	a.log.Info("down: project removed", "volumes_removed", volumes)
	a.report(ctx, protocol.Report{Sha: resp.DesiredSha, Result: protocol.ResultDown})
	return nil
}
