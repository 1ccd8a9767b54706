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
// fetching, judging or leasing.

// repeatRefusal reports a remembered refusal of the desired sha as this tick's: the same
// journal line and the same report as when it was judged.
func (a *Agent) repeatRefusal(ctx context.Context, r *state.RefusedSha) error {
	a.log.Error("refused: " + r.Detail + " (judged " + r.At.UTC().Format("2006-01-02T15:04:05Z") + "; not fetched again)")
	a.record(r.Sha, protocol.ResultRefused, r.Detail)
	a.report(ctx, protocol.Report{Sha: r.Sha, Result: protocol.ResultRefused, Detail: r.Detail})
	return fmt.Errorf("%w: %s", ErrRefused, r.Detail)
}

// rememberRefusal keeps a compose judgement's refusal of sha in state (saved with the refusal's
// own record). Any other error is not a verdict on the bundle and is not remembered.
func (a *Agent) rememberRefusal(sha string, err error) {
	var r *protocol.Refusal
	if !errors.As(err, &r) || (r.Code != protocol.CodeBundleInvalid && r.Code != protocol.CodePrivileged) {
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
