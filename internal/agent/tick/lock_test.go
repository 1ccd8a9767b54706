package tick_test

import (
	"os"
	"syscall"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// holdLock takes the tick lock on f, as a running tick would.
func holdLock(t *testing.T, f *os.File) {
	t.Helper()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
}

func saveState(t *testing.T, h *harness, st *state.State) {
	t.Helper()
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		t.Fatal(err)
	}
}
