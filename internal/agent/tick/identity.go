package tick

import (
	"context"
	"errors"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// Identity keeps the ziti identity's certificate (identity.Renewer). Recover settles a renewal a
// killed process left and runs before anything dials; Read reads the file for the check-in's
// identity_not_after; Renew renews when due, after the tick's work. Their failures are logged,
// recorded and retried by the Renewer, never the tick's: the only error they return is a stop
// asked for by a test's Step.
type Identity interface {
	Recover(ctx context.Context, st *state.State, save func() error) error
	Read() (*identity.File, error)
	Renew(ctx context.Context, st *state.State, save func() error) (identity.Outcome, error)
}

// recoverIdentity finishes or abandons a half-done renewal before the check-in dials.
func (a *Agent) recoverIdentity(ctx context.Context) error {
	if a.deps.Identity == nil {
		return nil
	}
	return a.identityStop(a.deps.Identity.Recover(ctx, a.st, a.saveState))
}

// identityNotAfter is the certificate's expiry for the check-in; zero when it cannot be read
// (a tunneller's identity the agent may not read, with transport system).
func (a *Agent) identityNotAfter() time.Time {
	if a.deps.Identity == nil {
		return time.Time{}
	}
	f, err := a.deps.Identity.Read()
	if err != nil {
		a.log.Debug("identity: not read; the check-in carries no identity_not_after", "error", err.Error())
		return time.Time{}
	}
	return f.Leaf().NotAfter
}

// renewIdentity renews the certificate once the tick's work is done, whatever its outcome, but
// not after a stop: a crash records nothing on its way out.
func (a *Agent) renewIdentity(ctx context.Context, tickErr error) error {
	var stop *stepStop
	if a.deps.Identity == nil || errors.As(tickErr, &stop) {
		return nil
	}
	_, err := a.deps.Identity.Renew(ctx, a.st, a.saveState)
	return a.identityStop(err)
}

// identityStop turns the Renewer's stop into the tick's own, so the tick records nothing more.
func (a *Agent) identityStop(err error) error {
	var stop *identity.StepStop
	if errors.As(err, &stop) {
		return &stepStop{name: stop.Name, err: stop.Err}
	}
	return err
}
