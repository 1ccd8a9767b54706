package tick

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// Foreign is what under state_dir the agent does not own, and the account name for the chown.
type Foreign struct {
	Files     []state.ForeignFile
	Truncated bool
	User      string
}

// Detail names every foreign file with its owner, and the one command that gives them all back.
func (f Foreign) Detail(stateDir string) string {
	names := make([]string, len(f.Files))
	for i, ff := range f.Files {
		rel, err := filepath.Rel(stateDir, ff.Path)
		if err != nil || rel == "." {
			rel = ff.Path
		}
		names[i] = fmt.Sprintf("%s (uid %d)", rel, ff.UID)
	}
	more := ""
	if f.Truncated {
		more = " and more"
	}
	return fmt.Sprintf("state_dir %s holds files %s does not own, left by a tick run as another user: %s%s; fix: sudo chown -hR %s:%s %s",
		stateDir, f.User, strings.Join(names, ", "), more, f.User, f.User, stateDir)
}

// RunForeign is the tick when state_dir holds files the agent does not own: repair nothing, lock
// nothing, report `failed` naming the files and the chown; exit 1.
func (a *Agent) RunForeign(ctx context.Context, f Foreign) error {
	if a.deps.Redact == nil {
		return errNoRedactor
	}
	a.redact = a.deps.Redact
	detail := f.Detail(a.cfg.StateDir)
	a.log.Error("failed: " + detail)
	st, err := state.Load(a.cfg.StatePath())
	if err != nil {
		a.log.Warn("state unreadable; checking in without it", "error", err.Error())
		st = &state.State{}
	}
	a.st = st
	tok, err := token.Read(a.files().Token)
	if err != nil || tok.Reveal() == "" {
		why := "no token"
		if err != nil {
			why = err.Error()
		}
		return fmt.Errorf("%w: %s; tenancy cannot be told: %s", ErrFailed, detail, why)
	}
	a.redact.Add(tok.Reveal())
	req := a.checkinRequest(ctx)
	req.LastResult = protocol.ResultFailed
	if _, err := a.deps.Tenancy.Checkin(ctx, tok, req); err != nil {
		a.log.Warn("check-in failed", "error", a.redact.Redact(err.Error()))
	}
	r := protocol.Report{EnvID: a.cfg.EnvID, AgentVersion: version.Version, Sha: a.st.AppliedSha,
		Result: protocol.ResultFailed, Detail: a.cutDetail(detail), Containers: []protocol.Container{}}
	if err := a.deps.Tenancy.Report(ctx, tok, r); err != nil {
		a.log.Warn("report not delivered", "result", r.Result, "error", a.redact.Redact(err.Error()))
	}
	return fmt.Errorf("%w: %s", ErrFailed, detail)
}
