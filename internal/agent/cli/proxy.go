package cli

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
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
	err = transport.RunProxy(ctx, opts)
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
