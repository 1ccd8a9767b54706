package runner

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestExecRun(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name       string
		cmd        Cmd
		env        []string
		wantOut    string
		wantErrOut string
		wantCode   int
	}{
		{
			name:    "stdout and success",
			cmd:     Cmd{Name: "sh", Args: []string{"-c", "echo hello"}},
			wantOut: "hello\n",
		},
		{
			name:       "non-zero exit is a result, not an error",
			cmd:        Cmd{Name: "sh", Args: []string{"-c", "echo oops >&2; exit 3"}},
			wantErrOut: "oops\n",
			wantCode:   3,
		},
		{
			name:     "killed by a signal reports 128+N",
			cmd:      Cmd{Name: "sh", Args: []string{"-c", "kill -TERM $$"}},
			wantCode: 128 + int(syscall.SIGTERM),
		},
		{
			name:    "env is appended to the inherited one and a later entry wins",
			cmd:     Cmd{Name: "sh", Args: []string{"-c", `echo "$BASE/$EXTRA"`}, Env: []string{"EXTRA=x", "BASE=overridden"}},
			env:     []string{"BASE=base", "PATH=" + os.Getenv("PATH")},
			wantOut: "overridden/x\n",
		},
		{
			name:    "inherited env survives",
			cmd:     Cmd{Name: "sh", Args: []string{"-c", `echo "$BASE"`}, Env: []string{"EXTRA=x"}},
			env:     []string{"BASE=base", "PATH=" + os.Getenv("PATH")},
			wantOut: "base\n",
		},
		{
			name:    "OnlyEnv: nothing inherited, not even an empty Env",
			cmd:     Cmd{Name: "/bin/sh", Args: []string{"-c", `echo "[$BASE][$EXTRA]"`}, Env: []string{"EXTRA=x"}, OnlyEnv: true},
			env:     []string{"BASE=base", "PATH=" + os.Getenv("PATH")},
			wantOut: "[][x]\n",
		},
		{
			name:    "OnlyEnv with no Env runs with an empty environment",
			cmd:     Cmd{Name: "/bin/sh", Args: []string{"-c", `echo "[$BASE]"`}, OnlyEnv: true},
			env:     []string{"BASE=base"},
			wantOut: "[]\n",
		},
		{
			name:    "working directory",
			cmd:     Cmd{Name: "pwd", Dir: dir},
			wantOut: dir + "\n",
		},
		{
			name:    "stdin",
			cmd:     Cmd{Name: "cat", Stdin: []byte("from stdin")},
			wantOut: "from stdin",
		},
		{
			name: "no stdin reads EOF at once",
			cmd:  Cmd{Name: "cat"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Exec{Environ: tt.env}.Run(context.Background(), tt.cmd)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := string(res.Stdout); got != tt.wantOut {
				t.Errorf("stdout = %q, want %q", got, tt.wantOut)
			}
			if got := string(res.Stderr); got != tt.wantErrOut {
				t.Errorf("stderr = %q, want %q", got, tt.wantErrOut)
			}
			if res.ExitCode != tt.wantCode {
				t.Errorf("exit code = %d, want %d", res.ExitCode, tt.wantCode)
			}
		})
	}
}

func TestExecStartFailures(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name         string
		cmd          Cmd
		wantNotFound bool
	}{
		{"program not in PATH", Cmd{Name: "monky-no-such-program"}, true},
		{"program path absent", Cmd{Name: filepath.Join(dir, "absent")}, true},
		{"working directory absent", Cmd{Name: "sh", Args: []string{"-c", "true"}, Dir: filepath.Join(dir, "gone")}, false},
		{"empty name", Cmd{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Exec{}.Run(context.Background(), tt.cmd)
			if err == nil {
				t.Fatal("Run succeeded, want a start error")
			}
			if got := errors.Is(err, ErrNotFound); got != tt.wantNotFound {
				t.Errorf("errors.Is(%v, ErrNotFound) = %v, want %v", err, got, tt.wantNotFound)
			}
		})
	}
}

func TestExecContextAlreadyDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Exec{}.Run(ctx, Cmd{Name: "sh", Args: []string{"-c", "true"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// TestExecCancelKillsProcessGroup starts a shell whose background child holds a FIFO open for
// writing. Opening the FIFO for reading returns once that grandchild runs; after the cancel,
// reading it reaches EOF only when every writer is dead — which proves the whole group was killed,
// not just the shell, without a single sleep.
func TestExecCancelKillsProcessGroup(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "held")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatalf("mkfifo: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := Exec{}.Run(ctx, Cmd{Name: "sh", Args: []string{"-c", "echo started; sleep 600 > " + strconv.Quote(fifo) + " & wait"}})
		done <- outcome{res, err}
	}()

	r, err := os.OpenFile(fifo, os.O_RDONLY, 0) // blocks until the grandchild opened it
	if err != nil {
		t.Fatalf("open fifo: %v", err)
	}
	defer r.Close()
	cancel()
	got := <-done
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", got.err)
	}
	if !strings.Contains(string(got.res.Stdout), "started") {
		t.Errorf("output captured before the cancel was lost: %q", got.res.Stdout)
	}
	// A safety net so a surviving grandchild fails the test instead of hanging it.
	if err := r.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatalf("set deadline: %v", err)
	}
	if _, err := io.ReadAll(r); err != nil {
		t.Fatalf("grandchild still holds the FIFO after cancel: %v", err)
	}
}

func TestCmdString(t *testing.T) {
	tests := []struct {
		cmd  Cmd
		want string
	}{
		{Cmd{Name: "docker"}, "docker"},
		{Cmd{Name: "docker", Args: []string{"compose", "ps"}}, "docker compose ps"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.cmd.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}
