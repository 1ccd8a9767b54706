package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/exporter"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
)

// filterOptions select envs and tune the verdict rules; status and gate share them.
type filterOptions struct {
	site       string
	env        string
	stale      time.Duration
	drift      time.Duration
	minVersion string
	// expiringWithin: a certificate expiring sooner is EXPIRING (issue 21).
	expiringWithin time.Duration
}

func (f *filterOptions) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.site, "site", "", "only envs of this site (orphan identities are then not listed)")
	fl.StringVar(&f.env, "env", "", "only envs whose id matches this glob (e.g. 'env-dev-*')")
	fl.DurationVar(&f.stale, "stale", 0, "check-in age beyond which an agent is stale (default: per env, max(3×interval, 3m))")
	fl.DurationVar(&f.drift, "drift", verdict.DefaultDrift, "how long desired may differ from applied before DRIFT")
	fl.StringVar(&f.minVersion, "min-version", "", "agents older than this are OUTDATED")
	f.expiringWithin = verdict.DefaultExpiringWithin
	fl.Var((*daysValue)(&f.expiringWithin), "expiring-within", "an identity certificate expiring within this is EXPIRING: the agent renews within 30 days, so this means its renewal is failing (days like 21d, or a duration)")
}

func (f *filterOptions) reportOptions() (report.Options, error) {
	o := report.Options{EnvGlob: f.env, Orphans: f.site == "", Thresholds: verdict.Thresholds{Stale: f.stale, Drift: f.drift, ExpiringWithin: f.expiringWithin}}
	if f.env != "" {
		if _, err := path.Match(f.env, ""); err != nil {
			return o, usagef("--env %q: %v", f.env, err)
		}
	}
	if f.stale < 0 || f.drift < 0 {
		return o, usagef("--stale and --drift must not be negative")
	}
	if f.expiringWithin <= 0 {
		return o, usagef("--expiring-within must be positive")
	}
	if f.minVersion != "" {
		v, err := verdict.ParseVersion(f.minVersion)
		if err != nil {
			return o, usagef("--min-version: %v", err)
		}
		o.Thresholds.MinVersion = &v
	}
	return o, nil
}

type statusOptions struct {
	filterOptions
	watch    time.Duration
	verdicts []string
}

// verdictSet reads --verdict (repeated or comma-separated, any case) against the known verdicts.
func verdictSet(names []string) (map[verdict.Verdict]bool, error) {
	if len(names) == 0 {
		return nil, nil
	}
	known := map[verdict.Verdict]bool{}
	var all []string
	for _, v := range verdict.All() {
		known[v] = true
		all = append(all, string(v))
	}
	set := map[verdict.Verdict]bool{}
	for _, n := range names {
		v := verdict.Verdict(strings.ToUpper(strings.TrimSpace(n)))
		if !known[v] {
			return nil, usagef("--verdict %q is not a verdict: want one of %s", n, strings.Join(all, ", "))
		}
		set[v] = true
	}
	return set, nil
}

