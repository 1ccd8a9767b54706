package state

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A save that moves only the two clocks (a converged tick: its check-in time and success stamp)
// leaves state.json as it is and writes the clock file; Load reads the later clocks back; a save
// that changes anything else writes state.json with the clocks and removes the clock file.
func TestSaveOfTheClocksAloneLeavesStateJSON(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := t0.Add(d); return &v }
	if err := Save(p, &State{EnvID: "env-qa-02", AppliedSha: shaA, LastCheckinAt: at(0), LastTickOKAt: at(0)}); err != nil {
		t.Fatal(err)
	}
	disk := func() string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	before := disk()
	beforeInfo, _ := os.Stat(p)

	for i := 1; i <= 3; i++ {
		s, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if !s.LastCheckinAt.Equal(*at(time.Duration(i-1) * time.Minute)) {
			t.Fatalf("tick %d: Load gave last_checkin_at %v, want the last tick's", i, s.LastCheckinAt)
		}
		s.CheckinSucceeded(*at(time.Duration(i) * time.Minute))
		s.LastTickOKAt = at(time.Duration(i)*time.Minute + time.Second)
		if err := Save(p, s); err != nil {
			t.Fatal(err)
		}
		if got := disk(); got != before {
			t.Fatalf("tick %d: state.json rewritten for its clocks alone:\n%s", i, got)
		}
		if info, _ := os.Stat(p); !os.SameFile(info, beforeInfo) || !info.ModTime().Equal(beforeInfo.ModTime()) {
			t.Fatalf("tick %d: state.json replaced or touched", i)
		}
		// The same state saved again (a second save in one tick) writes nothing more.
		clockInfo, err := os.Stat(p + ClockSuffix)
		if err != nil {
			t.Fatalf("tick %d: no clock file: %v", i, err)
		}
		prev := writeClock
		writeClock = func(string, clocks, bool) error {
			t.Fatal("the clock file was written twice for the same clocks")
			return nil
		}
		err = Save(p, s)
		writeClock = prev
		if err != nil {
			t.Fatal(err)
		}
		if again, _ := os.Stat(p + ClockSuffix); !again.ModTime().Equal(clockInfo.ModTime()) {
			t.Fatalf("tick %d: the clock file was rewritten", i)
		}
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !s.LastCheckinAt.Equal(*at(3 * time.Minute)) || !s.LastTickOKAt.Equal(*at(3*time.Minute + time.Second)) {
		t.Fatalf("Load gave %v, %v: want the clock file's", s.LastCheckinAt, s.LastTickOKAt)
	}
	s.LastResult = "healthy"
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	if got := disk(); !strings.Contains(got, `"healthy"`) || !strings.Contains(got, t0.Add(3*time.Minute).Format(time.RFC3339)) {
		t.Fatalf("a changed state was written without its result or its clocks:\n%s", got)
	}
	if _, err := os.Stat(p + ClockSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the clock file outlived a write of state.json: %v", err)
	}
}

