package agent

import (
	"context"
	"errors"
	"fmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/version"
)

// The compose judgement (docs/PROTOCOL.md, refusals) runs twice: before any lease on the file as
// the bundle ships it (checkBundle), and after the .env is rendered, before anything is pulled,
// on what `docker compose config` makes of the staged release. A bundle either refused is
// remembered by sha, so the ticks that are asked to apply it again repeat the verdict without
// fetching, judging or leasing. So is a disk refusal, with the free space it was judged on: it is
// repeated until that free space changes (refusalLapsed).

// repeatRefusal reports a remembered refusal of the desired sha as this tick's: the same
// journal line and the same report as when it was judged.
func (a *Agent) repeatRefusal(ctx context.Context, r *state.RefusedSha) error {
	why := "not fetched again"
	if r.Code == protocol.CodeDisk {
		why = "free space unchanged, not fetched again"
	}
	a.log.Error("refused: " + r.Detail + " (judged " + r.At.UTC().Format("2006-01-02T15:04:05Z") + "; " + why + ")")
	a.record(r.Sha, protocol.ResultRefused, r.Detail)
	a.report(ctx, protocol.Report{Sha: r.Sha, Result: protocol.ResultRefused, Detail: r.Detail})
	return fmt.Errorf("%w: %s", ErrRefused, r.Detail)
}

// refusalLapsed says why a remembered refusal must be judged again, "" when it stands. A
// compose judgement's verdict is a function of the bundle and the agent's policy: it stands. A
// disk refusal is a verdict on the box as it was: it stands while the same filesystems have
// about the same free space (state.RefusedSha.DiskChanged), the config asks the same and the
// tightest of them still does not hold what the bundle needs. Measuring costs a statfs per
// path; fetching and judging the bundle costs a tenancy round trip and `docker info`.
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

// rememberRefusal keeps a compose judgement's or the disk check's refusal of sha in state (saved
// with the refusal's own record). Any other error is not a verdict on the bundle and is not
// remembered.
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

// judgeRendered runs the post-render judgement in the staged release dir. A `compose config`
// that fails is a failure (the next tick tries again), not a verdict; its error carries compose's
// standard error only, never the rendered file.
func (a *Agent) judgeRendered(ctx context.Context, b *bundle.Bundle, dir string) error {
	out, err := a.deps.Docker.Config(ctx, dir, b.Meta.ComposeFile)
	if err != nil {
		return err
	}
	err = bundle.JudgeRendered(out, b.Meta.ComposeFile, dir, a.cfg.ComposeProject, b.Meta.Agent.AllowPrivileged)
	clear(out)
	if err != nil {
		a.rememberRefusal(b.Sha, err)
		return err
	}
	a.log.Info("rendered compose file judged", "allow_privileged", b.Meta.Agent.AllowPrivileged)
	return nil
}
