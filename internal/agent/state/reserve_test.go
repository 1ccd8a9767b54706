package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullDisk makes every state.json write meet ENOSPC until the returned func frees the disk.
func fullDisk(t *testing.T) (free func()) {
	t.Helper()
	real := writeFile
	writeFile = func(path string, _ []byte, _ os.FileMode) error {
		return &fs.PathError{Op: "write", Path: path, Err: syscall.ENOSPC}
	}
	free = func() { writeFile = real }
	t.Cleanup(free)
	return free
}

func backoffState(n int) *State {
	return &State{EnvID: "env-qa-02", AppliedSha: "7a10", Backoff: &DeployBackoff{Sha: "9f3e", Attempts: n,
		NextAttemptAt: time.Date(2026, 12, 3, 10, n, 0, 0, time.UTC)}}
}

// A save the full disk refuses is kept in the reserve, in place, and read back by Load: the
// deploy backoff survives a full disk. The reserve never grows or shrinks.
func TestFullDiskKeepsTheStateInTheReserve(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	if err := Save(p, backoffState(1)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(p)
	fi, err := os.Stat(p + ReserveSuffix)
	if err != nil || fi.Size() != 2*minReserveSlot || fi.Mode().Perm() != 0o600 {
		t.Fatalf("reserve after the first save: %v, %v", fi, err)
	}
	free := fullDisk(t)
	for n := 2; n <= 4; n++ {
		err := Save(p, backoffState(n))
		if !errors.Is(err, ErrKeptInReserve) || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "state.json.reserve") {
			t.Fatalf("save %d on a full disk = %v", n, err)
		}
		st, err := Load(p)
		if err != nil || !st.FromReserve() || st.Backoff.Attempts != n {
			t.Fatalf("load after save %d: %+v, %v", n, st, err)
		}
		if after, _ := os.ReadFile(p); string(after) != string(before) {
			t.Fatal("state.json changed on a full disk")
		}
		if fi2, _ := os.Stat(p + ReserveSuffix); fi2.Size() != fi.Size() {
			t.Fatalf("the reserve went from %d to %d bytes", fi.Size(), fi2.Size())
		}
	}

	// A write of the newest slot cut short: its sum fails, the slot before stands.
	b, _ := os.ReadFile(p + ReserveSuffix)
	slot := len(b) / 2
	// saves 2, 3, 4 were the reserve's seq 1, 2, 3: slots 1, 0, 1
	if !strings.HasPrefix(string(b[slot:]), reserveMagic+"seq=3 ") || !strings.HasPrefix(string(b), reserveMagic+"seq=2 ") {
		t.Fatalf("slots = %.60q, %.60q", b, b[slot:])
	}
	copy(b[slot+200:], "torn")
	if err := os.WriteFile(p+ReserveSuffix, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := Load(p); err != nil || !st.FromReserve() || st.Backoff.Attempts != 3 {
		t.Fatalf("load with the newest slot torn: %+v, %v", st, err)
	}

	// Space is back: state.json is written, the reserve's slots are retired in place.
	free()
	if err := Save(p, backoffState(5)); err != nil {
		t.Fatal(err)
	}
	st, err := Load(p)
	if err != nil || st.FromReserve() || st.Backoff.Attempts != 5 {
		t.Fatalf("after the disk was freed: %+v, %v", st, err)
	}
	if _, _, _, found := readReserve(p, "none"); found {
		t.Error("a slot survived")
	}
	b, _ = os.ReadFile(p + ReserveSuffix)
	if strings.Contains(string(b), reserveMagic) {
		t.Error("the reserve's slots were not retired")
	}
	// Even a state.json written back to the very bytes a slot was written over stays ahead.
	if err := os.WriteFile(p, before, 0o600); err != nil {
		t.Fatal(err)
	}
	if st, _ := Load(p); st.FromReserve() {
		t.Error("a retired slot was read")
	}
}

// A slot counts only over the state.json it was written over: a file replaced since (by a
// save that got through, or an operator starting afresh) is newer.
func TestReserveSlotsOverAnotherStateAreStale(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	if err := Save(p, backoffState(1)); err != nil {
		t.Fatal(err)
	}
	fullDisk(t)
	if err := Save(p, backoffState(2)); !errors.Is(err, ErrKeptInReserve) {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if st, err := Load(p); err != nil || st.FromReserve() || st.Backoff != nil {
		t.Errorf("state.json removed by hand: %+v, %v; want a fresh state", st, err)
	}
	if err := os.WriteFile(p, []byte(`{"env_id":"env-qa-02"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := Load(p); err != nil || st.FromReserve() || st.Backoff != nil {
		t.Errorf("state.json replaced: %+v, %v", st, err)
	}
}

// Without a reserve (the first save ever, on a full disk) or with a state too big for a slot,
// the save fails as it did, saying so.
func TestReserveThatCannotKeepTheSave(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	fullDisk(t)
	err := Save(p, backoffState(1))
	if err == nil || errors.Is(err, ErrKeptInReserve) || !strings.Contains(err.Error(), "the reserve could not keep it either") {
		t.Errorf("no reserve: %v", err)
	}
	if err := os.WriteFile(p+ReserveSuffix, make([]byte, 2*1024), 0o600); err != nil {
		t.Fatal(err)
	}
	big := backoffState(1)
	big.LastDetail = strings.Repeat("x", 4096)
	if err := Save(p, big); err == nil || errors.Is(err, ErrKeptInReserve) || !strings.Contains(err.Error(), "does not fit") {
		t.Errorf("too big: %v", err)
	}
}

// The reserve grows with state.json while there is space, so a long history still fits it.
func TestReserveGrowsWithTheState(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	s := backoffState(1)
	for i := range 2000 {
		s.History = append(s.History, fmt.Sprintf("%064x", i))
	}
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	fi, _ := os.Stat(p + ReserveSuffix)
	if fi.Size()/2 < int64(len(data)+512) {
		t.Fatalf("a %d-byte state got %d-byte slots", len(data), fi.Size()/2)
	}
	fullDisk(t)
	s.Backoff.Attempts = 2
	if err := Save(p, s); !errors.Is(err, ErrKeptInReserve) {
		t.Fatal(err)
	}
	if st, err := Load(p); err != nil || st.Backoff.Attempts != 2 || len(st.History) != 2000 {
		t.Fatalf("%v", err)
	}
}

// FuzzReserveSlot: a slot the reserve file holds is outside input (a torn write, a hand edit):
// never a panic, and a slot that parses is exactly what its header says.
func FuzzReserveSlot(f *testing.F) {
	good := reserveSlot{seq: 3, over: "none", size: 2, sum: hashOf([]byte("{}"))}
	f.Add([]byte(good.header() + "{}\n\n\n"))
	f.Add([]byte(reserveMagic + "seq=1 over=none len=99 sum=x\n{}"))
	f.Add([]byte(reserveMagic + "seq=-1 over= len=0 sum=\n"))
	f.Add([]byte("\n\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, content, ok := parseReserveSlot(b)
		if !ok {
			return
		}
		if len(content) != h.size || hashOf(content) != h.sum || h.over == "" {
			t.Fatalf("parsed %+v with %d bytes of content", h, len(content))
		}
		again, c2, ok := parseReserveSlot(append([]byte(h.header()), content...))
		if !ok || again != h || string(c2) != string(content) {
			t.Fatalf("round trip: %+v %v", again, ok)
		}
	})
}
