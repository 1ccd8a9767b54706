// Command upload publishes a release built by `make deb` (the .deb, install.sh, SHA256SUMS): to
// the GitLab generic package registry plus a GitLab release (the primary download), or to the
// Gitea mirror's release. scripts/packaging-upload.sh runs it; --dry-run prints every request and
// sends nothing.
package main

import (
	"context"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, &http.Client{Timeout: 10 * time.Minute}, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
