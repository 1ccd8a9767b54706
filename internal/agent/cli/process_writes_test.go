package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// stateWrites watches dir (inotify) for what a tick does to state.json: replaced counts the atomic
// replacements (a rename onto it), synced the temp files written and closed beside it (each one
// fsynced before its rename, and the directory after: two fsyncs a write).
type stateWrites struct {
	fd int
}

func watchStateDir(t *testing.T, dir string) *stateWrites {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		unix.Close(fd)
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &stateWrites{fd: fd}
}

// drain returns what happened to state.json since the last drain.
func (w *stateWrites) drain(t *testing.T) (replaced, tempsWritten int) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err == unix.EAGAIN {
			return replaced, tempsWritten
		}
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := string(bytes.TrimRight(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)], "\x00"))
			switch {
			case ev.Mask&unix.IN_MOVED_TO != 0 && name == "state.json":
				replaced++
			case ev.Mask&unix.IN_CLOSE_WRITE != 0 && strings.HasPrefix(name, ".state.json.tmp-"):
				tempsWritten++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// A converged tick writes state.json once (its check-in time and success stamp in one write), a
// second converged tick once again (the times moved), and a tick that changes nothing — tenancy
// gone, exit 75, the second time (the first records its exit code) — not at all. Before issue 24 a converged tick wrote it three times.
func TestConvergedTickWritesStateOnce(t *testing.T) {
	dir := t.TempDir()
	agentBin, dockerBin := buildBinaries(t, dir)
	cfgPath, ts, cleanup := convergedBoxWithTenancy(t, dir, dockerBin)
	defer cleanup()
	stateDir := filepath.Join(dir, "state")
	runProcess(t, agentBin, "--config", cfgPath, "tick") // the first tick also reports the upgrade
	w := watchStateDir(t, stateDir)

	for i := 1; i <= 2; i++ {
		before := len(ts.Reports(benchEnv))
		runProcess(t, agentBin, "--config", cfgPath, "tick")
		if len(ts.Reports(benchEnv)) != before+1 {
			t.Fatalf("converged tick %d sent no heartbeat", i)
		}
		if replaced, temps := w.drain(t); replaced != 1 || temps != 1 {
			t.Errorf("converged tick %d: state.json replaced %d times from %d temp files, want 1 write", i, replaced, temps)
		}
	}
	ts.Close() // nothing answers: the check-in fails
	failing := func() {
		t.Helper()
		cmd := exec.Command(agentBin, "--config", cfgPath, "tick")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 75 {
			t.Fatalf("tick without tenancy: exit %d, want 75\n%s", code, out)
		}
	}
	// The first failing tick records what changed (its exit code, the next check-in's
	// last_exit_code, issue 20) in one write; a second one changes nothing and writes nothing.
	failing()
	if replaced, temps := w.drain(t); replaced > 1 || temps > 1 {
		t.Errorf("the first failing tick replaced state.json %d times (%d temp files), want at most 1 write", replaced, temps)
	}
	stBefore, err := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	failing()
	if replaced, temps := w.drain(t); replaced != 0 || temps != 0 {
		t.Errorf("a tick that changed nothing replaced state.json %d times (%d temp files), want none", replaced, temps)
	}
	if after, _ := os.ReadFile(filepath.Join(stateDir, "state.json")); !bytes.Equal(after, stBefore) {
		t.Errorf("state.json changed although the tick changed nothing:\n%s\n%s", stBefore, after)
	}
}
