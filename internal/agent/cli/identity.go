package cli

import (
	"context"
	"log/slog"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
)

// sessionCaches lists the files holding a controller session opened with the identity's
// certificate; a verified renewal deletes them. None needs it: the sdk transport's kept session
// (transport/session.go) is keyed by the certificate's fingerprint, so a renewed certificate
// never reuses it and authenticates anew by itself.
func sessionCaches(*config.Config) []string { return nil }

// newRenewer is the keeper of cfg's identity, for a tick or (inProxy) the proxy daemon.
func newRenewer(cfg *config.Config, log *slog.Logger, inProxy bool) *identity.Renewer {
	run := runner.Exec{}
	return &identity.Renewer{
		Path: cfg.Identity,
		Who: identity.Who{
			Transport: cfg.Transport, Window: cfg.IdentityRenewBelow(), InProxy: inProxy,
			TunnellerActive: func(ctx context.Context) (bool, error) {
				return systemd.Probe{Runner: run}.UnitActive(ctx, identity.TunnellerUnit)
			},
		},
		Controller: transport.Extender{Timeout: cfg.Tenancy.Timeout()},
		Now:        time.Now,
		Log:        log,
		Forget:     sessionCaches(cfg),
	}
}

// recoverIdentity settles a renewal a killed process left, before the transport loads the
// identity (the tick's own Recover is then a no-op). An unreadable state.json is the tick's to
// move aside: the recovery then goes by the files alone and saves nothing.
// The state is read only when the agent renews the identity.
func recoverIdentity(ctx context.Context, cfg *config.Config, rn *identity.Renewer) {
	_ = rn.RecoverLoading(ctx, func() (*state.State, func() error) {
		st, err := state.Load(cfg.StatePath())
		if err != nil {
			return &state.State{}, func() error { return nil }
		}
		return st, func() error { return state.Save(cfg.StatePath(), st) }
	})
}
