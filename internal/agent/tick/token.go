package tick

import (
	"errors"
	"fmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// files are the token's files in state_dir.
func (a *Agent) files() token.Files { return token.In(a.cfg) }

// tokenSession hands the tick's state, clients and crash points to the token for this tick.
func (a *Agent) tokenSession() *token.Session {
	return token.NewSession(token.Tick{
		Cfg: a.cfg, Log: a.log, Redact: a.redact, St: a.st, Vault: &a.vault,
		NewBao: func(addr string) (token.Bao, error) { return a.deps.NewBao(addr) },
		Lease:  a.deps.Tenancy.Lease, Now: a.deps.Now, Step: a.step, Save: a.saveState,
		Classify: a.classify, Temporary: isTemporary, Kit: a.kitRerun,
	})
}

// kitRerun: a kit re-run is a fresh start, so a failing sha gets its next try now.
func (a *Agent) kitRerun() {
	if bo := a.st.Backoff; bo != nil && !bo.RevertPending && !a.failedThisTick {
		a.log.Info(fmt.Sprintf("kit re-run: backoff of %s reset; the next apply tries it at once", protocol.ShortSha(bo.Sha)))
		a.st.Backoff = nil
	}
	// So does a disk refusal (space may have been freed); a compose refusal is the bundle's and stays.
	if r := a.st.Refused; r != nil && r.Code == protocol.CodeDisk {
		a.log.Info(fmt.Sprintf("kit re-run: disk refusal of %s forgotten; the next apply judges it again", protocol.ShortSha(r.Sha)))
		a.st.Refused = nil
	}
}

// classify maps a client error onto the tick's sentinels, leaving others as they are.
func (a *Agent) classify(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tenancy.ErrEnvMismatch):
		a.log.Error("AGENT_ENV_MISMATCH: the token belongs to another env than config env_id; fix the config or re-issue the identity", "env_id", a.cfg.EnvID)
		return fmt.Errorf("%w: %w", err, ErrEnvMismatch)
	case errors.Is(err, tenancy.ErrNotTenancy):
		// An ingress or auth proxy answering for tenancy: the token is not the question; try next tick.
		var ae *tenancy.APIError
		errors.As(err, &ae)
		a.log.Warn("tenancy call refused by something that is not tenancy (no AGENT_* code); the token is kept and the next tick retries",
			"call", what, "status", ae.Status, "body", ae.FirstLine)
		return fmt.Errorf("%w: %w", err, ErrTemporary)
	case isTemporary(err):
		a.log.Warn("temporary network failure", "call", what, "error", a.redact.Redact(err.Error()))
		return fmt.Errorf("%w: %w", err, ErrTemporary)
	}
	return err
}

func isTemporary(err error) bool {
	if errors.Is(err, transport.ErrUnmapped) || errors.Is(err, transport.ErrServiceNotVisible) {
		// The mesh answered, or no route exists (e.g. a missing #monky-deploy-agent attribute): retrying
		// will not help, and exit 75 would hide the box from `systemctl --failed`.
		return false
	}
	return errors.Is(err, tenancy.ErrTemporary) || errors.Is(err, bao.ErrTemporary) || errors.Is(err, ErrTemporary)
}
