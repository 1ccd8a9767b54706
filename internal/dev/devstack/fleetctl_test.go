package devstack

import (
	"context"
	"strings"
	"testing"
)

func TestFleetctlRunner(t *testing.T) {
	s := newTestStack(t)
	// A stand-in fleetctl: prints its argv, any FLEETCTL_ variable it was given, and the admin
	// token it reads from the file the config names (as a careless tool might).
	bin := script(t, `echo "args: $*"; env | grep '^FLEETCTL_' || true; cat "`+s.Dir()+`/tenancy-token"; echo oops >&2; exit 1`)
	t.Setenv("FLEETCTL_TENANCY_URL", "http://prod.example:443")
	f := s.Fleetctl(bin)

	r, err := f.Run(context.Background(), "status", "--stale", "15s")
	if err != nil {
		t.Fatal(err)
	}
	if r.Exit != 1 || r.Stderr != "oops\n" {
		t.Errorf("exit %d stderr %q", r.Exit, r.Stderr)
	}
	if !strings.HasPrefix(r.Stdout, "args: --config "+s.FleetctlConfig()+" status --stale 15s\n") {
		t.Errorf("argv: %q", r.Stdout)
	}
	if strings.Contains(r.Stdout, "FLEETCTL_") {
		t.Errorf("the caller's FLEETCTL_* reached fleetctl: %q", r.Stdout)
	}
	for _, sec := range s.Secrets() {
		if strings.Contains(r.Stdout, sec) {
			t.Fatal("the admin token is in the output")
		}
	}
	if !strings.Contains(r.Stdout, "***") {
		t.Errorf("the token was not masked: %q", r.Stdout)
	}

	if _, err := f.Onboard(context.Background(), "env-a", "dev", t.TempDir(), true); err == nil || !strings.Contains(err.Error(), "exited 1: oops") {
		t.Errorf("onboard of a failing fleetctl: %v", err)
	}
	if _, err := s.Fleetctl(script(t, "")+".absent").Run(context.Background(), "version"); err == nil {
		t.Error("a fleetctl that does not exist ran")
	}
}
