package state

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The last failure and the last tick's exit code survive a save and a load whole (issue 20).
func TestLastFailureRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 2, 9, 58, 0, 0, time.UTC)
	code := 78
	st := &State{AppliedSha: shaB, LastExitCode: &code,
		LastFailure: &Failure{Sha: shaB, Code: "PULL_FAILED", Detail: "compose pull: denied — ünïcode", At: at, Attempts: 2}}
	path := filepath.Join(t.TempDir(), "state.json")
	if err := Save(path, st); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !statesEqual(st, got) || got.LastFailure == nil || *got.LastFailure != *st.LastFailure || got.LastExitCode == nil || *got.LastExitCode != 78 {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, st)
	}
}

// A last_failure or last_exit_code no agent writes is refused at load, naming the field.
func TestLastFailureRefused(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"last_failure": {"code": "FAILED", "at": "2026-12-02T09:58:00Z", "attempts": 1}}`, "last_failure: sha: empty"},
		{`{"last_failure": {"sha": "9f", "at": "2026-12-02T09:58:00Z", "attempts": 1}}`, "last_failure: code: empty"},
		{`{"last_failure": {"sha": "9f", "code": "FAILED", "at": "2026-12-02T09:58:00Z", "attempts": 0}}`, "last_failure: attempts"},
		{`{"last_failure": {"sha": "9f", "code": "FAILED", "attempts": 1}}`, "last_failure: at: missing"},
		{`{"last_failure": {"sha": "9f", "code": "FAILED", "at": "yesterday", "attempts": 1}}`, "last_failure"},
		{`{"last_failure": []}`, "last_failure"},
		{`{"last_exit_code": 256}`, "last_exit_code"},
		{`{"last_exit_code": -1}`, "last_exit_code"},
		{`{"last_exit_code": "0"}`, "last_exit_code"},
	} {
		var st State
		err := json.Unmarshal([]byte(c.body), &st)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.body, err, c.want)
		}
	}
	var st State
	if err := json.Unmarshal([]byte(`{"last_failure": null, "last_exit_code": null}`), &st); err != nil || st.LastFailure != nil || st.LastExitCode != nil {
		t.Errorf("nulls: %v %+v", err, st)
	}
}