// The clock file counts only when written over this very state.json (its state_sha256): one of
// another state.json (written since), a torn one (a crash while writing it) or one of another
// shape leaves state.json's clocks.
func TestLoadTakesTheLaterClock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := Save(p, &State{EnvID: "env-qa-02", LastCheckinAt: &t0, LastTickOKAt: &t0}); err != nil {
		t.Fatal(err)
	}
	earlier, later := t0.Add(-time.Hour), t0.Add(time.Hour)
	laterRec := string(encodeClock(clocks{LastCheckinAt: &later, LastTickOKAt: &later}))
	for name, c := range map[string]string{
		"earlier":       string(encodeClock(clocks{LastCheckinAt: &earlier, LastTickOKAt: &earlier})),
		"torn":          laterRec[:40],
		"not clocks":    `{"last_checkin_at":42}` + strings.Repeat(" ", clockRecord-23) + "\n",
		"empty":         ``,
		"another size":  `{"last_checkin_at":"2026-12-03T11:00:00Z"}`,
		"a longer tail": laterRec + "garbage",
	} {
		if err := os.WriteFile(p+ClockSuffix, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Load(p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !s.LastCheckinAt.Equal(t0) || !s.LastTickOKAt.Equal(t0) {
			t.Errorf("%s clock file: Load gave %v, %v; want state.json's %v", name, s.LastCheckinAt, s.LastTickOKAt, t0)
		}
	}
	// A later check-in alone, written over this state.json: the success stamp stays state.json's.
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+ClockSuffix, encodeClock(clocks{LastCheckinAt: &later, StateSHA256: hashOf(data)}), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Hour); !s.LastCheckinAt.Equal(want) || !s.LastTickOKAt.Equal(t0) {
		t.Errorf("Load gave %v, %v; want %v, %v", s.LastCheckinAt, s.LastTickOKAt, want, t0)
	}
	// A clock file that is no record (a longer tail) is cut to the new record when written.
	if err := os.WriteFile(p+ClockSuffix, []byte(laterRec+"garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err = Load(p); err != nil {
		t.Fatal(err)
	}
	next := t0.Add(2 * time.Hour)
	s.CheckinSucceeded(next)
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	if s, err = Load(p); err != nil || !s.LastCheckinAt.Equal(next) {
		t.Errorf("after a clock write over a longer file: %v, %v; want %v", s.LastCheckinAt, err, next)
	}
}

// A clock file that cannot be written (a full disk) leaves the save to state.json, which carries
// the clocks or names the failure as before.
func TestClockWriteFailureFallsBackToStateJSON(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if err := Save(p, &State{EnvID: "env-qa-02", LastCheckinAt: &t0}); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	prev := writeClock
	writeClock = func(string, clocks, bool) error { return errors.New("no space left on device") }
	defer func() { writeClock = prev }()
	t1 := t0.Add(time.Minute)
	s.CheckinSucceeded(t1)
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if !strings.Contains(string(b), t1.Format(time.RFC3339)) {
		t.Errorf("state.json does not carry the clock the clock file could not:\n%s", b)
	}
}

// A converged tick after the first asks whether state.json changed without encoding the state
// (the deep comparison with what Load decoded), once a save found that state.json in Save's own
// layout; and that comparison misses no change, whatever field, however deep, a tick changes.
func TestClockOnlySaveComparesWithoutEncoding(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	mk := func() *State {
		code := 0
		return &State{EnvID: "env-qa-02", AppliedSha: shaA, History: []string{shaB, shaA}, LastCheckinAt: &t0, LastTickOKAt: &t0,
			Token:    &TokenMeta{Source: SourceLease, Accessor: "acc", ObtainedAt: t0, TTLSec: 3600},
			Counters: Counters{Applies: 2}, LastExitCode: &code,
			Drift:       &DriftMemory{Sha: shaA, Services: map[string]ServiceHash{"api": {ConfigHash: strings.Repeat("a", 64), Containers: 1}}},
			LastFailure: &Failure{Sha: shaB, Code: "UNHEALTHY", Detail: "x", At: t0, Attempts: 1}}
	}
	if err := Save(p, mk()); err != nil {
		t.Fatal(err)
	}
	encodes := 0
	prev := compareEncode
	compareEncode = func(s *State) ([]byte, error) { encodes++; return prev(s) }
	defer func() { compareEncode = prev }()
	tick := func(i int, change func(*State)) (wrote bool) {
		t.Helper()
		before, _ := os.Stat(p)
		s, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		s.CheckinSucceeded(t0.Add(time.Duration(i) * time.Minute))
		if change != nil {
			change(s)
		}
		if err := Save(p, s); err != nil {
			t.Fatal(err)
		}
		after, _ := os.Stat(p)
		return !os.SameFile(before, after)
	}
	if tick(1, nil) || encodes != 1 {
		t.Fatalf("the first clock-only save: encoded %d times, want once (nothing yet says the file is Save's)", encodes)
	}
	for i := 2; i <= 3; i++ {
		if tick(i, nil) || encodes != 1 {
			t.Fatalf("clock-only save %d: encoded %d times in all, want no more", i, encodes)
		}
	}
	for name, change := range map[string]func(*State){
		"a nested pointer's field": func(s *State) { s.Token.TTLSec++ },
		"a map's value": func(s *State) {
			s.Drift.Services["api"] = ServiceHash{ConfigHash: strings.Repeat("b", 64), Containers: 1}
		},
		"a map's new key": func(s *State) {
			s.Drift.Services["web"] = ServiceHash{ConfigHash: strings.Repeat("c", 64), Containers: 1}
		},
		"a slice's element":                func(s *State) { s.History[0] = shaA },
		"a slice grown":                    func(s *State) { s.AddHistory(strings.Repeat("c", 64)) },
		"a value through a shared pointer": func(s *State) { *s.LastExitCode = 1 },
		"a counter":                        func(s *State) { s.Counters.Refusals++ },
		"a string":                         func(s *State) { s.LastResult = "healthy" },
		"a pointer set":                    func(s *State) { s.Hold = &Hold{By: "ops", Reason: "x", Since: t0, Until: t0.Add(time.Hour)} },
		"a pointer cleared":                func(s *State) { s.LastFailure = nil },
		"a time":                           func(s *State) { s.LastFailure.At = s.LastFailure.At.Add(time.Second) },
	} {
		if !tick(10, change) {
			t.Errorf("%s: the change was not written", name)
		}
		// Put the state back as it was (each change is judged alone) and let a clock-only save
		// record its layout again.
		if err := Save(p, mk()); err != nil {
			t.Fatal(err)
		}
		tick(11, nil)
	}
}

// A clock file whose hash is not that of state.json (state.json replaced by hand, or written
// in another layout since) is no reason to trust the comparison: the state is encoded, and a
// state.json in another layout rewritten.
func TestClockOfAnotherStateJSONIsNotTrusted(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(p, []byte(`{"env_id": "env-qa-02", "applied_sha": "`+shaA+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	rec := encodeClock(clocks{LastCheckinAt: &t0, StateSHA256: strings.Repeat("0", 64)})
	if err := os.WriteFile(p+ClockSuffix, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	s.CheckinSucceeded(t0.Add(time.Minute))
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), "\n  \"applied_sha\"") {
		t.Errorf("a state.json in another layout was not rewritten in Save's:\n%s", b)
	}
}

// Every shape of clock record reads back as written: no time, one, both, with and without the
// state's hash (a record with no time before the hash was once written with a leading comma).
func TestClockRecordRoundTrips(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 41, 24, 123456789, time.UTC)
	later := at.Add(time.Minute)
	for _, c := range []clocks{
		{}, {StateSHA256: strings.Repeat("ab", 32)},
		{LastCheckinAt: &at}, {LastTickOKAt: &later, StateSHA256: strings.Repeat("cd", 32)},
		{LastCheckinAt: &at, LastTickOKAt: &later, StateSHA256: strings.Repeat("ef", 32)},
	} {
		rec := encodeClock(c)
		var got clocks
		if len(rec) != clockRecord || json.Unmarshal(rec, &got) != nil {
			t.Errorf("%+v: a record of %d bytes that does not decode: %q", c, len(rec), rec)
			continue
		}
		if !got.equal(c) || got.StateSHA256 != c.StateSHA256 {
			t.Errorf("%+v read back as %+v", c, got)
		}
	}
}

// Two clocks are equal when their times are, whatever the pointers; an absent time equals only
// an absent one.
func TestClocksEqual(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 41, 24, 0, time.UTC)
	same, other := at.In(time.FixedZone("CET", 3600)), at.Add(time.Second)
	for _, tc := range []struct {
		a, b clocks
		want bool
	}{
		{clocks{}, clocks{}, true},
		{clocks{LastCheckinAt: &at}, clocks{LastCheckinAt: &same}, true},
		{clocks{LastCheckinAt: &at}, clocks{LastCheckinAt: &other}, false},
		{clocks{LastCheckinAt: &at}, clocks{}, false},
		{clocks{}, clocks{LastTickOKAt: &at}, false},
		{clocks{LastTickOKAt: &at}, clocks{LastTickOKAt: &same}, true},
	} {
		if got := tc.a.equal(tc.b); got != tc.want {
			t.Errorf("%+v equal %+v = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
