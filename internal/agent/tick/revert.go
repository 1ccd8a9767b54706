package tick

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// A failed deploy reverts to the release that ran before, and the failing sha backs off (2 min, 4,
// 8, … at most an hour) rather than recreating unhealthy containers every minute.

// applyAttempt is this tick's apply: its failure backs off, and after the promote also reverts.
type applyAttempt struct {
	sha      string
	b        *bundle.Bundle // nil until the bundle parsed
	promoted bool           // `current` may point at sha: the box changed
	// autoRevert is the bundle's agent.auto_revert when b is nil (an apply a killed tick left).
	autoRevert *bool
}

// bundleAutoRevert is the bundle's agent.auto_revert, nil when it did not set one.
func (at *applyAttempt) bundleAutoRevert() *bool {
	if at.b != nil {
		return at.b.Meta.Agent.AutoRevert
	}
	return at.autoRevert
}

// holdBackoff says whether the desired sha is still backing off; the end of a backoff is logged.
func (a *Agent) holdBackoff(resp *protocol.CheckinResponse) bool {
	bo := a.st.Backoff
	if bo == nil || bo.Sha != resp.DesiredSha {
		return false
	}
	now := a.deps.Now().UTC()
	if a.st.BackingOff(resp.DesiredSha, now) {
		return true
	}
	a.log.Info(fmt.Sprintf("backoff over: trying %s again (attempt %d)", protocol.ShortSha(bo.Sha), bo.Attempts+1))
	return false
}

// forgetBackoff drops the backoff of a sha tenancy no longer wants (new sha, `none`, retire).
func (a *Agent) forgetBackoff(resp *protocol.CheckinResponse) {
	bo := a.st.Backoff
	if bo == nil {
		return
	}
	switch {
	case resp.Action == protocol.ActionApply && bo.Sha == resp.DesiredSha, bo.RevertPending && resp.Action != protocol.ActionDown:
		return
	case resp.Action == protocol.ActionDown:
		a.log.Info(fmt.Sprintf("backoff of %s dropped: the env is retired", protocol.ShortSha(bo.Sha)))
	case resp.Action == protocol.ActionNone:
		a.log.Info(fmt.Sprintf("backoff of %s dropped: tenancy has nothing to apply", protocol.ShortSha(bo.Sha)))
	default:
		a.log.Info(fmt.Sprintf("backoff of %s dropped: desired is now %s", protocol.ShortSha(bo.Sha), protocol.ShortSha(resp.DesiredSha)))
	}
	a.st.Backoff = nil
	a.saveOrWarn()
}

// backingOff is a tick while the desired sha waits: a heartbeat of what runs, exit 1.
func (a *Agent) backingOff(ctx context.Context, resp *protocol.CheckinResponse) error {
	bo := a.st.Backoff
	now := a.deps.Now().UTC()
	note := BackoffNote(bo, now)
	a.log.Warn("backoff: " + note)
	if err := a.heartbeat(ctx, resp, note); err != nil {
		return err
	}
	return fmt.Errorf("%w: %s", ErrFailed, note)
}

// BackoffNote renders a backoff for the journal and `status`: `9f3e21d07a1b failed 3×, reverted
// to 7a10c4e2d9b1 (healthy); next try at 2026-12-02T10:08:00Z (in 8m0s)`.
func BackoffNote(bo *state.DeployBackoff, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed %d×", protocol.ShortSha(bo.Sha), bo.Attempts)
	switch {
	case bo.RevertedTo != "" && bo.RevertHealthy != nil:
		fmt.Fprintf(&b, ", reverted to %s (%s)", protocol.ShortSha(bo.RevertedTo), healthWord(*bo.RevertHealthy))
	case bo.RevertedTo != "":
		fmt.Fprintf(&b, ", reverting to %s", protocol.ShortSha(bo.RevertedTo))
	case bo.NoRevert != "":
		fmt.Fprintf(&b, ", not reverted: %s", bo.NoRevert)
	}
	left := max(bo.NextAttemptAt.Sub(now), 0).Round(time.Second)
	fmt.Fprintf(&b, "; next try at %s (in %s)", bo.NextAttemptAt.UTC().Format(time.RFC3339), left)
	return b.String()
}

func healthWord(ok bool) string {
	if ok {
		return "healthy"
	}
	return "unhealthy"
}

