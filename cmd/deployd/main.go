// Command monky-deployd is the Monky backend pull agent; see internal/agent/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
