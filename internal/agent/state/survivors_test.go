package state

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests that close survivors of `make mutate` in this package (README, "Mutation testing").

// Every edge of the version alphabet: the first and last digit and letter of each case are part
// of a version; the characters just outside each range are not.
func TestParseUpgradedFromAlphabetEdges(t *testing.T) {
	if v, err := ParseUpgradedFrom([]byte("0aA9zZ.+~:-\n")); err != nil || v != "0aA9zZ.+~:-" {
		t.Errorf("every edge of the alphabet: %q, %v", v, err)
	}
	for _, r := range "/@[`{" {
		if _, err := ParseUpgradedFrom([]byte("0.1" + string(r) + "9")); err == nil {
			t.Errorf("%q accepted in a version", r)
		}
	}
}

// A token recorded without a TTL (ttl_s 0, as a periodic or root token has) has no TTL left to
// show: nil, not 0, which would read as an expired token.
func TestTTLLeftOfATokenWithoutTTL(t *testing.T) {
	var st State
	if err := json.Unmarshal([]byte(`{"token": {"obtained_at": "2026-12-03T10:00:00Z", "ttl_s": 0}}`), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Token.TTLLeft(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)); got != nil {
		t.Errorf("TTLLeft of a token without a TTL = %d, want nil", *got)
	}
}

// The longest back-off still holds at the instant it was set: a next try exactly MaxBackoff
// ahead is a back-off, not a clock turned back.
func TestBackingOffAtTheLongestDelay(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var s State
	for range 10 {
		s.NoteDeployFailure("9f3e", now)
	}
	if s.Backoff.NextAttemptAt.Sub(now) != MaxBackoff || !s.BackingOff("9f3e", now) {
		t.Errorf("next try %v after the 10th failure: backing off %v, want true", s.Backoff.NextAttemptAt.Sub(now), s.BackingOff("9f3e", now))
	}
}

// An apply in progress (written before compose runs, read by the tick after a kill) loads back;
// one without a sha is refused, naming the field.
func TestApplyingRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	st := &State{EnvID: "env-qa-02", Applying: &ApplyInProgress{Sha: "9f3e"}}
	if err := Save(p, st); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil || got.Applying == nil || got.Applying.Sha != "9f3e" {
		t.Fatalf("applying after a round trip: %+v, %v", got.Applying, err)
	}
	var bad State
	if err := json.Unmarshal([]byte(`{"applying": {}}`), &bad); err == nil || !strings.Contains(err.Error(), "applying") {
		t.Errorf("an apply without a sha: %v", err)
	}
}

// The highest exit code a process has (255, e.g. ssh's) is one the state records.
func TestLastExitCode255(t *testing.T) {
	var st State
	if err := json.Unmarshal([]byte(`{"last_exit_code": 255}`), &st); err != nil || st.LastExitCode == nil || *st.LastExitCode != 255 {
		t.Errorf("last_exit_code 255: %v", err)
	}
}

// A reserve in order is left as it is by the next save (no write, the same file); one of an odd
// size, or too small for the state, is made again.
func TestTendReserveWritesOnlyWhenOutOfOrder(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	s := backoffState(1)
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	inode := func() uint64 {
		fi, err := os.Stat(p + ReserveSuffix)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	s.Backoff.Attempts = 2
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	if inode() != before {
		t.Error("a reserve in order was made again on the next save")
	}

	for name, size := range map[string]int64{"odd size": 2*minReserveSlot + 1, "too small": 2 * 256} {
		if err := os.WriteFile(p+ReserveSuffix, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		s.Backoff.Attempts++
		if err := Save(p, s); err != nil {
			t.Fatal(err)
		}
		data, _ := os.ReadFile(p)
		if fi, err := os.Stat(p + ReserveSuffix); err != nil || fi.Size() != int64(2*reserveSlotFor(len(data))) {
			t.Errorf("%s: the reserve is %v bytes after the save, want two slots of %d", name, fi.Size(), reserveSlotFor(len(data)))
		}
	}
}

// A save that fills a reserve slot to its last byte (header and state) is kept; one byte more
// is refused, not cut.
func TestReserveKeepsASaveThatFitsExactly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(p, []byte(`{"env_id":"env-qa-01"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	over, err := fileHash(p)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte(`{"env_id":"env-qa-01","last_result":"applied"}`)
	h := reserveSlot{seq: 1, over: over, size: len(data), sum: hashOf(data)}
	for _, tc := range []struct {
		name string
		slot int
		fits bool
	}{
		{"exactly", len(h.header()) + len(data), true},
		{"one byte short", len(h.header()) + len(data) - 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(p+ReserveSuffix, make([]byte, 2*tc.slot), 0o600); err != nil {
				t.Fatal(err)
			}
			err := keepInReserve(p, data)
			if tc.fits {
				if err != nil {
					t.Fatalf("a save of exactly the slot's size: %v", err)
				}
				if got, _, _, ok := readReserve(p, over); !ok || string(got) != string(data) {
					t.Errorf("the reserve reads back %q (%v), want %q", got, ok, data)
				}
			} else if err == nil || !strings.Contains(err.Error(), "does not fit") {
				t.Errorf("a save one byte over the slot: %v, want does not fit", err)
			}
		})
	}
}