// failApply enters the backoff, reverts when the failure came after the promote, and reports
// `failed`. The revert target is saved first so a killed tick's successor finishes it.
func (a *Agent) failApply(ctx context.Context, at *applyAttempt, code, detail, logTail string, cs []protocol.Container) error {
	a.attempt = nil // what fails from here on is the revert, not another attempt
	a.failedThisTick = true
	a.st.Applying = nil
	bo := a.st.NoteDeployFailure(at.sha, a.deps.Now())
	if at.promoted {
		bo.RevertedTo, bo.NoRevert = a.revertTarget(at)
		bo.RevertPending = bo.RevertedTo != ""
	}
	a.st.LastSha, a.st.LastResult, a.st.LastDetail = at.sha, protocol.ResultFailed, a.cutDetail(detail)
	a.noteFailure(at.sha, code, detail)
	a.st.CountOutcome(protocol.ResultFailed)
	a.saveOrWarn()
	if err := a.step("failed"); err != nil {
		return err
	}
	r := protocol.Report{Sha: at.sha, Result: protocol.ResultFailed, Detail: detail, LogTail: logTail, Containers: cs}
	if bo.RevertedTo != "" {
		if err := a.revert(ctx); err != nil {
			return err
		}
		r.RevertedTo, r.RevertHealthy = bo.RevertedTo, bo.RevertHealthy
	} else if bo.NoRevert != "" {
		a.log.Warn("not reverted: " + bo.NoRevert)
	}
	a.log.Warn("backoff: " + BackoffNote(bo, a.deps.Now().UTC()))
	r.Detail = withRevert(detail, bo)
	a.st.LastDetail = a.cutDetail(r.Detail)
	a.saveOrWarn()
	a.report(ctx, r)
	return fmt.Errorf("%w: %s", ErrFailed, detail)
}

// withRevert appends what the revert did to the detail, for tenancies that ignore reverted_to.
func withRevert(detail string, bo *state.DeployBackoff) string {
	switch {
	case bo.RevertedTo != "" && bo.RevertHealthy != nil:
		return fmt.Sprintf("%s; reverted to %s (%s)", detail, protocol.ShortSha(bo.RevertedTo), healthWord(*bo.RevertHealthy))
	case bo.NoRevert != "":
		return detail + "; not reverted: " + bo.NoRevert
	}
	return detail
}

// revertTarget is the release to bring back, or why there is none. The bundle's
// agent.auto_revert beats the config's: a release whose migration cannot run backwards says so.
func (a *Agent) revertTarget(at *applyAttempt) (target, why string) {
	auto, src := a.cfg.AutoRevert, "config auto_revert is false"
	if ar := at.bundleAutoRevert(); ar != nil {
		auto, src = *ar, "bundle.json agent.auto_revert is false"
	}
	prev := a.st.AppliedSha
	switch {
	case !auto:
		return "", src + "; the failed release is left as it is"
	case prev == "":
		return "", "no release ran before this one; the failed release is left as it is"
	case prev == at.sha:
		return "", "the failed release is the one that ran before"
	}
	if fi, err := os.Stat(release.Dir(a.cfg.EnvDir(), prev)); err != nil || !fi.IsDir() {
		return "", "release " + protocol.ShortSha(prev) + " is no longer on disk; the failed release is left as it is"
	}
	return prev, ""
}

// revert brings st.Backoff.RevertedTo back; an error (crash, cancel) leaves the revert pending.
func (a *Agent) revert(ctx context.Context) error {
	bo := a.st.Backoff
	target := bo.RevertedTo
	envDir := a.cfg.EnvDir()
	dir := release.Dir(envDir, target)
	healthy, why := false, ""
	meta, refusal := a.judgeRelease(ctx, dir, target)
	if refusal != "" {
		return a.revertRefused(ctx, refusal)
	}
	if err := a.step("revert-judged"); err != nil {
		return err
	}
	if err := release.Promote(envDir, target); err != nil {
		why = err.Error()
	} else {
		if err := a.step("revert-promote"); err != nil {
			return err
		}
		var cs []protocol.Container
		var err error
		if healthy, why, cs, err = a.runRelease(ctx, dir, meta, "revert"); err != nil {
			return err
		}
		a.learnRelease(target, cs, meta.Agent.DriftCorrection)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("revert to %s interrupted: %w", protocol.ShortSha(target), err)
	}
	bo.RevertPending = false
	bo.RevertHealthy = &healthy
	// The wait counts from the end of the failing tick, whose revert may have waited for health.
	bo.NextAttemptAt = a.deps.Now().UTC().Add(state.BackoffDelay(bo.Attempts))
	a.saveOrWarn()
	if healthy {
		a.log.Info("reverted to " + protocol.ShortSha(target) + ": healthy")
	} else {
		a.log.Error("reverted to " + protocol.ShortSha(target) + " but it is not healthy: " + a.redact.Redact(why))
	}
	return a.step("reverted")
}

