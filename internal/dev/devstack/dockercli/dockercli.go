// Package dockercli runs the docker CLI for the dev stack and the integration tests (never the
// engine socket: what they ran is what a person can re-run by hand). Every call that touches
// registry credentials passes its own DOCKER_CONFIG, so nothing ever reads or writes the user's
// ~/.docker.
package dockercli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

// Run runs `docker args…` and returns its stdout. dockerConfig, when set, becomes DOCKER_CONFIG;
// stdin, when not nil, is fed to the command (a password for `login --password-stdin` goes here,
// never in argv). The error names the first words of the command and carries the end of stderr
// (docker never echoes a password it was given on stdin).
func Run(ctx context.Context, dockerConfig string, stdin []byte, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Env = os.Environ()
	if dockerConfig != "" {
		cmd.Env = append(cmd.Env, "DOCKER_CONFIG="+dockerConfig)
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("docker %s: %w: %s", FirstWords(args, 3), err, clip.Tail(strings.TrimSpace(stderr.String()), 2000))
	}
	return stdout.String(), nil
}

// ServerVersion is the engine's version, or an error when the CLI or the engine does not answer
// (no docker, DOCKER_HOST pointing nowhere, no permission on the socket).
func ServerVersion(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("docker"); err != nil {
		return "", fmt.Errorf("docker CLI: %w", err)
	}
	out, err := Run(ctx, "", nil, "version", "--format", "{{.Server.Version}}")
	if err != nil {
		return "", fmt.Errorf("docker engine does not answer: %w", err)
	}
	return strings.TrimSpace(out), nil
}

// ProjectLabel is the label compose puts on everything of a project.
const ProjectLabel = "com.docker.compose.project"

// RemoveProject takes a compose project down for good: `docker compose -p name down -v
// --remove-orphans`, then the forced removal of every container, network and volume still
// labelled with the project (an agent killed mid-apply leaves such things). It returns what
// could not be removed, and the first error.
func RemoveProject(ctx context.Context, name string) (left []string, err error) {
	empty, err := os.MkdirTemp("", "monky-docker-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(empty)
	// A project that was never started is not an error: the label sweep below is the truth.
	_, _ = Run(ctx, empty, nil, "compose", "-p", name, "down", "-v", "--remove-orphans", "--timeout", "5")
	filter := "label=" + ProjectLabel + "=" + name
	var first error
	for _, kind := range []struct{ ls, rm []string }{
		{[]string{"ps", "-aq", "--filter", filter}, []string{"rm", "-f", "-v"}},
		{[]string{"network", "ls", "-q", "--filter", filter}, []string{"network", "rm"}},
		{[]string{"volume", "ls", "-q", "--filter", filter}, []string{"volume", "rm", "-f"}},
	} {
		ids, err := listIDs(ctx, kind.ls...)
		if err != nil {
			first = firstErr(first, err)
			continue
		}
		if len(ids) == 0 {
			continue
		}
		if _, err := Run(ctx, "", nil, append(kind.rm, ids...)...); err != nil {
			first = firstErr(first, err)
		}
		if rest, _ := listIDs(ctx, kind.ls...); len(rest) > 0 {
			left = append(left, fmt.Sprintf("docker %s → %v", strings.Join(kind.ls, " "), rest))
		}
	}
	if first == nil && len(left) > 0 {
		first = fmt.Errorf("docker: project %s: still present after removal: %s", name, strings.Join(left, "; "))
	}
	return left, first
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func listIDs(ctx context.Context, args ...string) ([]string, error) {
	out, err := Run(ctx, "", nil, args...)
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// FirstWords joins the first n args, for error subjects that never reach a secret argument.
func FirstWords(args []string, n int) string {
	if len(args) > n {
		args = args[:n]
	}
	return strings.Join(args, " ")
}
