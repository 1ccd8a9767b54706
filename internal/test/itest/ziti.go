//go:build integration

package itest

import (
	"context"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/zitidev"
)

// ZitiBin returns the ziti binary (MONKY_ZITI_BIN, else the path scripts/build-ziti.sh prints),
// or stops the test as Require does when there is none.
func ZitiBin(t testing.TB) string {
	t.Helper()
	bin, err := probe(PartZiti)
	if err != nil {
		missing(t, PartZiti, err)
	}
	return bin
}

// StartZiti runs a real controller and edge router on loopback (zitidev: `ziti edge
// quickstart`), logged in as admin for the CLI, and stops them when the test ends. On failure
// the quickstart's log is in the test output.
func StartZiti(t testing.TB) *zitidev.Controller {
	t.Helper()
	bin := ZitiBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := zitidev.Start(ctx, zitidev.Options{Bin: bin, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ziti quickstart log:\n%s", c.LogTail())
		}
		if err := c.Stop(); err != nil {
			t.Errorf("itest: stopping ziti: %v", err)
		}
	})
	return c
}
