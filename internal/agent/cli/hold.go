package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

type holdOptions struct {
	reason string
	forD   string
	until  string
	// by is who asked, passed by a root run to its re-run as the agent's user (which no longer
	// knows SUDO_USER); hidden.
	by string
}

func newHoldCommand(g *cliDeps) *cobra.Command {
	var opts holdOptions
	cmd := &cobra.Command{
		Use:   "hold --reason TEXT [--for DURATION | --until TIME]",
		Short: "Make the agent wait: ticks check in and report, but apply, retire, revert and correct nothing",
		Long: "hold saves a hold in state.json (who, why, since, until): until it ends ticks still check in and\n" +
			"report, so the box is never silent, but nothing is applied, retired, reverted or corrected. A hold\n" +
			"lasts 4h unless --for or --until says otherwise, never more than 7 days, and ends by itself\n" +
			"(or with `monky-deployd unhold`). Run as root it acts as the agent's user, as `tick` does.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runHold(cmd.Context(), opts, g, time.Now()))
		},
	}
	cmd.Flags().StringVar(&opts.reason, "reason", "", "why the box must wait (required; one line, at most 200 characters; shown in the journal, status, doctor and fleetctl)")
	cmd.Flags().StringVar(&opts.forD, "for", "", "how long: a duration like 90m, 6h or 2d (default 4h, at most 7d)")
	cmd.Flags().StringVar(&opts.until, "until", "", "until when: RFC 3339 (2026-12-04T18:00:00Z) or local 2026-12-04 18:00 (at most 7 days ahead)")
	cmd.Flags().StringVar(&opts.by, "by", "", "")
	_ = cmd.Flags().MarkHidden("by")
	_ = cmd.MarkFlagRequired("reason")
	cmd.MarkFlagsMutuallyExclusive("for", "until")
	return cmd
}

func newUnholdCommand(g *cliDeps) *cobra.Command {
	return &cobra.Command{
		Use:   "unhold",
		Short: "End a hold: the next tick applies, retires, reverts and corrects again",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runUnhold(cmd.Context(), g, time.Now()))
		},
	}
}

// usageError is a bad flag value: exit 2, as cobra's own.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// holdUntil reads --for or --until against now: 4 h when neither, never more than 7 days.
func holdUntil(opts holdOptions, now time.Time) (time.Time, error) {
	switch {
	case opts.until != "":
		t, err := time.Parse(time.RFC3339, opts.until)
		if err != nil {
			t, err = time.ParseInLocation("2006-01-02 15:04", opts.until, time.Local)
		}
		if err != nil {
			return time.Time{}, usageError("hold: --until %q: want RFC 3339 (2026-12-04T18:00:00Z) or local 2026-12-04 18:00", opts.until)
		}
		switch {
		case !t.After(now):
			return time.Time{}, usageError("hold: --until %s is not in the future", t.Format(time.RFC3339))
		case t.Sub(now) < state.MinHold:
			return time.Time{}, usageError("hold: --until %s is less than a minute ahead; a hold lasts at least a minute", t.Format(time.RFC3339))
		case t.Sub(now) > state.MaxHold:
			return time.Time{}, usageError("hold: --until %s is more than 7 days ahead; a longer wait is a retire, or a hold renewed on purpose", t.Format(time.RFC3339))
		}
		return t, nil
	case opts.forD != "":
		d, err := parseHoldDuration(opts.forD)
		switch {
		case err != nil:
			return time.Time{}, usageError("hold: --for %q: want a duration like 90m, 6h or 2d", opts.forD)
		case d <= 0:
			return time.Time{}, usageError("hold: --for %s: want a positive duration", opts.forD)
		case d < state.MinHold:
			return time.Time{}, usageError("hold: --for %s is less than a minute; a hold lasts at least a minute", opts.forD)
		case d > state.MaxHold:
			return time.Time{}, usageError("hold: --for %s is more than 7 days; a longer wait is a retire, or a hold renewed on purpose", opts.forD)
		}
		return now.Add(d), nil
	}
	return now.Add(state.DefaultHold), nil
}

