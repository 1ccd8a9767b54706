package state

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const hash1 = "626a9bcfe94badb776855e66c87f0daf3065d98ac87795582be6ce8127e77160"

// A hold, a deferral and the drift memory survive a save and a load whole.
func TestIssue22FieldsRoundTrip(t *testing.T) {
	since := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	yes := false
	next := since.Add(2 * time.Minute)
	st := &State{AppliedSha: shaB,
		Hold:     &Hold{Reason: "debugging the db — ünïcode ok", By: "alice", Since: since, Until: since.Add(4 * time.Hour)},
		Deferred: &Deferral{Action: "apply", Sha: shaB, Since: since, Until: since.Add(16 * time.Hour)},
		Drift: &DriftMemory{Sha: shaB, Services: map[string]ServiceHash{"api": {ConfigHash: hash1, Containers: 2}},
			Correct: &yes, Attempts: 1, NextAttemptAt: &next, Refused: "changed on disk"},
		Counters: Counters{DriftCorrections: 3},
	}
	path := filepath.Join(t.TempDir(), "state.json")
	if err := Save(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !statesEqual(st, got) || got.Hold.By != "alice" || got.Drift.Services["api"].Containers != 2 || got.Counters.DriftCorrections != 3 {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, st)
	}
	if m := got.MemoryFor(shaB); m == nil || got.MemoryFor("other") != nil || got.MemoryFor("") != nil {
		t.Errorf("MemoryFor: %v", m)
	}
	if note := got.Hold.Note(); note != "held by alice until 2026-12-02T14:00:00Z: debugging the db — ünïcode ok" {
		t.Errorf("Note = %q", note)
	}
	if !got.Hold.Active(since.Add(4*time.Hour-time.Second)) || got.Hold.Active(since.Add(4*time.Hour)) {
		t.Error("a hold is active until, not including, its until")
	}
}

