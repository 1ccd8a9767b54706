package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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
			id := tickID(g.getenv)
			return withTick(exit(runTick(cmd.Context(), opts, g, id)), id)
		},
	}
	cmd.Flags().BoolVar(&opts.prune, "prune", false, "after a successful apply, also prune dangling images (old releases go after every successful apply)")
	return cmd
}

// TickIDEnv carries a root tick's id into its re-run as state_dir's owner: one tick, one id.
const TickIDEnv = "MONKY_DEPLOYD_TICK_ID"

// tickID is the id a re-run inherited (TickIDEnv), else a new one: 12 hex digits, short enough
// for a table and a grep, random enough that two ticks of one box never share one.
func tickID(getenv func(string) string) string {
	if id := getenv(TickIDEnv); validTickID(id) {
		return id
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24)
	return hex.EncodeToString(b[:])
}

func validTickID(id string) bool {
	if len(id) != 12 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// withTick makes the tick's last line (`monky-deployd: …`) end in its tick id, like every other.
func withTick(err error, id string) error {
	var ee *exitError
	if errors.As(err, &ee) {
		ee.tickID = id
	}
	return err
}

// runTick runs one tick and, whatever came of it, writes the metrics textfile: a tick that
// cannot work is still seen. Every journal line it writes ends in tick_id=<id>.
func runTick(ctx context.Context, opts tickOptions, g *cliDeps, id string) (err error) {
	start := time.Now()
	cfg, err := config.Load(g.configPath)
	if err != nil {
		log := slog.New(journal.New(g.stderr, slog.LevelInfo).WithTick(id))
		writeTickMetrics(log, tickRecord{start: start, err: err})
		return err
	}
	log := slog.New(journal.New(g.stderr, cfg.SlogLevel()).WithTick(id))
	rec := tickRecord{cfg: cfg, start: start}
	defer func() {
		rec.err = err
		if !rec.ran {
			// Another tick holds the lock (or state_dir is unusable): state.json is only read.
			writeTickMetrics(log.With("env", cfg.EnvID), rec)
		}
	}()
	if err := asStateOwner(g.proc, cfg, log, g.args, "tick", id); err != nil {
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
		return tick.New(cfg, deps, tick.Options{TickID: id}).RunForeign(ctx, f)
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
		rec.agent = tick.New(cfg, deps, tick.Options{Prune: opts.prune, TickID: id})
		return rec.agent.Run(ctx)
	})
}
