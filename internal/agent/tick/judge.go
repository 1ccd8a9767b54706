package tick

import (
	"context"
	"errors"
	"fmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// The compose judgement runs pre-lease on the shipped file and on the rendered release's `compose
// config` before any pull; refusals (disk ones with free space) are remembered by sha.

// repeatRefusal reports a remembered refusal as this tick's, same journal line and report.
func (a *Agent) repeatRefusal(ctx context.Context, r *state.RefusedSha) error {
	why := "not fetched again"
	if r.Code == protocol.CodeDisk {
		why = "free space unchanged, not fetched again"
	}
	a.log.Error("refused: " + r.Detail + " (judged " + r.At.UTC().Format("2006-01-02T15:04:05Z") + "; " + why + ")")
	if f := a.st.LastFailure; f == nil || f.Sha != r.Sha {
		a.noteFailure(r.Sha, r.Code, r.Detail) // a repeat is no new attempt
	}
	a.record(r.Sha, protocol.ResultRefused, r.Detail)
	a.report(ctx, protocol.Report{Sha: r.Sha, Result: protocol.ResultRefused, Detail: r.Detail})
	return fmt.Errorf("%w: %s", ErrRefused, r.Detail)
}

// refusalLapsed says why a remembered refusal must be judged again, "" when it stands: compose
// verdicts always, disk ones while free space (DiskChanged), config and need are unchanged.
func (a *Agent) refusalLapsed(r *state.RefusedSha) string {
	if r.Code != protocol.CodeDisk {
		return ""
	}
	if a.st.DockerRootDir == "" {
		return "docker's data-root is not known"
	}
	free, measured, err := a.deps.Disk.Tightest(a.cfg.StoragePaths(a.st.DockerRootDir))
	switch {
	case err != nil:
		return "free space not measured: " + err.Error()
	case a.diskRequired(r.NeedBytes) != r.RequiredBytes:
		return "the disk config changed"
	case free >= r.RequiredBytes:
		return fmt.Sprintf("image storage now has %d MiB free", mib(free))
	}
	return r.DiskChanged(diskFrees(measured))
}

// rememberRefusal keeps a compose or disk refusal of sha in state; other errors are no verdict.
func (a *Agent) rememberRefusal(sha string, err error) {
	var r *protocol.Refusal
	if !errors.As(err, &r) || (r.Code != protocol.CodeBundleInvalid && r.Code != protocol.CodePrivileged && r.Code != protocol.CodeDisk) {
		return
	}
	a.st.Refused = &state.RefusedSha{
		Sha: sha, Code: r.Code, Detail: a.redact.Redact(r.Error()),
		At: a.deps.Now().UTC(), AgentVersion: version.Version,
	}
}

// judgeRendered runs the post-render judgement in dir. A failing `compose config` is a failure,
// not a verdict; its error carries compose's stderr only, never the rendered file.
func (a *Agent) judgeRendered(ctx context.Context, b *bundle.Bundle, dir string) error {
	out, err := a.deps.Docker.Config(ctx, dir, b.Meta.ComposeFile)
	if err != nil {
		return err
	}
	err = bundle.JudgeRendered(out, b.Meta.ComposeFile, dir, a.cfg.ComposeProject, b.Meta.Agent.AllowPrivileged, a.judgeHost(), a.redact)
	clear(out)
	if err != nil {
		a.rememberRefusal(b.Sha, err)
		return err
	}
	a.log.Info("rendered compose file judged", "allow_privileged", b.Meta.Agent.AllowPrivileged)
	return nil
}
