// Package cli is fleetctl: the operator's view of the fleet, joining the ziti controller and
// tenancy's admin API (docs/FLEET.md). One file per command; exit codes are decided in exitCode.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/versionflag"
)

// Exit codes, the contract CI gates are written against.
const (
	ExitOK     = 0 // every env OK / the command did what it was asked
	ExitNotOK  = 1 // some env is not OK, the gate is closed, or a repair is pending
	ExitUsage  = 2 // bad flags, arguments or configuration
	ExitSource = 3 // a source (ziti controller, tenancy) could not be read
)

// Errors that decide the exit code.
var (
	ErrUsage = errors.New("usage") // exit 2
	// ErrNotOK: exit 1; the output already says what, nothing more is printed.
	ErrNotOK = errors.New("not ok")
)

// SourceError: a source could not be read, so nothing was judged (exit 3).
type SourceError struct {
	Source string // "ziti controller" or "tenancy"
	Addr   string
	Err    error
}

func (e *SourceError) Error() string {
	addr := e.Addr
	if u, err := url.Parse(addr); err == nil && u.User != nil {
		addr = u.Redacted() // settings refuse credentials in a URL; this is the last guard
	}
	return fmt.Sprintf("cannot read the %s at %s: %v", e.Source, addr, e.Err)
}

func (e *SourceError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUsage}, args...)...)
}

// exitCode is the one place an error becomes an exit code; cobra's errors before any command
// ran are usage errors.
func exitCode(err error, started bool) int {
	var se *SourceError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage), errors.Is(err, config.ErrInvalid), errors.Is(err, kit.ErrExists), errors.Is(err, errLive), !started:
		return ExitUsage
	case errors.As(err, &se):
		return ExitSource
	}
	return ExitNotOK
}

// Deps is everything fleetctl takes from outside: tests replace any of it.
type Deps struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	ReadFile       func(string) ([]byte, error)
	Now            func() time.Time
	Sleep          func(ctx context.Context, d time.Duration) error // ctx.Err() when ctx ends first
	IsTerminal     func(w io.Writer) bool
	After          func(d time.Duration, f func()) (stop func() bool)
	Listen         func(network, addr string) (net.Listener, error)
}

func realDeps(stdout, stderr io.Writer) Deps {
	return Deps{
		Stdout: stdout, Stderr: stderr,
		Getenv: os.Getenv, ReadFile: os.ReadFile, Now: time.Now,
		Sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		IsTerminal: func(w io.Writer) bool {
			f, ok := w.(*os.File)
			return ok && term.IsTerminal(int(f.Fd()))
		},
		After:  func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		Listen: net.Listen,
	}
}

// Main runs fleetctl on the process's arguments and streams; Ctrl-C ends a wait cleanly.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// Run executes fleetctl with args (without the program name) and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, realDeps(stdout, stderr))
}

