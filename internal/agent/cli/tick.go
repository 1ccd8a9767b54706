package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

type tickOptions struct {
	prune bool
}

func newTickCommand(g *cliDeps) *cobra.Command {
	var opts tickOptions
	cmd := &cobra.Command{
		Use:   "tick",
		Short: "Check in once and converge (what the systemd timer runs)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runTick(cmd.Context(), opts, g))
		},
	}
	cmd.Flags().BoolVar(&opts.prune, "prune", false, "after a successful apply, also prune dangling images (old releases go after every successful apply)")
	return cmd
}

// runTick runs one tick and, whatever came of it, writes the metrics textfile: a tick that
// cannot work is still seen.
func runTick(ctx context.Context, opts tickOptions, g *cliDeps) (err error) {
	start := time.Now()
	cfg, err := config.Load(g.configPath)
	if err != nil {
		log := slog.New(journal.New(g.stderr, slog.LevelInfo))
		writeTickMetrics(log, tickRecord{start: start, err: err})
		return err
	}
	log := slog.New(journal.New(g.stderr, cfg.SlogLevel()))
	rec := tickRecord{cfg: cfg, start: start}
	defer func() {
		rec.err = err
		if !rec.ran {
			// Another tick holds the lock (or state_dir is unusable): state.json is only read.
			writeTickMetrics(log.With("env", cfg.EnvID), rec)
		}
	}()
	if err := asStateOwner(g.proc, cfg, log, g.args, "tick"); err != nil {
		return err
	}
	if f, err := foreignFiles(g.proc, cfg); err != nil {
		log.Warn("could not check who owns the files under state_dir", "error", err.Error())
	} else if len(f.Files) > 0 {
		deps, closeFn, err := wire(cfg, log)
		if err != nil {
			log.Error(err.Error())
			return err
		}
		defer closeFn()
		return tick.New(cfg, deps, tick.Options{}).RunForeign(ctx, f)
	}
	// The lock first: a tick finding another running does nothing, not even load the identity.
	return tick.WithLock(cfg, log.With("env", cfg.EnvID), func() (err error) {
		rec.ran = true
		defer func() {
			rec.err = err
			writeTickMetrics(log.With("env", cfg.EnvID), rec)
		}()
		deps, closeFn, err := wire(cfg, log)
		if err != nil {
			log.Error(err.Error())
			return err
		}
		defer closeFn()
		rec.disk = deps.Disk
		rec.agent = tick.New(cfg, deps, tick.Options{Prune: opts.prune})
		return rec.agent.Run(ctx)
	})
}