// revertRefused gives up a revert whose release fails the judgement; the failed release stays.
func (a *Agent) revertRefused(ctx context.Context, refusal string) error {
	bo := a.st.Backoff
	target := bo.RevertedTo
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("revert to %s interrupted: %w", protocol.ShortSha(target), err)
	}
	envDir := a.cfg.EnvDir()
	if cur, _, _ := release.Current(envDir); cur == target {
		if err := release.Promote(envDir, bo.Sha); err != nil {
			a.log.Warn("current not pointed back at the failed release", "error", err.Error())
		}
	}
	bo.RevertedTo, bo.RevertPending, bo.RevertHealthy = "", false, nil
	bo.NoRevert = a.redact.Redact("release " + protocol.ShortSha(target) + " refused: " + refusal)
	bo.NextAttemptAt = a.deps.Now().UTC().Add(state.BackoffDelay(bo.Attempts))
	a.saveOrWarn()
	a.log.Error("not reverted: " + bo.NoRevert)
	return a.step("reverted")
}

// judgeRelease re-judges the release in dir from disk, as its apply was judged: a container could
// have rewritten it. Only applied_files are read (older agents: whole dir, strictly). The judged
// meta is what the revert then runs by, so bundle.json is not read again unverified.
func (a *Agent) judgeRelease(ctx context.Context, dir, sha string) (bundle.Meta, string) {
	var files map[string]string
	var err error
	if staged := a.st.StagedFiles(sha); staged != nil {
		files, err = readStaged(dir, staged)
	} else {
		files, err = readRelease(dir)
	}
	if err != nil {
		return bundle.Meta{}, err.Error()
	}
	b, err := bundle.Parse(files, sha)
	if err != nil {
		return bundle.Meta{}, "changed on disk since it was applied: " + err.Error()
	}
	if err := b.Check(dir, a.cfg.ComposeProject, a.judgeHost()); err != nil {
		return bundle.Meta{}, err.Error()
	}
	out, err := a.deps.Docker.Config(ctx, dir, b.Meta.ComposeFile)
	if err != nil {
		return bundle.Meta{}, "compose config: " + err.Error()
	}
	err = bundle.JudgeRendered(out, b.Meta.ComposeFile, dir, a.cfg.ComposeProject, b.Meta.Agent.AllowPrivileged, a.judgeHost(), a.redact)
	clear(out)
	if err != nil {
		return bundle.Meta{}, err.Error()
	}
	return b.Meta, ""
}

// maxReleaseBytes caps a release read-back: a bundle (tenancy caps 16 MiB) plus its .env.
const maxReleaseBytes = 16 << 20

// readRelease reads a release but its .env via os.Root; a non-regular, non-directory entry errors.
func readRelease(dir string) (map[string]string, error) {
	return readReleaseFiles(dir, func(root *os.Root, read func(p string, want fs.FileInfo) error) error {
		return fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir():
				return nil
			case !d.Type().IsRegular():
				return fmt.Errorf("%s is not a regular file (%s)", p, d.Type())
			case p == ".env":
				return nil
			}
			return read(p, nil)
		})
	})
}

// readStaged reads the staged files through an os.Root; a staged path that is now anything but
// directories to a regular file, or a .env that is not regular, is an error.
func readStaged(dir string, staged []string) (map[string]string, error) {
	return readReleaseFiles(dir, func(root *os.Root, read func(p string, want fs.FileInfo) error) error {
		if _, err := release.CheckStaged(root, release.EnvFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, p := range staged {
			fi, err := release.CheckStaged(root, p)
			if err != nil {
				return err
			}
			if err := read(p, fi); err != nil {
				return err
			}
		}
		return nil
	})
}

// readReleaseFiles collects what pick reads (≤ maxReleaseBytes); a pick error: the release changed.
func readReleaseFiles(dir string, pick func(root *os.Root, read func(p string, want fs.FileInfo) error) error) (map[string]string, error) {
	root, err := release.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("release directory: %w", err)
	}
	defer root.Close()
	files := map[string]string{}
	total := 0
	err = pick(root, func(p string, want fs.FileInfo) error {
		raw, err := readRegular(root, p, maxReleaseBytes-total, want)
		if err != nil {
			return err
		}
		total += len(raw)
		files[p] = string(raw)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("changed on disk since it was applied: %w", err)
	}
	return files, nil
}

// readRegular reads regular file p, at most limit bytes, opening non-blocking so a swapped-in FIFO
// cannot hang the tick; want, when set, must be the file opened.
func readRegular(root *os.Root, p string, limit int, want fs.FileInfo) ([]byte, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := capread.Regular(f, int64(limit), fmt.Errorf("holds more than %d MiB", maxReleaseBytes>>20), func(fi fs.FileInfo) error {
		if want != nil && !os.SameFile(fi, want) {
			return fmt.Errorf("%s was replaced while it was read", p)
		}
		return nil
	})
	var notRegular *capread.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, fmt.Errorf("%s is %w", p, err)
	}
	return raw, err
}