func run(ctx context.Context, args []string, deps Deps) int {
	g := newGlobals(deps)
	root := newRootCommand(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	code := exitCode(err, g.started)
	switch {
	case err == nil, errors.Is(err, ErrNotOK):
	case code == ExitUsage && errors.Is(err, errLive):
		fmt.Fprintf(g.stderr, "fleetctl: %s\n", g.redact(err.Error())) // a refusal, not a mistyped command
	case code == ExitUsage:
		fmt.Fprintf(g.stderr, "fleetctl: %s\n", g.redact(trimUsage(err)))
		fmt.Fprintf(g.stderr, "Run 'fleetctl --help' for usage.\n")
	case code == ExitSource:
		for _, line := range strings.Split(g.redact(err.Error()), "\n") { // one line per source that failed
			fmt.Fprintf(g.stderr, "fleetctl: %s\n", line)
		}
		fmt.Fprintf(g.stderr, "fleetctl: nothing was judged: a verdict needs every source.\n")
	default:
		fmt.Fprintf(g.stderr, "fleetctl: %s\n", g.redact(err.Error()))
	}
	return code
}

func trimUsage(err error) string {
	s := err.Error()
	if p := ErrUsage.Error() + ": "; len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// globalOptions are the flags every command shares, plus the Deps and what is derived from it.
type globalOptions struct {
	configPath      string
	verbose         bool
	output          string
	timeout         time.Duration
	zitiConcurrency int
	flags           config.Flags

	deps    Deps
	stdout  io.Writer // redacting
	stderr  io.Writer // redacting
	log     *slog.Logger
	secrets *secrets
	// started is set once a command's RunE begins: errors before it are cobra's usage errors.
	started bool
}

func newGlobals(deps Deps) *globalOptions {
	g := &globalOptions{deps: deps, secrets: &secrets{}}
	g.stdout = redactingWriter{deps.Stdout, g.secrets}
	g.stderr = redactingWriter{deps.Stderr, g.secrets}
	return g
}

func (g *globalOptions) redact(s string) string { return g.secrets.r.Redact(s) }

// secrets are the values fleetctl has read that must never be printed.
type secrets struct {
	r secret.Redactor
	// raw lets a write be checked without copying it: the JSON of 10,000 envs is 12 MB.
	mu  sync.RWMutex
	raw [][]byte
}

func (s *secrets) add(values ...string) {
	s.r.Add(values...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if v = strings.TrimSpace(v); len(v) >= 3 {
			s.raw = append(s.raw, []byte(v))
		}
	}
}

func (s *secrets) in(p []byte) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, v := range s.raw {
		if bytes.Contains(p, v) {
			return true
		}
	}
	return false
}

// redactingWriter masks every secret fleetctl has read in every byte it prints: the last guard.
type redactingWriter struct {
	w io.Writer
	s *secrets
}

func (rw redactingWriter) Write(p []byte) (int, error) {
	if !rw.s.in(p) {
		return rw.w.Write(p)
	}
	if _, err := io.WriteString(rw.w, rw.s.r.Redact(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newRootCommand(g *globalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:   "fleetctl",
		Short: "The operator's view of the monky-deployd fleet",
		Long: `fleetctl joins the ziti controller (is the host on the mesh, does its identity carry
#monky-deploy-agent and #openbao-client) and tenancy's admin API (when did the agent last
check in, what does it run, did it apply) into one verdict per env, with the next step.

Exit codes: 0 all OK, 1 something is not OK, 2 usage or configuration error,
3 a source could not be read (nothing is judged from half the data).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			g.started = true
			if versionflag.Asked(cmd) {
				return nil // as cobra's own --version: printed whatever the other flags say
			}
			return g.setup(cmd)
		},
	}
	// `fleetctl completion bash|zsh|fish` is ours (completion.go), not cobra's default.
	root.CompletionOptions.DisableDefaultCmd = true
	versionflag.Add(root, "", versionLine)
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })

	pf := root.PersistentFlags()
	pf.StringVar(&g.configPath, "config", "", "config file (default ~/.config/fleetctl/config.yaml)")
	pf.BoolVarP(&g.verbose, "verbose", "v", false, "say on stderr where settings came from and what each source answered (never secrets)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table, wide, json or prometheus (status only)")
	pf.DurationVar(&g.timeout, "timeout", 2*time.Minute, "give up reading the sources after this long")
	pf.IntVar(&g.zitiConcurrency, "ziti-concurrency", 8, "identity pages fetched at once from the controller (1 = one after another)")
	pf.StringVar(&g.flags.ZitiURL, "ziti-url", "", "controller address, https://host:port (ziti.url, "+config.EnvZitiURL+")")
	pf.StringVar(&g.flags.ZitiUsername, "ziti-username", "", "controller user for password auth (ziti.username, "+config.EnvZitiUsername+")")
	pf.StringVar(&g.flags.ZitiPasswordFile, "ziti-password-file", "", "file holding the controller password (ziti.password_file; or "+config.EnvZitiPassword+")")
	pf.StringVar(&g.flags.ZitiIdentity, "ziti-identity", "", "ziti identity file for certificate auth (ziti.identity, "+config.EnvZitiIdentity+")")
	pf.StringVar(&g.flags.ZitiCAFile, "ziti-ca-file", "", "CA bundle of the controller (ziti.ca_file, "+config.EnvZitiCAFile+")")
	pf.StringVar(&g.flags.TenancyURL, "tenancy-url", "", "tenancy admin API address (tenancy.url, "+config.EnvTenancyURL+")")
	pf.StringVar(&g.flags.TenancyTokenFile, "tenancy-token-file", "", "file holding the tenancy admin token (tenancy.token_file; or "+config.EnvTenancyToken+")")

	root.AddCommand(
		newStatusCommand(g),
		newDescribeCommand(g),
		newGateCommand(g),
		newOnboardCommand(g),
		newRepairAttrsCommand(g),
		newExporterCommand(g),
		newVersionCommand(g),
		newCompletionCommand(g),
	)
	return root
}

func (g *globalOptions) setup(cmd *cobra.Command) error {
	level := slog.LevelWarn
	if g.verbose {
		level = slog.LevelDebug
	}
	g.log = slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{} // a CLI's stderr is read now, not later
			}
			return a
		},
	}))
	f, err := render.ParseFormat(g.output)
	if err != nil {
		return usagef("%v", err)
	}
	if f == render.FormatPrometheus && cmd.Name() != "status" {
		return usagef("-o prometheus: only fleetctl status prints series (fleetctl exporter serves them)")
	}
	if g.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	if g.zitiConcurrency < 1 || g.zitiConcurrency > 64 {
		return usagef("--ziti-concurrency must be between 1 and 64")
	}
	return nil
}

func (g *globalOptions) printer() render.Printer {
	f, _ := render.ParseFormat(g.output) // validated in setup
	return render.Printer{Format: f, Color: g.color()}
}

// color: only a terminal is painted, and never one whose user set NO_COLOR (no-color.org) or
// whose terminal is dumb; a pipe, a file and CI logs get plain text.
func (g *globalOptions) color() bool {
	return g.deps.IsTerminal(g.deps.Stdout) && g.deps.Getenv("NO_COLOR") == "" && g.deps.Getenv("TERM") != "dumb"
}

// settings layers env and flags over the config file; its secrets are registered with the
// redactor before anything can print them.
func (g *globalOptions) settings() (*config.Settings, error) {
	path, explicit := g.configPath, g.configPath != ""
	if !explicit {
		path = config.DefaultPath(g.deps.Getenv)
	}
	f, err := config.Load(path, explicit, g.deps.ReadFile)
	if err != nil {
		return nil, err
	}
	s, err := config.Resolve(f, g.deps.Getenv, g.flags, g.deps.ReadFile)
	if err != nil {
		return nil, err
	}
	g.secrets.add(s.ZitiPassword.Reveal(), s.TenancyToken.Reveal())
	if f.Path != "" {
		g.log.Debug("config", "file", f.Path)
	}
	for _, k := range []string{"ziti.url", "ziti.auth", "ziti.username", "ziti.password", "ziti.identity", "ziti.ca_file", "tenancy.url", "tenancy.token"} {
		if o, ok := s.Origin[k]; ok {
			g.log.Debug("setting", "key", k, "from", o)
		}
	}
	return s, nil
}
