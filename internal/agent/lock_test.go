package agent_test

import (
	"os"
	"syscall"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/state"
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

// endBackoff ends the deploy backoff a failed apply started, for tests about something else
// that need the next tick to try the desired sha again.
func (h *harness) endBackoff() {
	h.t.Helper()
	st := h.state()
	if st.Backoff != nil {
		st.Backoff.NextAttemptAt = h.clock.Now()
		if err := state.Save(h.cfg.StatePath(), st); err != nil {
			h.t.Fatal(err)
		}
	}
}