// Every hold, deferral or drift memory no agent writes is refused, naming the field.
func TestIssue22FieldsRefused(t *testing.T) {
	ok := `"reason": "r", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"`
	for _, c := range []struct{ body, want string }{
		{`{"hold": {"by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: reason: empty"},
		{`{"hold": {"reason": "   ", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: reason: empty"},
		{`{"hold": {"reason": "a\nb", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: reason: contains U+000A, a control or format character"},
		{`{"hold": {"reason": "a\u001b[31m", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: reason: contains U+001B"},
		{`{"hold": {"reason": "r", "by": "bob\u202e", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: by: contains U+202E"},
		{`{"hold": {"reason": "a\u200bb", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: reason: contains U+200B"},
		{`{"hold": {"reason": "r", "by": "` + strings.Repeat("b", MaxHoldBy+1) + `", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: by: 65 characters"},
		{`{"hold": {"reason": "` + strings.Repeat("x", MaxHoldReason+1) + `", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: reason: 201 characters"},
		{`{"hold": {"reason": "r", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`, "hold: by: empty"},
		{`{"hold": {"reason": "r", "by": "bob", "until": "2026-12-02T14:00:00Z"}}`, "hold: since: missing"},
		{`{"hold": {"reason": "r", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T10:00:00Z"}}`, "hold: until: not after since"},
		{`{"hold": {"reason": "r", "by": "bob", "since": "2026-12-02T10:00:00Z", "until": "2026-12-09T10:00:01Z"}}`, "hold: until: 168h0m1s after since"},
		{`{"hold": {` + ok + `, "since": 5}}`, "hold"},
		{`{"hold": []}`, "hold"},
		{`{"deferred": {"action": "none", "until": "2026-12-02T14:00:00Z"}}`, `deferred: action: "none"`},
		{`{"deferred": {"action": "apply"}}`, "deferred: until: missing"},
		{`{"drift": {"services": {}}}`, "drift: sha: empty"},
		{`{"drift": {"sha": "x", "attempts": -1}}`, "drift: attempts: negative"},
		{`{"drift": {"sha": "x", "services": {"api": {"config_hash": "abc", "containers": 1}}}}`, "drift: services.api.config_hash"},
		{`{"drift": {"sha": "x", "services": {"api": {"config_hash": "` + hash1 + `", "containers": 0}}}}`, "drift: services.api.containers"},
		{`{"drift": {"sha": "x", "services": {"a pi": {"config_hash": "` + hash1 + `", "containers": 1}}}}`, `drift: services: "a pi"`},
		{`{"counters": {"drift_corrections": -1}}`, "counters"},
	} {
		var st State
		err := json.Unmarshal([]byte(c.body), &st)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.body, err, c.want)
		}
	}
	var st State
	if err := json.Unmarshal([]byte(`{"hold": {`+ok+`}}`), &st); err != nil || st.Hold == nil {
		t.Errorf("a good hold: %v", err)
	}
	// Characters, not bytes: 200 × "€" is 600 bytes and a reason fleetctl reads.
	long := `{"hold": {"reason": "` + strings.Repeat("€", MaxHoldReason) + `", "by": "` + strings.Repeat("ü", MaxHoldBy) + `", "since": "2026-12-02T10:00:00Z", "until": "2026-12-02T14:00:00Z"}}`
	if err := json.Unmarshal([]byte(long), &st); err != nil || st.Hold == nil {
		t.Errorf("a hold at the bounds in characters: %v", err)
	}
}

func TestDriftBackingOff(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	var none *DriftMemory
	for _, c := range []struct {
		m    *DriftMemory
		want bool
	}{
		{none, false},
		{&DriftMemory{Sha: "x"}, false},
		{&DriftMemory{Sha: "x", NextAttemptAt: at(time.Minute)}, true},
		{&DriftMemory{Sha: "x", NextAttemptAt: at(0)}, false},
		{&DriftMemory{Sha: "x", NextAttemptAt: at(MaxBackoff)}, true},                // the longest backoff, just set, waits
		{&DriftMemory{Sha: "x", NextAttemptAt: at(MaxBackoff + time.Second)}, false}, // a clock set back: due now
		{&DriftMemory{Sha: "x", NextAttemptAt: at(2 * time.Hour)}, false},
	} {
		if got := c.m.BackingOff(now); got != c.want {
			t.Errorf("BackingOff(%+v) = %v, want %v", c.m, got, c.want)
		}
	}
}

func TestHoldTooFar(t *testing.T) {
	now := time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name         string
		since, until time.Duration
		active       bool
	}{
		{"runs", -time.Hour, 3 * time.Hour, true},
		{"set by this clock a moment ago, rounded", 30 * time.Second, 4 * time.Hour, true},
		{"ends in exactly seven days", 0, MaxHold, true},
		{"ran out", -5 * time.Hour, -time.Hour, false},
		{"begins years ahead", 5 * 365 * 24 * time.Hour, 5*365*24*time.Hour + time.Hour, false},
		{"begins two minutes ahead", 2 * time.Minute, 4 * time.Hour, false},
		{"begins exactly the clock slack ahead", holdClockSlack, 4 * time.Hour, true},
		{"begins a moment past the clock slack", holdClockSlack + time.Nanosecond, 4 * time.Hour, false},
		{"ends beyond seven days", 0, MaxHold + time.Second, false},
	} {
		h := &Hold{Reason: "r", By: "alice", Since: now.Add(tc.since), Until: now.Add(tc.until)}
		if got := h.Active(now); got != tc.active {
			t.Errorf("%s: Active %v, want %v", tc.name, got, tc.active)
		}
	}
	var none *Hold
	if none.Active(now) || none.TooFar(now) {
		t.Error("no hold holds")
	}
}

// IsConfigHash agrees with the expression it replaces, `^[0-9a-f]{64}$`.
func FuzzIsConfigHash(f *testing.F) {
	re := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for _, s := range []string{"", strings.Repeat("a", 64), strings.Repeat("0", 63), strings.Repeat("f", 65), strings.Repeat("A", 64), strings.Repeat("a", 63) + "\n", "sha256:" + strings.Repeat("a", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := IsConfigHash(s), re.MatchString(s); got != want {
			t.Fatalf("IsConfigHash(%q) = %v, the expression says %v", s, got, want)
		}
	})
}