func newStatusCommand(g *globalOptions) *cobra.Command {
	var opts statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "One verdict per env, with the next step",
		Long: `status lists every env tenancy knows — and every monky-host.* identity it does not — with
its verdict and the next step, the worst first (NO_IDENTITY, ATTRS_MISSING, NEVER_CHECKED_IN,
EXPIRED, SILENT, OFFLINE, FAILING, BACKOFF, EXPIRING, HELD, DEFERRED, DRIFT, OUTDATED, OK;
ORPHAN_IDENTITY), then a summary line. Ages are measured against tenancy's clock, never this
machine's.

The table fits 120 columns, a long NEXT STEP shortened on a word; -o wide and
'fleetctl describe ENV' carry the whole story, -o json every field whole. Verdicts are
coloured on a terminal unless NO_COLOR is set.

Exit 0 when every env listed is OK, 1 when any is not, 2 on a usage or config error, 3 when
a source could not be read. -o prometheus exits 0 whenever both sources were read (the
verdicts are in the series).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runStatus(cmd.Context(), opts, g, g.stdout)
		},
	}
	opts.register(cmd)
	cmd.Flags().DurationVar(&opts.watch, "watch", 0, "redraw every D (in place on a terminal, appended on a pipe) until interrupted")
	cmd.Flags().StringSliceVar(&opts.verdicts, "verdict", nil, "only envs with this verdict (repeat or comma-separate, e.g. SILENT,OFFLINE)")
	_ = cmd.RegisterFlagCompletionFunc("verdict", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		var names []string
		for _, v := range verdict.All() {
			names = append(names, string(v))
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func runStatus(ctx context.Context, opts statusOptions, g *globalOptions, w io.Writer) error {
	defer g.readerGC()()
	ro, err := opts.reportOptions()
	if err != nil {
		return err
	}
	if ro.Verdicts, err = verdictSet(opts.verdicts); err != nil {
		return err
	}
	if opts.watch < 0 {
		return usagef("--watch must not be negative")
	}
	r, err := g.openReader(nil)
	if err != nil {
		return err
	}
	p := g.printer()
	if p.Format == render.FormatPrometheus && opts.watch != 0 {
		return usagef("--watch with -o prometheus: run fleetctl exporter and let Prometheus scrape it")
	}
	if opts.watch == 0 {
		doc, err := r.document(ctx, opts.site, ro)
		if err != nil {
			return err
		}
		if p.Format == render.FormatPrometheus {
			page, err := exporter.Encode(doc)
			if err != nil {
				return err
			}
			// It feeds textfile crons: the sources were read, so the series are true, whatever
			// the verdicts (which are in them).
			_, err = w.Write(page)
			return err
		}
		if err := p.Print(w, doc); err != nil {
			return err
		}
		return notOK(doc.NotOK() > 0)
	}
	return g.watch(ctx, w, opts.watch, func(buf *bytes.Buffer) (string, error) {
		doc, err := r.document(ctx, opts.site, ro)
		if err != nil {
			return "", err
		}
		if err := p.Print(buf, doc); err != nil {
			return "", err
		}
		return doc.Now, notOK(doc.NotOK() > 0)
	})
}

func notOK(b bool) error {
	if b {
		return ErrNotOK
	}
	return nil
}

func (r *reader) document(ctx context.Context, site string, ro report.Options) (*report.Document, error) {
	src, err := r.read(ctx, site, ro.EnvGlob)
	if err != nil {
		return nil, err
	}
	doc, err := report.Build(src.agents, src.identities, ro)
	if err != nil {
		return nil, &SourceError{Source: sourceTenancy, Addr: r.s.TenancyURL, Err: err}
	}
	return doc, nil
}

// watch redraws a snapshot every interval until ctx ends: in place on a terminal, appended on a
// pipe (a log keeps the history). A failed source is reported and retried; the last round's exit code counts.
func (g *globalOptions) watch(ctx context.Context, w io.Writer, every time.Duration, snap func(*bytes.Buffer) (string, error)) error {
	tty := g.deps.IsTerminal(g.deps.Stdout)
	table := g.printer().Format != render.FormatJSON
	var last error
	for round := 1; ; round++ {
		var buf bytes.Buffer
		now, err := snap(&buf)
		if ctx.Err() != nil {
			return last
		}
		last = err
		var out bytes.Buffer
		if tty {
			out.WriteString("\x1b[H\x1b[2J") // home and clear: the snapshot replaces the last
		} else if round > 1 && table {
			out.WriteString("\n")
		}
		if table {
			when := now
			if when == "" {
				when = "no data"
			}
			fmt.Fprintf(&out, "every %s · tenancy %s · Ctrl-C to stop\n\n", every, when)
		}
		out.Write(buf.Bytes())
		if _, werr := w.Write(out.Bytes()); werr != nil {
			return werr
		}
		if err != nil && !errors.Is(err, ErrNotOK) {
			fmt.Fprintf(g.stderr, "fleetctl: %s\n", g.redact(err.Error()))
		}
		if err := g.deps.Sleep(ctx, every); err != nil {
			return last
		}
	}
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}