// runRelease brings up the release in dir that judgeRelease just judged, as a revert and a drift
// correction do: images pulled only where missing (they are normally local), `up`, the health
// wait. It says whether it came up healthy, else why, and the containers the last look saw (none
// when `up` failed); err is only a stop (a crash step, a cancel). step names the caller's steps.
func (a *Agent) runRelease(ctx context.Context, dir string, meta bundle.Meta, step string) (healthy bool, why string, cs []protocol.Container, err error) {
	d := a.deps.Docker
	file := meta.ComposeFile
	timeout := time.Duration(cmp.Or(meta.Agent.HealthyTimeoutS, a.cfg.HealthyTimeoutS)) * time.Second
	if err := d.Pull(ctx, dir, file, bundle.PullMissing); err != nil {
		// A missing image the registry will not give is up's failure, in compose's words.
		a.log.Warn(step+": pulling missing images failed", "error", a.redact.Redact(err.Error()))
	}
	if err := d.Up(ctx, dir, file); err != nil {
		return false, "compose up: " + err.Error(), nil, nil
	}
	if err := a.step(step + "-up"); err != nil {
		return false, "", nil, err
	}
	ok, cs, werr := d.WaitHealthy(ctx, dir, file, timeout, a.deps.Sleep)
	if err := a.step(step + "-healthy"); err != nil {
		return false, "", nil, err
	}
	switch {
	case werr != nil && !ok:
		return false, "waiting for health: " + werr.Error(), cs, nil
	case !ok:
		return false, fmt.Sprintf("not healthy after %s: %s", timeout, strings.Join(compose.Unready(cs), ", ")), cs, nil
	}
	// `up` returns as containers start: one that dies at once can still look running (its
	// health not known yet) at the first look, and a crash loop would pass for corrected. A
	// second look one poll later must agree.
	if err := a.sleep(ctx, compose.DefaultPollInterval); err != nil {
		return false, "", nil, err
	}
	if again, err := d.Ps(ctx, dir, file); err == nil {
		cs = again
		if !compose.AllReady(cs) {
			return false, fmt.Sprintf("ready, then not %s later: %s", compose.DefaultPollInterval, strings.Join(compose.Unready(cs), ", ")), cs, nil
		}
	}
	return true, "", cs, nil
}

// sleep is Deps.Sleep, or a real cancellable pause.
func (a *Agent) sleep(ctx context.Context, d time.Duration) error {
	if a.deps.Sleep != nil {
		return a.deps.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// finishKilledApply counts an apply a killed tick left after `compose up` as failed, and reverts.
func (a *Agent) finishKilledApply(ctx context.Context) error {
	ap := a.st.Applying
	detail := "the tick was killed during compose up or the wait for health (started " + ap.StartedAt.UTC().Format(time.RFC3339) + ")"
	a.log.Error("failed: " + protocol.ShortSha(ap.Sha) + ": " + detail)
	a.attempt = &applyAttempt{sha: ap.Sha, promoted: true, autoRevert: ap.AutoRevert}
	defer func() { a.attempt = nil }()
	return a.failApply(ctx, a.attempt, protocol.FailKilled, detail, "", nil)
}

// finishRevert completes a revert a killed tick left pending and sends the failure report it owed.
func (a *Agent) finishRevert(ctx context.Context) error {
	bo := a.st.Backoff
	a.log.Warn("a revert to " + protocol.ShortSha(bo.RevertedTo) + " was interrupted; finishing it")
	if err := a.revert(ctx); err != nil {
		return err
	}
	detail := withRevert(a.st.LastDetail, bo)
	if a.st.LastSha != bo.Sha || a.st.LastResult != protocol.ResultFailed {
		detail = withRevert("apply failed", bo)
	}
	a.st.LastDetail = a.cutDetail(detail)
	a.saveOrWarn()
	a.report(ctx, protocol.Report{Sha: bo.Sha, Result: protocol.ResultFailed, Detail: detail,
		RevertedTo: bo.RevertedTo, RevertHealthy: bo.RevertHealthy})
	return nil
}