// parseHoldDuration is time.ParseDuration plus whole days ("2d").
func parseHoldDuration(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n > 7 || n < -7 {
			return 0, errors.New("not a number of days")
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// heldBy names who asks: sudo's caller, else the login user (the audit loginuid, which su and
// setuid keep), else the account running.
func heldBy(getenv func(string) string, p process) string {
	for _, who := range []string{getenv("SUDO_USER"), p.loginUser(), p.userName()} {
		if who != "" && state.CheckHoldText("by", who, state.MaxHoldBy) == nil {
			return who
		}
	}
	return "uid " + strconv.Itoa(p.euid())
}

func runHold(ctx context.Context, opts holdOptions, g *cliDeps, now time.Time) error {
	if err := state.CheckHoldText("--reason", opts.reason, state.MaxHoldReason); err != nil {
		return usageError("hold: %v", err)
	}
	until, err := holdUntil(opts, now)
	if err != nil {
		return err
	}
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return err
	}
	log := slog.New(journal.New(g.stderr, cfg.SlogLevel())).With("env", cfg.EnvID)
	by := opts.by
	if by == "" {
		by = heldBy(g.getenv, g.proc)
	}
	if err := state.CheckHoldText("by", by, state.MaxHoldBy); err != nil {
		return usageError("hold: %v", err)
	}
	args := g.args
	if opts.by == "" {
		args = append(append([]string{}, g.args...), "--by", by)
	}
	if err := asStateOwner(g.proc, cfg, log, args, "hold --reason …", ""); err != nil {
		return err
	}
	return withStateLock(ctx, cfg, g, func(st *state.State) (bool, error) {
		red, rerr := tick.SecretsOnDisk(cfg, st)
		if rerr != nil {
			// Not a refusal: an unreadable release must not stop a human's "wait"; but not silent.
			fmt.Fprintf(g.stderr, "monky-deployd: hold: the reason could not be checked against every secret of the release (%v); it was checked against what could be read\n", rerr)
		}
		if red.Redact(opts.reason) != opts.reason {
			return false, usageError("hold: --reason holds a secret the box keeps (a value of the release's .env, the registry credential or the agent's token); write it without")
		}
		if old := st.Hold; old.Active(now) {
			fmt.Fprintf(g.stdout, "replacing the hold %s\n", old.Note())
		}
		h := &state.Hold{Reason: opts.reason, By: by, Since: now.UTC().Truncate(time.Second), Until: until.UTC().Truncate(time.Second)}
		// What state.Load would refuse is never written: a refused state.json is moved aside
		// by the next tick, with everything it kept.
		if err := h.Check(); err != nil {
			return false, usageError("%v", err)
		}
		st.Hold = h
		fmt.Fprintf(g.stdout, "%s (%s from now)\nticks still check in and report; nothing is applied, retired, reverted or corrected until then or `monky-deployd unhold`\n",
			st.Hold.Note(), until.Sub(now).Round(time.Minute))
		return true, nil
	})
}

func runUnhold(ctx context.Context, g *cliDeps, now time.Time) error {
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return err
	}
	log := slog.New(journal.New(g.stderr, cfg.SlogLevel())).With("env", cfg.EnvID)
	if err := asStateOwner(g.proc, cfg, log, g.args, "unhold", ""); err != nil {
		return err
	}
	return withStateLock(ctx, cfg, g, func(st *state.State) (bool, error) {
		if !st.Hold.Active(now) {
			fmt.Fprintln(g.stdout, "not held")
			return st.Hold != nil, nil // an ended one still on disk goes too
		}
		fmt.Fprintf(g.stdout, "hold ended: %s (since %s)\n", st.Hold.Note(), st.Hold.Since.UTC().Format(time.RFC3339))
		st.Hold = nil
		return true, nil
	})
}

// withStateLock runs change on state.json under the tick lock (waiting for a running tick, so
// that neither overwrites the other) and saves it when change says so.
func withStateLock(ctx context.Context, cfg *config.Config, g *cliDeps, change func(st *state.State) (bool, error)) error {
	if _, err := os.Stat(cfg.StateDir); err != nil {
		return fmt.Errorf("state_dir %s: %w (no tick has run here yet)", cfg.StateDir, err)
	}
	release, err := state.Lock(ctx, cfg.LockPath(), func() {
		fmt.Fprintln(g.stderr, "monky-deployd: a tick is running; waiting for it to end (Ctrl-C gives up)")
	})
	if err != nil {
		return err
	}
	defer release()
	st, err := state.Load(cfg.StatePath())
	if err != nil {
		return fmt.Errorf("%w (a tick moves an unreadable state.json aside; run one first)", err)
	}
	save, err := change(st)
	if err != nil || !save {
		return err
	}
	return state.Save(cfg.StatePath(), st)
}

// loginUser is the name of the audit login uid, which survives su, sudo and setuid; "" unset.
func loginUser() string {
	raw, err := os.ReadFile("/proc/self/loginuid")
	if err != nil {
		return ""
	}
	uid := strings.TrimSpace(string(raw))
	if uid == "" || uid == "4294967295" {
		return ""
	}
	u, err := user.LookupId(uid)
	if err != nil {
		return ""
	}
	return u.Username
}

// userName is the running account's name.
func userName() string {
	u, err := user.Current()
	if err != nil {
		return ""
	}
	return u.Username
}
