package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Fleetctl runs a fleetctl binary against a stack.
type Fleetctl struct {
	// Bin is the fleetctl binary.
	Bin string
	// Transport is what Onboard's kits say: system, or proxy with the real controller (the
	// stack's boxes then run one).
	Transport string
	stack     *Stack
}

// Fleetctl returns a runner of bin with this stack's settings.
func (s *Stack) Fleetctl(bin string) *Fleetctl {
	f := &Fleetctl{Bin: bin, Transport: "system", stack: s}
	if s.RealZiti != nil {
		f.Transport = "proxy"
	}
	return f
}

// Result is one fleetctl run. Stdout and Stderr have the stack's secrets masked, so a test or
// the demo may print them.
type Result struct {
	Args   []string
	Exit   int
	Stdout string
	Stderr string
}

// Run runs `fleetctl --config <stack>/fleetctl.yaml args…`, the FLEETCTL_* variables of the
// caller's environment removed (they would beat the file and point at another fleet).
func (f *Fleetctl) Run(ctx context.Context, args ...string) (Result, error) {
	full := append([]string{"--config", f.stack.FleetctlConfig()}, args...)
	cmd := exec.CommandContext(ctx, f.Bin, full...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEETCTL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	red := &secret.Redactor{}
	red.Add(f.stack.Secrets()...)
	r := Result{Args: args, Stdout: red.Redact(stdout.String()), Stderr: red.Redact(stderr.String())}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		r.Exit = ee.ExitCode()
	default:
		return r, fmt.Errorf("devstack: fleetctl %s: %w", strings.Join(args, " "), err)
	}
	return r, nil
}

// Onboard runs `fleetctl onboard ENV --site SITE --transport TRANSPORT --out KITS` and fails
// unless it exits 0. The kit lands in KITS/ENV/ (bootstrap.jwt among it). reissue re-issues the
// kit of a box that may be running (--reissue --replace-live): its grant is superseded.
func (f *Fleetctl) Onboard(ctx context.Context, env, site, kits string, reissue bool) (Result, error) {
	args := []string{"onboard", env, "--site", site, "--transport", f.Transport, "--out", kits}
	if reissue {
		args = append(args, "--reissue", "--replace-live")
	}
	r, err := f.Run(ctx, args...)
	if err == nil && r.Exit != 0 {
		err = fmt.Errorf("devstack: fleetctl onboard %s exited %d: %s", env, r.Exit, strings.TrimSpace(r.Stderr))
	}
	return r, err
}
