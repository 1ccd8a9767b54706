// Package process runs the server binaries of the dev stack and of the integration tests
// (OpenBao's dev server, the registry) as children in their own process group, their output in
// a log file that is shown — through a redactor, since the OpenBao dev server prints its root
// token — only when something goes wrong.
package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// ErrExited means the server stopped before it was ready: usually its port was taken between
// FreePort and the bind, and the caller retries with another.
var ErrExited = errors.New("exited before it was ready")

// StopTimeout is how long Stop waits after SIGTERM before it kills.
const StopTimeout = 15 * time.Second

// Process is one running server.
type Process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	redact  *secret.Redactor
	done    chan struct{}
	waitErr error
}

// Start runs bin with args, its stdout and stderr appended to logPath (created 0600), with the
// process environment plus extraEnv (where a secret goes: the environment is not visible to
// other users' `ps`, argv is). redact masks secrets in LogTail; nil masks nothing.
func Start(name, logPath string, extraEnv []string, redact *secret.Redactor, bin string, args ...string) (*Process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	defer logf.Close() // the child holds its own descriptor
	if redact == nil {
		redact = &secret.Redactor{}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a ^C in the terminal reaches the parent (which stops the
	// server in order) rather than killing the server under it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, logPath: logPath, redact: redact, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the server's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// WaitReady polls ready every 50 ms until it reports true, the process exits (ErrExited), or
// ctx ends. A server has no other way to say it is up, so polling is the synchronisation here.
// When ready reports true with an error, the server answers but wrongly: that error is returned.
func (p *Process) WaitReady(ctx context.Context, ready func(context.Context) (bool, error)) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		ok, err := ready(ctx)
		select {
		case <-p.done:
			// Checked before the answer: a port can answer for a server that already died
			// (another process on it, a stale listener), and that server is not ready.
			return fmt.Errorf("%s %w (%v)", p.name, ErrExited, p.waitErr)
		default:
		}
		if ok {
			return err
		}
		lastErr = err
		select {
		case <-p.done:
			return fmt.Errorf("%s %w (%v)", p.name, ErrExited, p.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("%s: not ready: %w (last: %v)", p.name, ctx.Err(), lastErr)
		case <-tick.C:
		}
	}
}

// Stop sends SIGTERM and waits; a server that ignores it for StopTimeout is killed (and Stop
// says so). Stopping a server that had already exited is an error naming how it exited.
func (p *Process) Stop() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s had already exited: %v", p.name, p.waitErr)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(StopTimeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s ignored SIGTERM for %s and was killed", p.name, StopTimeout)
	}
}

// LogTail is the last 4000 bytes of the server's output with every secret masked.
func (p *Process) LogTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	// masked, then cut: a cut through the root token would leave a part of it no redactor knows
	return clip.Tail(p.redact.Redact(strings.TrimSpace(string(b))), 4000)
}

// FreePort asks the kernel for a free port on 127.0.0.1. Another process may take it before the
// server binds it; callers retry the start on ErrExited.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// HTTPStatus is the status of GET url, for readiness probes.
func HTTPStatus(ctx context.Context, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
