package cli

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
)

type gateOptions struct {
	filterOptions
	expectVersion string
	wait          time.Duration
	poll          time.Duration
	allow         []string
}

func newGateCommand(g *globalOptions) *cobra.Command {
	var opts gateOptions
	cmd := &cobra.Command{
		Use:   "gate",
		Short: "Pre- and post-upgrade health gate for CI: prints only the blockers",
		Long: `gate judges the fleet like status and prints only what blocks a rollout.

Before an upgrade: 'fleetctl gate --min-version 0.1.9' fails while any env is not OK.
After it: 'fleetctl gate --expect-version 0.2.0 --wait 10m' polls until every env has checked
in running 0.2.0 since the gate started (tenancy's clock), or the wait runs out — then the
laggards are listed. An upgrade that silently stops its agents (0.1.8) fails this within two
check-in intervals. Without --wait, --expect-version checks the version once.

Exit 0 open, 1 closed, 2 usage or config error, 3 a source could not be read.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runGate(cmd.Context(), opts, g, g.stdout)
		},
	}
	opts.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&opts.expectVersion, "expect-version", "", "every env must check in running this version")
	fl.DurationVar(&opts.wait, "wait", 0, "with --expect-version: how long to wait for every env")
	fl.DurationVar(&opts.poll, "poll", 15*time.Second, "with --wait: time between two readings")
	fl.StringSliceVar(&opts.allow, "allow", nil, "env ids (or globs) that do not block (repeat or comma-separate)")
	return cmd
}

func runGate(ctx context.Context, opts gateOptions, g *globalOptions, w io.Writer) error {
	defer g.readerGC()()
	ro, err := opts.reportOptions()
	if err != nil {
		return err
	}
	switch {
	case opts.wait < 0 || opts.poll <= 0:
		return usagef("--wait must not be negative and --poll must be positive")
	case opts.wait > 0 && opts.expectVersion == "":
		return usagef("--wait needs --expect-version: it waits for envs to check in running that version")
	}
	if opts.expectVersion != "" {
		if _, err := verdict.ParseVersion(opts.expectVersion); err != nil {
			return usagef("--expect-version: %v", err)
		}
	}
	for _, a := range opts.allow {
		if _, err := path.Match(a, ""); err != nil || (admin.CheckEnvID(a) != nil && !isGlob(a)) {
			return usagef("--allow %q is neither an env id nor a glob", a)
		}
	}
	r, err := g.openReader(nil)
	if err != nil {
		return err
	}

	deadline := g.deps.Now().Add(opts.wait)
	var started time.Time
	waitLine, lastLine := false, ""
	defer func() {
		if waitLine {
			fmt.Fprint(g.stderr, "\r\x1b[K")
		}
	}()
	for attempt := 1; ; attempt++ {
		doc, err := r.document(ctx, opts.site, ro)
		if err != nil {
			// Retried while waiting (agents restart, tenancy blips); the first and last must succeed.
			if attempt == 1 || ctx.Err() != nil || !g.deps.Now().Before(deadline) {
				return err
			}
			g.log.Warn("gate: reading failed; retrying", "err", err.Error())
			if err := g.deps.Sleep(ctx, min(opts.poll, max(deadline.Sub(g.deps.Now()), 0))); err != nil {
				return err
			}
			continue
		}
		if attempt == 1 && opts.wait > 0 {
			started, _ = time.Parse(time.RFC3339, doc.Now)
		}
		gate := report.NewGate(doc, report.GateOptions{
			Allow: opts.allow, MinVersion: opts.minVersion, ExpectVersion: opts.expectVersion, StartedAt: started,
			Matched: opts.matched(),
		})
		lagging := gate.Lagging()
		remaining := deadline.Sub(g.deps.Now())
		if opts.wait == 0 || lagging == 0 || remaining <= 0 {
			gate.TimedOut = lagging > 0 && opts.wait > 0
			if waitLine {
				fmt.Fprint(g.stderr, "\r\x1b[K")
				waitLine = false
			}
			if err := g.printer().Print(w, gate); err != nil {
				return err
			}
			return notOK(!gate.Pass)
		}
		// A box backing off, held or deferred checks in as usual: this wait does not clear its
		// verdict (a human, a new bundle or the window does), so say so.
		backingOff, held, deferred := gate.BackingOff(), gate.Held(), gate.Deferred()
		g.log.Info("gate: waiting", "lagging", lagging, "backing_off", backingOff, "held", held, "deferred", deferred, "expect", opts.expectVersion, "left", remaining.Round(time.Second))
		var more []string
		if backingOff > 0 {
			more = append(more, fmt.Sprintf("%d more backing off a failed release", backingOff))
		}
		if held > 0 {
			more = append(more, fmt.Sprintf("%d more held by a human", held))
		}
		if deferred > 0 {
			more = append(more, fmt.Sprintf("%d more deferred to an apply window", deferred))
		}
		extra := ""
		if len(more) > 0 {
			extra = " (" + strings.Join(more, ", ") + ": they block whatever the wait)"
		}
		base := fmt.Sprintf("gate: %d envs not yet on %s%s", lagging, opts.expectVersion, extra)
		if g.deps.IsTerminal(g.deps.Stderr) {
			fmt.Fprintf(g.stderr, "\r\x1b[K%s, %s left", base, remaining.Round(time.Second))
			waitLine = true
		} else if line := base + ": waiting for " + laggards(gate); line != lastLine {
			// A CI log gets a line whenever who it waits for changes, naming them.
			fmt.Fprintln(g.stderr, line)
			lastLine = line
		}
		if err := g.deps.Sleep(ctx, min(opts.poll, remaining)); err != nil {
			return fmt.Errorf("gate: interrupted while %d envs were not yet on %s", lagging, opts.expectVersion)
		}
	}
}

func isGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// matched says what selected the envs, for a gate that found none: `--env "env-prod-*" --site osg`.
func (f *filterOptions) matched() string {
	var parts []string
	if f.env != "" {
		parts = append(parts, fmt.Sprintf("--env %q", f.env))
	}
	if f.site != "" {
		parts = append(parts, fmt.Sprintf("--site %q", f.site))
	}
	return strings.Join(parts, " ")
}

// laggards names the envs a gate waits for (at most five) for a log's wait line, which is printed
// again only when it changes (the time left would change it every poll).
func laggards(gate *report.Gate) string {
	var names []string
	for _, b := range gate.Blockers {
		if b.Lagging {
			names = append(names, b.EnvID)
		}
	}
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return strings.Join(names, ", ")
}
