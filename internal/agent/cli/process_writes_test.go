package cli_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
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

// drain returns what happened to state.json since the last drain, and how often its clock file
// (state.ClockSuffix) was written.
func (w *stateWrites) drain(t *testing.T) (replaced, tempsWritten, clockWrites int) {
	t.Helper()
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(w.fd, buf)
		if err == unix.EAGAIN {
			return replaced, tempsWritten, clockWrites
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
			case ev.Mask&unix.IN_CLOSE_WRITE != 0 && name == "state.json"+state.ClockSuffix:
				clockWrites++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}

// fileID is what a write of state.json would change: its inode (an atomic replacement) and mtime.
func fileID(t *testing.T, path string) (ino uint64, mtime int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino, st.Mtim.Nano()
}

// A converged tick writes no state.json (issue 24): only its check-in time and success stamp
// moved, and those go to the clock file beside it, rewritten in place without fsync; status shows
// the tick's check-in all the same. A tick that changes nothing — tenancy gone, exit 75, the
// second time (the first records its exit code) — writes neither. Before issue 24 a converged
// tick wrote state.json three times, then once.
func TestConvergedTickWritesNoState(t *testing.T) {
	dir := t.TempDir()
	agentBin, dockerBin := buildBinaries(t, dir)
	cfgPath, ts, cleanup := convergedBoxWithTenancy(t, dir, dockerBin)
	defer cleanup()
	stateDir := filepath.Join(dir, "state")
	statePath := filepath.Join(stateDir, "state.json")
	runProcess(t, agentBin, "--config", cfgPath, "tick") // the first tick also reports the upgrade
	w := watchStateDir(t, stateDir)
	ino, mtime := fileID(t, statePath)

	for i := 1; i <= 2; i++ {
		before := len(ts.Reports(benchEnv))
		sent := time.Now()
		runProcess(t, agentBin, "--config", cfgPath, "tick")
		if len(ts.Reports(benchEnv)) != before+1 {
			t.Fatalf("converged tick %d sent no heartbeat", i)
		}
		if replaced, temps, clock := w.drain(t); replaced != 0 || temps != 0 || clock != 1 {
			t.Errorf("converged tick %d: state.json replaced %d times from %d temp files, its clock written %d times; want no write and one clock write", i, replaced, temps, clock)
		}
		if i2, m2 := fileID(t, statePath); i2 != ino || m2 != mtime {
			t.Errorf("converged tick %d: state.json was rewritten (inode %d→%d, mtime %d→%d)", i, ino, i2, mtime, m2)
		}
		out, err := exec.Command(agentBin, "--config", cfgPath, "status", "--json").Output()
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		var st struct {
			LastCheckinAt *time.Time `json:"last_checkin_at"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatal(err)
		}
		if st.LastCheckinAt == nil || st.LastCheckinAt.Before(sent) {
			t.Errorf("converged tick %d: status shows last_checkin_at %v, want this tick's (after %v)", i, st.LastCheckinAt, sent)
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
	if replaced, temps, _ := w.drain(t); replaced > 1 || temps > 1 {
		t.Errorf("the first failing tick replaced state.json %d times (%d temp files), want at most 1 write", replaced, temps)
	}
	stBefore, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	failing()
	if replaced, temps, clock := w.drain(t); replaced != 0 || temps != 0 || clock != 0 {
		t.Errorf("a tick that changed nothing replaced state.json %d times (%d temp files), its clock written %d times; want none", replaced, temps, clock)
	}
	if after, _ := os.ReadFile(statePath); !bytes.Equal(after, stBefore) {
		t.Errorf("state.json changed although the tick changed nothing:\n%s\n%s", stBefore, after)
	}
}
