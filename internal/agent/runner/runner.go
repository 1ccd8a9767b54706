// Package runner is the one place monky-deployd starts other programs (docker, systemctl), so
// tests swap in runnertest.Fake and assert every call's argv and environment.
package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Cmd is one program to run. Secrets never go in Args (world-readable in /proc/<pid>/cmdline,
// and in the journal on failure) and not in Env unless the callee offers no other way: hand them
// over in a 0600 file the callee reads, or on Stdin.
type Cmd struct {
	Name string   // program; looked up in PATH when it has no slash
	Args []string // arguments, without the program name
	Env  []string // extra KEY=VAL appended to the inherited environment; a later entry wins
	// OnlyEnv makes Env the whole environment: nothing of the agent's own is inherited (docker:
	// an operator's COMPOSE_FILE or DOCKER_HOST must not change what a tick runs).
	OnlyEnv bool
	Dir     string // working directory; "" means the caller's
	Stdin   []byte // fed to standard input; nil means /dev/null
}

// String renders the command line for logs; Cmd carries no secret (see above).
func (c Cmd) String() string {
	if len(c.Args) == 0 {
		return c.Name
	}
	return c.Name + " " + strings.Join(c.Args, " ")
}

// Result is what a finished command left behind.
type Result struct {
	Stdout   []byte
	Stderr   []byte
	ExitCode int // 0 on success; 128+N when killed by signal N
}

// Runner runs a command to completion; implementations are safe for concurrent use. The error
// is non-nil only when the command could not start (ErrNotFound when the program is missing) or
// ctx ended first (matches ctx.Err(); Result holds the output so far). A non-zero exit is a
// Result with that ExitCode and a nil error: callers decide what it means.
type Runner interface {
	Run(ctx context.Context, c Cmd) (Result, error)
}

// ErrNotFound: the program does not exist (a box without systemd), not a command that failed.
var ErrNotFound = errors.New("executable not found")

// Exec runs commands as children, each leading its own process group that a cancelled ctx kills:
// `docker compose` starts helpers that would otherwise keep pulling and hold the pipes open.
type Exec struct {
	// Environ is the environment Cmd.Env is appended to; nil means the agent's own (os.Environ).
	Environ []string
	// WaitDelay bounds the wait for pipes an escaped grandchild may hold open; 0 means 5s.
	WaitDelay time.Duration
}

func (e Exec) Run(ctx context.Context, c Cmd) (Result, error) {
	if c.Name == "" {
		return Result{}, errors.New("runner: empty command name")
	}
	cmd := exec.CommandContext(ctx, c.Name, c.Args...)
	env := e.Environ
	if env == nil {
		env = os.Environ()
	}
	if c.OnlyEnv {
		env = nil
	}
	// Never nil: exec.Cmd reads a nil Env as "inherit everything".
	cmd.Env = append(append([]string{}, env...), c.Env...)
	cmd.Dir = c.Dir
	if c.Stdin != nil {
		cmd.Stdin = bytes.NewReader(c.Stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Negative pid: the whole group the child leads.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = e.WaitDelay
	if cmd.WaitDelay <= 0 {
		cmd.WaitDelay = 5 * time.Second
	}

	err := cmd.Run()
	res := Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	if ctxErr := ctx.Err(); ctxErr != nil && (err != nil || cmd.ProcessState == nil) {
		res.ExitCode = -1
		return res, fmt.Errorf("runner: %s: %w", c.Name, ctxErr)
	}
	if err == nil {
		return res, nil
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		res.ExitCode = exitCode(exitErr.ProcessState)
		return res, nil
	}
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil {
		// The program finished; only a stray descendant kept the pipes open.
		res.ExitCode = exitCode(cmd.ProcessState)
		return res, nil
	}
	if cmd.ProcessState == nil && (errors.Is(err, exec.ErrNotFound) || isMissing(err, c)) {
		return res, fmt.Errorf("runner: start %s: %w: %w", c.Name, ErrNotFound, err)
	}
	return res, fmt.Errorf("runner: start %s: %w", c.Name, err)
}

// isMissing tells an absent program (a path with a slash too) from a missing working directory.
func isMissing(err error, c Cmd) bool {
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(c.Name, "/") {
		return false
	}
	_, statErr := os.Stat(c.Name)
	return errors.Is(statErr, fs.ErrNotExist)
}

func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
