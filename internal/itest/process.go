//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
)

// process is a server binary run for one test, its output in a log file that is shown (through
// the redactor: the bao dev server prints its root token) only when something goes wrong.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	redact  *secret.Redactor
	done    chan struct{}
	waitErr error
}

// errExited means the server stopped before it was ready: usually its port was taken between
// freePort and the bind, and the caller retries with another.
var errExited = errors.New("exited before it was ready")

func startProcess(name, logPath string, extraEnv []string, redact *secret.Redactor, bin string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a ^C on `go test` reaches the test (which cleans up) first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, redact: redact, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// waitReady polls ready until it reports true, the process exits (errExited), or ctx ends.
// Polling a condition is the synchronisation here: a server has no other way to say it is up.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := ready(ctx)
		if ok {
			return err // a server that answers wrongly (e.g. no auth) is not ready, it is broken
		}
		lastErr = err
		select {
		case <-p.done:
			return fmt.Errorf("%s %w (%v)", p.name, errExited, p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready: %w (last: %v)", p.name, ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM and waits; a server that ignores it for 15 s is killed.
func (p *process) stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s had already exited: %v", p.name, p.waitErr)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s ignored SIGTERM for 15s and was killed", p.name)
	}
}

// logTail is the end of the server's output with every secret masked.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return p.redact.Redact(tail(string(b), 4000))
}
