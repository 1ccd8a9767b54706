package state

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A FIFO planted as the clock file neither hangs Load nor the save: it is no record, and the
// save that cannot write it writes state.json and removes it.
func TestClockFileFIFODoesNotHang(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := Save(p, &State{EnvID: "env-qa-02", LastCheckinAt: &t0}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p+ClockSuffix, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := Load(p)
		if err == nil {
			next := t0.Add(time.Minute)
			s.CheckinSucceeded(next)
			err = Save(p, s)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		// Unblock the goroutine so the test binary can end.
		if f, err := os.OpenFile(p+ClockSuffix, os.O_RDWR, 0); err == nil {
			f.Close()
		}
		t.Fatal("Load or Save hangs on a FIFO at the clock file")
	}
}

// A symlink planted as the clock file is not followed: its target keeps its content.
func TestClockFileSymlinkIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := Save(p, &State{EnvID: "env-qa-02", LastCheckinAt: &t0}); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "shadow")
	const content = "root:secret:1:0:99999:7:::\n"
	if err := os.WriteFile(victim, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	// The link appears after the tick loaded (a race), and before it.
	for _, early := range []bool{false, true} {
		if early {
			os.Remove(p + ClockSuffix)
			if err := os.Symlink(victim, p+ClockSuffix); err != nil {
				t.Fatal(err)
			}
		}
		s, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if !early {
			os.Remove(p + ClockSuffix)
			if err := os.Symlink(victim, p+ClockSuffix); err != nil {
				t.Fatal(err)
			}
		}
		t0 = t0.Add(time.Minute)
		s.CheckinSucceeded(t0)
		if err := Save(p, s); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(victim); string(b) != content {
			t.Fatalf("early=%v: the clock save wrote through a symlink: %q", early, b)
		}
		if s, err := Load(p); err != nil || !s.LastCheckinAt.Equal(t0) {
			t.Fatalf("early=%v: the check-in time was lost: %v, %v", early, s.LastCheckinAt, err)
		}
	}
}

// A huge clock file is not read whole.
func TestClockFileHugeIsNotRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := Save(p, &State{EnvID: "env-qa-02", LastCheckinAt: &t0}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(p + ClockSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil { // sparse
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := Load(p); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Errorf("Load of a 256 MiB clock file allocated %d bytes", n)
	}
}

// A state.json saved while the clock ran ahead does not hide the converged ticks after it: the
// clock file written over that very state.json is the later in time of writing, whatever its
// times say, and a clock file of another state.json (left by a crash before its removal) is not.
func TestClockRanAheadDoesNotStick(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ahead := now.Add(365 * 24 * time.Hour)
	if err := Save(p, &State{EnvID: "env-qa-02", AppliedSha: shaA, LastCheckinAt: &ahead, LastTickOKAt: &ahead}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		s, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		at := now.Add(time.Duration(i) * time.Minute)
		s.CheckinSucceeded(at)
		s.LastTickOKAt = &at
		if err := Save(p, s); err != nil {
			t.Fatal(err)
		}
		if s, err = Load(p); err != nil {
			t.Fatal(err)
		}
		if !s.LastTickOKAt.Equal(at) || !s.LastCheckinAt.Equal(at) {
			t.Fatalf("tick %d: Load gave %v, %v; want the tick's %v (state.json's %v ran ahead)", i, s.LastCheckinAt, s.LastTickOKAt, at, ahead)
		}
	}
	// A crash between a state.json write and the clock file's removal: the clock file, of the
	// state.json before, is not taken even when its times are later.
	further := ahead.Add(time.Hour)
	rec := encodeClock(clocks{LastCheckinAt: &further, LastTickOKAt: &further, StateSHA256: hashOf([]byte("{}"))})
	if err := os.WriteFile(p+ClockSuffix, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if s.LastTickOKAt.Equal(further) {
		t.Errorf("Load took the times of a clock file written over another state.json")
	}
}
