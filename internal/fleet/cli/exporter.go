package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/exporter"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
)

// DefaultExporterListen is loopback: a Prometheus on the same host scrapes, nothing else reads the fleet.
const DefaultExporterListen = "127.0.0.1:9465"

type exporterOptions struct {
	filterOptions
	refresh time.Duration
}

func newExporterCommand(g *globalOptions) *cobra.Command {
	var opts exporterOptions
	cmd := &cobra.Command{
		Use:   "exporter",
		Short: "Serve the fleet's verdicts as Prometheus metrics on /metrics",
		Long: `exporter serves, on /metrics, one series per env for its verdict, check-in age (on tenancy's
clock), mesh, timer, agent version, drift and token TTL — the series fleetctl status -o
prometheus prints once — and its own health. It reads both sources at most once per --refresh,
however often it is scraped; when a reading fails it keeps serving the last good view and says
so (monky_fleet_exporter_view_fresh 0). It stops cleanly on SIGTERM or Ctrl-C.

Listens on --listen, FLEETCTL_EXPORTER_LISTEN or exporter.listen (default ` + DefaultExporterListen + `).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runExporter(cmd.Context(), opts, g, g.stderr)
		},
	}
	opts.register(cmd)
	cmd.Flags().StringVar(&g.flags.ExporterListen, "listen", "", "host:port to serve /metrics on (exporter.listen, FLEETCTL_EXPORTER_LISTEN; default "+DefaultExporterListen+")")
	cmd.Flags().DurationVar(&opts.refresh, "refresh", 30*time.Second, "read the sources at most this often")
	return cmd
}

// exporterMemoryLimit is the exporter's soft memory limit (GOMEMLIMIT overrides it): issue 24's
// budget of 64 MiB at 10,000 envs, less what the process holds outside the heap (~25 MiB: the
// binary's pages, stacks, the collector's own). A reading of 10,000 envs keeps at most ~19 MB
// live, so the collector still has twice that to work in.
const exporterMemoryLimit = 40 << 20

// runExporter serves until ctx ends; diag gets the one line saying where.
func runExporter(ctx context.Context, opts exporterOptions, g *globalOptions, diag io.Writer) error {
	ro, err := opts.reportOptions()
	if err != nil {
		return err
	}
	if opts.refresh < time.Second {
		return usagef("--refresh must be at least 1s")
	}
	var listen string
	r, err := g.openReader(func(s *config.Settings) error {
		origin := s.Origin["exporter.listen"]
		if listen = s.ExporterListen; listen == "" {
			listen, origin = DefaultExporterListen, "the default"
		}
		if err := checkListen(listen); err != nil {
			return usagef("exporter.listen %q (from %s): %v", listen, origin, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if debug.SetMemoryLimit(-1) == math.MaxInt64 { // GOMEMLIMIT unset
		// A long-lived process whose garbage comes in one burst per reading: without a limit the
		// heap doubles its live size before a collection (147 MiB at 10,000 envs). The limit is
		// soft: a larger fleet's view still fits, the GC only works harder near it.
		debug.SetMemoryLimit(exporterMemoryLimit)
	}
	ex := exporter.New(exporter.Options{
		Read:    func(ctx context.Context) (*report.Document, error) { return r.document(ctx, opts.site, ro) },
		Source:  sourcesOf,
		Sources: []string{sourceZiti, sourceTenancy},
		Refresh: opts.refresh,
		Timeout: g.timeout,
		Now:     g.deps.Now,
		Log:     g.log,
	})
	ln, err := g.deps.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("exporter: %w", err)
	}
	srv := &http.Server{Handler: ex, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	runCtx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); ex.Run(runCtx) }()
	fmt.Fprintf(diag, "fleetctl exporter: serving http://%s/metrics, reading the sources at most every %s\n", ln.Addr(), opts.refresh)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	stopRun()
	<-ran
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && serveErr == nil {
		serveErr = err
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("exporter: %w", serveErr)
	}
	fmt.Fprintf(diag, "fleetctl exporter: stopped\n")
	return nil
}

// checkListen accepts host:port with a numeric port (0 picks a free one).
func checkListen(hp string) error {
	_, port, err := net.SplitHostPort(hp)
	if err != nil {
		return errors.New("want host:port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return errors.New("want a port from 0 to 65535")
	}
	return nil
}

// sourcesOf names every source whose failure err carries (a reading reports each one).
func sourcesOf(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		var se *SourceError
		switch x := e.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, c := range x.Unwrap() {
				walk(c)
			}
		default:
			if errors.As(e, &se) {
				out = append(out, se.Source)
			}
		}
	}
	walk(err)
	return out
}
