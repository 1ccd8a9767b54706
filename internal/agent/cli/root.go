// Package cli is monky-deployd's command line: cobra commands over plain functions, and the
// one place a tick's error becomes an exit code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/versionflag"
)

// DefaultConfigPath is where the package and install.sh put the config.
const DefaultConfigPath = "/etc/monky-deployd/config.yaml"

// cliDeps are what every command takes from outside: flags, streams, environment, process.
type cliDeps struct {
	configPath string
	stdout     io.Writer
	stderr     io.Writer
	getenv     func(string) string
	// args are the command line as given, for a re-run as state_dir's owner; proc is the process.
	args []string
	proc process
}

// exitError carries an exit code decided by a command through cobra.
type exitError struct {
	code int
	err  error
	// tickID, when set, ends the printed line as it ends every journal line of the tick.
	tickID string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Run is the whole program: main passes its arguments and streams and exits with the result.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return run(ctx, args, stdout, stderr, os.Getenv)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	g := &cliDeps{stdout: stdout, stderr: stderr, getenv: getenv, args: args, proc: realProcess}
	root := newRootCommand(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.code != 0 {
			if ee.tickID != "" {
				fmt.Fprintf(stderr, "monky-deployd: %v tick_id=%s\n", ee.err, ee.tickID)
			} else {
				fmt.Fprintf(stderr, "monky-deployd: %v\n", ee.err)
			}
		}
		return ee.code
	}
	// cobra's own usage errors (unknown flag, bad args).
	fmt.Fprintf(stderr, "monky-deployd: %v\n", err)
	return 2
}

func newRootCommand(g *cliDeps) *cobra.Command {
	root := &cobra.Command{
		Use:           "monky-deployd",
		Short:         "The Monky backend pull agent",
		Long:          "monky-deployd checks in with monky-tenancy over the OpenZiti mesh, applies the desired bundle\nwith secrets from OpenBao through docker compose, and reports. A systemd timer runs `tick`.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	versionflag.Add(root, "v", versionLine)
	def := g.getenv("MONKY_DEPLOYD_CONFIG")
	if def == "" {
		def = DefaultConfigPath
	}
	root.PersistentFlags().StringVar(&g.configPath, "config", def, "config file (env MONKY_DEPLOYD_CONFIG)")
	root.AddCommand(
		newTickCommand(g),
		newStatusCommand(g),
		newVersionCommand(g),
		newProxyCommand(g),
		newDoctorCommand(g),
		newReownCommand(g),
		newConfigCommand(g),
		newHoldCommand(g),
		newUnholdCommand(g),
	)
	return root
}

// exit wraps err with the code agent.ExitCode gives it.
func exit(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err // decided already (the refusal of a root tick, exit 78)
	}
	return &exitError{code: tick.ExitCode(err), err: err}
}
