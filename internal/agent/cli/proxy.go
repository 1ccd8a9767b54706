package cli

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
)

func newProxyCommand(g *cliDeps) *cobra.Command {
	return &cobra.Command{
		Use:   "proxy",
		Short: "Hold one ziti context and forward loopback ports to tenancy and OpenBao (monky-deployd-proxy.service)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runProxy(cmd.Context(), g))
		},
	}
}

// runProxy runs until SIGTERM/SIGINT (the context of main) and then shuts down cleanly.
func runProxy(ctx context.Context, g *cliDeps) error {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return err
	}
	log := slog.New(journal.New(g.stderr, cfg.SlogLevel()))
	opts := transportOptions(cfg, log)
	// The proxy always dials through the SDK: it is what a tick's `proxy` transport connects to.
	opts.Mode = "sdk"
	// The daemon holds the identity, so it renews it: once before it loads the identity, then
	// every interval_s, its dials moving to the renewed certificate without a restart.
	keeper := &proxyKeeper{cfg: cfg, log: log.With("env", cfg.EnvID), rn: newRenewer(cfg, log.With("env", cfg.EnvID), true)}
	keeper.recover(ctx) // before the context loads the identity; the first round follows at once
	reload := make(chan struct{}, 1)
	opts.Reload = reload
	go keeper.loop(ctx, cfg.Interval(), reload)
	err = transport.RunProxy(ctx, opts)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// proxyKeeper runs the proxy daemon's renewal rounds under the tick lock, so state.json and the
// identity file are never written by a tick and the daemon at once.
type proxyKeeper struct {
	cfg *config.Config
	log *slog.Logger
	rn  *identity.Renewer
}

// loop runs a round every interval until ctx ends; a round that changed the identity's
// certificate asks the proxy to reload it.
func (k *proxyKeeper) loop(ctx context.Context, every time.Duration, reload chan<- struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		if k.round(ctx) {
			select {
			case reload <- struct{}{}:
			default: // one pending reload reads the file as it is by then
			}
		}
	}
}

// recover settles a renewal a killed daemon left, before the proxy loads the identity. It waits
// for a tick holding the lock: the identity must be settled before anything dials with it.
func (k *proxyKeeper) recover(ctx context.Context) {
	if _, err := os.Lstat(k.rn.PendingPath()); err != nil {
		return // nothing half done: no lock, no state read
	}
	if err := os.MkdirAll(k.cfg.StateDir, 0o700); err != nil {
		k.log.Warn("identity: state dir unusable; the half-done renewal waits", "error", err.Error())
		return
	}
	release, err := waitLock(ctx, k.cfg.LockPath())
	if err != nil {
		k.log.Warn("identity: tick lock not taken; the half-done renewal waits for the next round", "error", err.Error())
		return
	}
	defer release()
	st, err := state.Load(k.cfg.StatePath())
	save := func() error { return state.Save(k.cfg.StatePath(), st) }
	if err != nil {
		st, save = &state.State{}, func() error { return nil }
	}
	_ = k.rn.Recover(ctx, st, save)
}

// round settles and renews the identity once, skipping when a tick holds the lock; it reports
// whether the certificate in the identity file changed.
func (k *proxyKeeper) round(ctx context.Context) (changed bool) {
	before := k.fingerprint()
	if err := os.MkdirAll(k.cfg.StateDir, 0o700); err != nil {
		k.log.Warn("identity: state dir unusable; no renewal this round", "error", err.Error())
		return false
	}
	release, ok, err := state.TryLock(k.cfg.LockPath())
	switch {
	case err != nil:
		k.log.Warn("identity: tick lock unusable; no renewal this round", "error", err.Error())
		return false
	case !ok:
		k.log.Debug("identity: a tick holds the lock; the renewal waits for the next round")
		return false
	}
	defer release()
	st, err := state.Load(k.cfg.StatePath())
	if err != nil {
		k.log.Debug("identity: state.json unreadable (the next tick moves it aside); no renewal this round", "error", err.Error())
		return false
	}
	save := func() error { return state.Save(k.cfg.StatePath(), st) }
	_ = k.rn.Recover(ctx, st, save)
	_, _ = k.rn.Renew(ctx, st, save)
	return k.fingerprint() != before
}

func (k *proxyKeeper) fingerprint() string {
	f, err := k.rn.Read()
	if err != nil {
		return ""
	}
	return f.Leaf().Fingerprint
}

// waitLock takes the tick lock, waiting for a tick that holds it (a tick of the proxy transport
// gets nowhere while the proxy does not listen, so it ends soon).
func waitLock(ctx context.Context, path string) (func(), error) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		release, ok, err := state.TryLock(path)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return release, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}
