package state

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	shaA = "1b2c3d4e1b2c3d4e1b2c3d4e1b2c3d4e1b2c3d4e1b2c3d4e1b2c3d4e1b2c3d4e"
	shaB = "7a10c0ffee7a10c0ffee7a10c0ffee7a10c0ffee7a10c0ffee7a10c0ffee7a10"
)

func TestLoadMissingIsEmpty(t *testing.T) {
	s, err := Load(filepath.Join(t.TempDir(), "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, &State{}) {
		t.Errorf("got %+v, want the empty state", s)
	}
}

func TestLoadCorrupt(t *testing.T) {
	cases := map[string]string{
		"empty file":          "",
		"truncated":           `{"applied_sha": "ab`,
		"not an object":       `["a"]`,
		"null":                `null`,
		"string sha":          `{"applied_sha": 12}`,
		"history not a list":  `{"history": "abc"}`,
		"history bad item":    `{"history": [1]}`,
		"token not an object": `{"token": "s.abc"}`,
		"token bad source":    `{"token": {"source": 1}}`,
		"token bad ttl":       `{"token": {"source": "lease", "ttl_s": "long"}}`,
		"bad time":            `{"last_apply_at": "yesterday"}`,
		"absurd unix time":    `{"last_apply_at": 1e300}`,
		"last_error not text": `{"last_error": {"x": 1}}`,
		"previous_token bad":  `{"previous_token": {"source": 1}}`,
		"lease_backoff bad":   `{"lease_backoff": {"until": "soon"}}`,
		"docker failure time": `{"docker_info_failed_at": "yesterday"}`,
		"deploy_backoff time": `{"deploy_backoff": {"sha": "ab", "attempts": 1, "next_attempt_at": "soon"}}`,
		"deploy_backoff no n": `{"deploy_backoff": {"sha": "ab", "attempts": 0}}`,
		"deploy_backoff list": `{"deploy_backoff": ["ab"]}`,
		"applying no sha":     `{"applying": {"started_at": "2026-12-02T10:00:00Z"}}`,
		"applying list":       `{"applying": ["ab"]}`,
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := Load(p)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Load = %+v, %v; want a *CorruptError", s, err)
			}
			if ce.Path != p || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
}

// A state file that cannot be read is no corrupt state: it may hold the box's state, and is not
// moved aside. (Tests run as root, which reads whatever the modes say: a path through a file
// stands for the file no one may read.)
func TestLoadUnreadableIsNotCorrupt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(file, "state.json")} {
		_, err := Load(p)
		var ce *CorruptError
		if err == nil || errors.As(err, &ce) {
			t.Fatalf("Load(%s) = %v; want a plain read error", p, err)
		}
	}
	// Past MaxFile the file is no state the agent wrote, but it may be one grown by a fault: it
	// is an error, and nothing is moved aside.
	big := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(big, append([]byte(`{"applied_sha": "`), make([]byte, MaxFile)...), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(big)
	var ce *CorruptError
	if err == nil || errors.As(err, &ce) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("Load(a state.json past MaxFile) = %v; want a plain error saying it is too large", err)
	}
}

// A FIFO, a directory or a device in state.json's place holds no state: it is a *CorruptError
// (the tick moves it aside and starts afresh), said at once; a plain open of a FIFO would wait
// for a writer, and the tick until systemd's timeout.
func TestLoadNotARegularFileIsCorrupt(t *testing.T) {
	dir := t.TempDir()
	fifo, sub := filepath.Join(dir, "fifo"), filepath.Join(dir, "dir")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	for p, kind := range map[string]string{fifo: "fifo", sub: "directory", "/dev/null": "device"} {
		_, err := Load(p)
		var ce *CorruptError
		if !errors.As(err, &ce) || ce.Path != p || !strings.Contains(err.Error(), "not a regular file ("+kind+")") {
			t.Errorf("Load(%s) = %v; want a *CorruptError saying it is a %s", p, err, kind)
		}
	}
}

func TestLoadPythonAgentState(t *testing.T) {
	s, err := Load("testdata/python-0.1.9-state.json")
	if err != nil {
		t.Fatal(err)
	}
	want := TokenMeta{Source: SourceLease, Accessor: "hmac-accessor-0f1e2d",
		ObtainedAt: time.Unix(1788948000, 250_000_000).UTC(), TTLSec: 86400}
	switch {
	case s.EnvID != "env-qa-02", s.AppliedSha != shaB, s.LastResult != "failed":
		t.Errorf("basic fields wrong: %+v", s)
	case !reflect.DeepEqual(s.History, []string{shaA, shaB}):
		t.Errorf("history %v", s.History)
	case !strings.Contains(s.LastDetail, "no basic auth credentials"):
		t.Errorf("last_error not read as LastDetail: %q", s.LastDetail)
	case s.Token == nil:
		t.Fatal("token missing")
	}
	got := *s.Token
	got.extra = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("token %+v, want %+v", got, want)
	}
	if !s.IsRollback(shaA) || s.IsRollback(shaB) {
		t.Error("IsRollback wrong on the Python history")
	}

	// Saving keeps what this version does not know, and drops the legacy name it has absorbed.
	p := filepath.Join(t.TempDir(), "state.json")
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	data, _ := os.ReadFile(p)
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["updated_at"] != "2026-09-09T10:00:00.123456" {
		t.Errorf("unknown top-level field lost: %v", doc["updated_at"])
	}
	if tok := doc["token"].(map[string]any); tok["renewable"] != true || tok["ttl_s"] != float64(86400) {
		t.Errorf("token fields not kept: %v", tok)
	}
	if _, ok := doc["last_error"]; ok {
		t.Error("last_error written back next to last_detail")
	}
	if doc["last_detail"] != s.LastDetail {
		t.Errorf("last_detail = %v", doc["last_detail"])
	}
	again, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, s) {
		t.Errorf("round trip changed the state:\n got %+v\nwant %+v", again, s)
	}
}

func TestSaveModeAndRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	at := time.Date(2026, 12, 2, 10, 1, 0, 0, time.UTC)
	s := &State{EnvID: "env-qa-02", LastResult: "applied", LastSha: shaB, AgentVersion: "0.2.0",
		PendingUpgradeFrom: "0.1.9", LastCheckinAt: &at, DockerRootDir: "/var/lib/docker", DockerVersion: "29.0.1",
		DockerInfoAt: &at, DockerInfoFailedAt: &at,
		PendingLease:  &PendingLease{Addr: "https://bao:8200", Mount: "jwt-tenancy", Role: "see-env", ExpiresAt: at, BearerAccessor: "acc"},
		LeaseBackoff:  &LeaseBackoff{Until: at, Reason: "bao: login refused"},
		Backoff:       &DeployBackoff{Sha: shaB, Attempts: 3, NextAttemptAt: at, RevertedTo: "ab12", RevertHealthy: ptr(true)},
		Refused:       &RefusedSha{Sha: shaB, Code: "PRIVILEGED_REFUSED", Detail: "PRIVILEGED_REFUSED: dc.yml: 1 finding(s)", At: at, AgentVersion: "0.2.0"},
		PreviousToken: &TokenMeta{Source: SourceBootstrap, Accessor: "old", Addr: "https://bao-old:8200"},
		Token:         &TokenMeta{Source: SourceBootstrap, Accessor: "acc", ObtainedAt: at, TTLSec: 3600, Addr: "https://bao:8200"},
		Counters:      Counters{Applies: 3, Failures: 2, Refusals: 1, Leases: 4}, LastTickOKAt: &at,
		AppliedFiles: &ReleaseFiles{Sha: shaB, Files: []string{"bundle.json", "conf/app.conf", "docker-compose.yml"}}}
	s.RecordApplied(shaB, at)
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	// no temp file is left; the reserve is made beside state.json (reserve.go)
	if ents, _ := os.ReadDir(dir); len(ents) != 2 || ents[0].Name() != "state.json" || ents[1].Name() != "state.json.reserve" {
		t.Errorf("state dir holds %v, want only state.json and state.json.reserve", ents)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
}

func TestCounters(t *testing.T) {
	var s State
	for _, r := range []string{"applied", "failed", "refused", "failed", "healthy", "unhealthy", "down", ""} {
		s.CountOutcome(r)
	}
	if want := (Counters{Applies: 1, Failures: 2, Refusals: 1}); s.Counters != want {
		t.Errorf("counters %+v, want %+v", s.Counters, want)
	}
	for _, bad := range []string{`{"counters":{"applies":-1}}`, `{"counters":{"leases":"2"}}`, `{"counters":7}`} {
		var st State
		err := json.Unmarshal([]byte(bad), &st)
		if err == nil || !strings.Contains(err.Error(), "counters") {
			t.Errorf("%s: error %v, want one naming counters", bad, err)
		}
	}
}

func TestSaveEmptyStateIsMinimal(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	if err := Save(p, &State{}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(p)
	if strings.TrimSpace(string(data)) != "{}" {
		t.Errorf("empty state saved as %s", data)
	}
}

func TestHistoryShapes(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string
	}{
		{"strings", `{"history": ["a", "b"]}`, []string{"a", "b"}},
		{"objects", `{"history": [{"sha": "a", "at": 1}, {"sha": "b"}]}`, []string{"a", "b"}},
		{"duplicates keep the latest position", `{"history": ["a", "b", "a"]}`, []string{"b", "a"}},
		{"empty entries dropped", `{"history": ["", "a"]}`, []string{"a"}},
		{"null", `{"history": null}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s State
			if err := json.Unmarshal([]byte(tc.doc), &s); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(s.History, tc.want) {
				t.Errorf("history %v, want %v", s.History, tc.want)
			}
		})
	}
}

func TestTimeShapes(t *testing.T) {
	want := time.Date(2026, 9, 9, 10, 0, 0, 500_000_000, time.UTC)
	for _, v := range []string{
		`"2026-09-09T10:00:00.5Z"`, `"2026-09-09T12:00:00.5+02:00"`, `"2026-09-09T10:00:00.500000"`,
		`"2026-09-09 10:00:00.5"`, `"2026-09-09 10:00:00.5+00:00"`, `1788948000.5`, `"1788948000.5"`,
	} {
		t.Run(v, func(t *testing.T) {
			var s State
			if err := json.Unmarshal([]byte(`{"last_checkin_at": `+v+`}`), &s); err != nil {
				t.Fatal(err)
			}
			if s.LastCheckinAt == nil || !s.LastCheckinAt.Equal(want) {
				t.Errorf("got %v, want %v", s.LastCheckinAt, want)
			}
		})
	}
}

func TestIsRollback(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *State
		want map[string]bool
	}{
		{"running b", &State{AppliedSha: "b", History: []string{"a", "b"}},
			map[string]bool{"a": true, "b": false, "c": false, "": false}},
		// A retire clears applied_sha; the release it last ran is still the current one.
		{"retired after b", &State{History: []string{"a", "b"}},
			map[string]bool{"a": true, "b": false, "c": false}},
		{"never applied", &State{}, map[string]bool{"a": false}},
	} {
		for sha, want := range tc.want {
			if got := tc.s.IsRollback(sha); got != want {
				t.Errorf("%s: IsRollback(%q) = %v, want %v", tc.name, sha, got, want)
			}
		}
	}
}

func TestRecordApplied(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &State{}
	for _, sha := range []string{"a", "b", "a", "c", "c"} {
		s.RecordApplied(sha, at)
	}
	if want := []string{"b", "a", "c"}; !reflect.DeepEqual(s.History, want) {
		t.Errorf("history %v, want %v", s.History, want)
	}
	if s.AppliedSha != "c" || s.LastApplyAt == nil || !s.LastApplyAt.Equal(at) {
		t.Errorf("applied %q at %v", s.AppliedSha, s.LastApplyAt)
	}
	// rolled back to "b": it is now the newest release, no longer a rollback target
	s.RecordApplied("b", at)
	if s.History[len(s.History)-1] != "b" || s.IsRollback("b") || !s.IsRollback("c") {
		t.Errorf("after rollback: history %v", s.History)
	}
}

func TestAgentVersionTracking(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		name        string
		before      State
		running     string
		wantPending string
	}{
		{"fresh box", State{}, "0.2.0", ""},
		{"same version", State{AgentVersion: "0.2.0"}, "0.2.0", ""},
		{"upgraded", State{AgentVersion: "0.2.0"}, "0.2.1", "0.2.0"},
		{"downgraded counts too", State{AgentVersion: "0.2.1"}, "0.2.0", "0.2.1"},
		{"unreported upgrade keeps its origin", State{AgentVersion: "0.2.0", PendingUpgradeFrom: "0.1.9"}, "0.2.1", "0.1.9"},
		{"python agent state", State{AppliedSha: "a", History: []string{"a"}}, "0.2.0", PriorVersionUnknown},
		{"python agent, token only", State{Token: &TokenMeta{Source: SourceBootstrap}}, "0.2.0", PriorVersionUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.before
			s.NoteAgentVersion(tc.running)
			if s.PendingUpgradeFrom != tc.wantPending || s.AgentVersion != tc.running {
				t.Errorf("pending %q version %q, want %q %q", s.PendingUpgradeFrom, s.AgentVersion, tc.wantPending, tc.running)
			}
			s.CheckinSucceeded(at)
			if s.PendingUpgradeFrom != "" || s.LastCheckinAt == nil || !s.LastCheckinAt.Equal(at) {
				t.Errorf("after check-in: pending %q at %v", s.PendingUpgradeFrom, s.LastCheckinAt)
			}
			s.NoteAgentVersion(tc.running)
			if s.PendingUpgradeFrom != "" {
				t.Errorf("the next run of the same version reports an upgrade again: %q", s.PendingUpgradeFrom)
			}
		})
	}
}

// FuzzDecode exercises what Load does with a file's bytes, in memory (a file and an fsync per
// input would cut the fuzzer's speed a hundredfold; Load's own plumbing is tested above).
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"identity":{"not_after":"2027-12-02T10:00:00Z","renewal":{"step":"pending","started_at":"2026-12-02T10:00:00Z","new_fingerprint":"9a"}}}`))
	seed, err := os.ReadFile("testdata/python-0.1.9-state.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	for _, s := range []string{`{}`, `null`, `[]`, `{"history":[{"sha":"a"},"b","a"]}`, `{"token":{"ttl":1e99}}`,
		`{"last_apply_at":"2026-01-01 00:00:00"}`, `{"x":{"y":[1,2]},"token":{"z":null}}`, `{"last_error":"e","last_detail":""}`,
		`{"deploy_backoff":{"sha":"9f3e","attempts":3,"next_attempt_at":"2026-12-02T10:08:00Z","reverted_to":"7a10","revert_healthy":true}}`,
		`{"counters":{"applies":2,"leases":1},"last_tick_ok_at":"2026-01-01T00:00:00Z"}`, `{"counters":{"failures":-1}}`, `{"counters":[]}`,
		`{"applying":{"sha":"9f3e","started_at":"2026-12-02T10:00:00Z","auto_revert":false}}`,
		`{"hold":{"reason":"r","by":"bob","since":"2026-12-02T10:00:00Z","until":"2026-12-02T14:00:00Z"},"deferred":{"action":"down","since":"2026-12-02T10:00:00Z","until":"2026-12-03T02:00:00Z"}}`,
		`{"last_failure":{"sha":"9f3e","code":"PULL_FAILED","detail":"denied","at":"2026-12-02T09:58:00Z","attempts":2},"last_exit_code":78}`,
		`{"drift":{"sha":"9f3e","services":{"api":{"config_hash":"626a9bcfe94badb776855e66c87f0daf3065d98ac87795582be6ce8127e77160","containers":1}},"attempts":2}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s State
		if err := json.Unmarshal(data, &s); err != nil {
			return // Load turns this into a *CorruptError (TestLoadCorrupt)
		}
		// Whatever loads must survive a save and a reload unchanged.
		out, err := json.MarshalIndent(&s, "", "  ")
		if err != nil {
			t.Fatalf("encode a decoded state: %v", err)
		}
		var again State
		if err := json.Unmarshal(out, &again); err != nil {
			t.Fatalf("reload of a saved state: %v\n%s", err, out)
		}
		if !statesEqual(&s, &again) {
			t.Fatalf("round trip changed the state:\n got %+v\nwant %+v", again, s)
		}
	})
}

// statesEqual compares states by their saved form: preserved unknown fields are raw JSON whose
// whitespace may differ between the first read and the re-read.
func statesEqual(a, b *State) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

func TestAddHistory(t *testing.T) {
	s := &State{}
	for _, sha := range []string{"a", "", "b", "a"} {
		s.AddHistory(sha)
	}
	if want := []string{"b", "a"}; !reflect.DeepEqual(s.History, want) {
		t.Errorf("history %v, want %v", s.History, want)
	}
	if s.AppliedSha != "" || s.LastApplyAt != nil {
		t.Error("AddHistory touched more than History")
	}
}

func TestEmptyTimesStayNil(t *testing.T) {
	var s State
	if err := json.Unmarshal([]byte(`{"last_checkin_at": "", "last_apply_at": null}`), &s); err != nil {
		t.Fatal(err)
	}
	if s.LastCheckinAt != nil || s.LastApplyAt != nil {
		t.Errorf("empty times decoded as %v %v", s.LastCheckinAt, s.LastApplyAt)
	}
}

func TestParseUpgradedFrom(t *testing.T) {
	for _, tc := range []struct{ in, want, wantErr string }{
		{"0.1.9\n", "0.1.9", ""},
		{"0.1.9", "0.1.9", ""},
		{"1:0.1.9~rc1+deb12u1\n", "1:0.1.9~rc1+deb12u1", ""},
		{"", "", "empty"},
		{"\n", "", "empty"},
		{"0.1.9\n\n", "", `character 6 ('\n')`},
		{"0.1.9 \n", "", `character 6 (' ')`},
		{"0.1.9\nrm -rf /\n", "", "character 6"},
		{strings.Repeat("9", 65), "", "65 characters"},
	} {
		got, err := ParseUpgradedFrom([]byte(tc.in))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "upgraded-from: ") {
				t.Errorf("%q: error %v, want one naming upgraded-from and containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestNameUnknownPrior(t *testing.T) {
	s := State{AppliedSha: "a"}
	s.NoteAgentVersion("0.2.0")
	s.NameUnknownPrior("0.1.9")
	if s.PendingUpgradeFrom != "0.1.9" {
		t.Errorf("python upgrade: pending %q, want the package's 0.1.9", s.PendingUpgradeFrom)
	}
	s = State{AgentVersion: "0.2.0"}
	s.NoteAgentVersion("0.2.1")
	s.NameUnknownPrior("0.1.9")
	if s.PendingUpgradeFrom != "0.2.0" {
		t.Errorf("a version the state recorded is overridden: pending %q", s.PendingUpgradeFrom)
	}
}

func FuzzParseUpgradedFrom(f *testing.F) {
	for _, s := range []string{"0.1.9\n", "", "1:2.3~a+b", "a\nb", "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseUpgradedFrom(data)
		if err != nil {
			if v != "" {
				t.Fatalf("value %q with error %v", v, err)
			}
			return
		}
		if v == "" || len(v) > 64 || strings.ContainsAny(v, "\n\r\t /\"'$`\\") {
			t.Fatalf("accepted %q", v)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestBackoffDelaySchedule(t *testing.T) {
	want := []time.Duration{2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		if got := BackoffDelay(i + 1); got != w {
			t.Errorf("BackoffDelay(%d) = %s, want %s", i+1, got, w)
		}
	}
	if got := BackoffDelay(1 << 30); got != time.Hour {
		t.Errorf("BackoffDelay(huge) = %s, want the 1h cap", got)
	}
}

func TestNoteDeployFailureCountsPerSha(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	s := &State{}
	b := s.NoteDeployFailure(shaB, now)
	if b.Attempts != 1 || !b.NextAttemptAt.Equal(now.Add(2*time.Minute)) {
		t.Fatalf("first failure: %+v", b)
	}
	b.RevertedTo, b.RevertHealthy = "ab12", ptr(true)
	b = s.NoteDeployFailure(shaB, now.Add(3*time.Minute))
	if b.Attempts != 2 || !b.NextAttemptAt.Equal(now.Add(7*time.Minute)) || b.RevertedTo != "" || b.RevertHealthy != nil {
		t.Fatalf("second failure: %+v", b)
	}
	if !s.BackingOff(shaB, now.Add(6*time.Minute)) || s.BackingOff(shaB, now.Add(7*time.Minute)) || s.BackingOff("ab12", now) {
		t.Error("BackingOff does not follow NextAttemptAt and the sha")
	}
	s.Backoff.NextAttemptAt = now.Add(MaxBackoff + time.Minute) // the clock went back a day, say
	if s.BackingOff(shaB, now) {
		t.Error("a next try beyond the longest backoff holds the sha back")
	}
	if b := s.NoteDeployFailure("ab12", now); b.Attempts != 1 || b.Sha != "ab12" {
		t.Errorf("another sha must start at 1: %+v", b)
	}
}

// A hand-written (or very old) attempts count at its limit must not wrap to a negative one:
// the next load would refuse the whole state file for it.
func TestNoteDeployFailureSaturates(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	var s State
	if err := json.Unmarshal([]byte(`{"deploy_backoff": {"sha": "`+shaB+`", "attempts": 9223372036854775807, "next_attempt_at": "2026-12-02T09:00:00Z"}}`), &s); err != nil {
		t.Fatal(err)
	}
	b := s.NoteDeployFailure(shaB, now)
	if b.Attempts != math.MaxInt || !b.NextAttemptAt.Equal(now.Add(MaxBackoff)) {
		t.Fatalf("failure after attempts at the limit: %+v", b)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(raw, &back); err != nil || back.Backoff == nil || back.Backoff.Attempts != math.MaxInt {
		t.Fatalf("state does not load back: %v, %+v", err, back.Backoff)
	}
}

func TestRefusedFor(t *testing.T) {
	s := &State{Refused: &RefusedSha{Sha: shaB, Code: "BUNDLE_INVALID", AgentVersion: "0.2.0"}}
	if _, ok := s.RefusedFor(shaB, "0.2.0"); !ok {
		t.Error("the refused sha is not remembered")
	}
	for _, c := range [][2]string{{shaB, "0.2.1"}, {"other", "0.2.0"}, {"", "0.2.0"}} {
		if _, ok := s.RefusedFor(c[0], c[1]); ok {
			t.Errorf("RefusedFor(%q, %q) remembered", c[0], c[1])
		}
	}
	if _, ok := (&State{}).RefusedFor(shaB, "0.2.0"); ok {
		t.Error("an empty state remembers a refusal")
	}
}

// A disk refusal keeps the free space it was judged on; it round-trips, a refused_sha an older
// agent wrote (no disk fields) still loads, and a disk measure no agent writes is refused by
// field.
func TestDiskRefusalJSON(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	s := &State{Refused: &RefusedSha{Sha: shaB, Code: "DISK_INSUFFICIENT", Detail: "DISK_INSUFFICIENT: image storage …", At: at,
		AgentVersion: "0.2.0", Disk: []DiskFree{{"/var/lib/docker", 32 << 20}, {"/var/lib/containerd", 5 << 30}},
		RequiredBytes: 2 << 30, NeedBytes: 1 << 30}}
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(p)
	if !strings.Contains(string(raw), `"free_bytes": 33554432`) || !strings.Contains(string(raw), `"path": "/var/lib/docker"`) {
		t.Errorf("state.json lacks the measures:\n%s", raw)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got.Refused, s.Refused)
	}

	old := `{"applied_sha": "` + shaB + `", "refused_sha": {"sha": "ab12", "code": "PRIVILEGED_REFUSED", "detail": "PRIVILEGED_REFUSED: x", "at": "2026-12-02T10:00:00Z", "agent_version": "0.2.0"}}`
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = Load(p)
	if err != nil {
		t.Fatalf("a refused_sha without disk fields: %v", err)
	}
	if r := got.Refused; r == nil || r.Sha != "ab12" || r.Disk != nil || r.RequiredBytes != 0 {
		t.Errorf("old refused_sha read as %+v", r)
	}

	for _, c := range []struct{ body, want string }{
		{`{"disk": [{"path": "", "free_bytes": 1}]}`, "refused_sha: disk[0]: path"},
		{`{"disk": [{"path": "/a", "free_bytes": -1}]}`, "refused_sha: disk[0]: free_bytes"},
		{`{"disk": [{"path": "/a", "free_bytes": 1}, {"path": "/a", "free_bytes": 2}]}`, "refused_sha: disk[1]: path"},
		{`{"disk": [{"path": "/a", "free_bytes": "1"}]}`, "refused_sha"},
		{`{"disk": {"path": "/a"}}`, "refused_sha"},
		{`{"required_bytes": -5}`, "refused_sha: required_bytes"},
		{`{"need_bytes": -5}`, "refused_sha: need_bytes"},
	} {
		var st State
		err := json.Unmarshal([]byte(`{"refused_sha": `+c.body+`}`), &st)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.body, err, c.want)
		}
	}
}

// The rule that re-judges a disk refusal: another set of paths, or a move of a path's free
// space by more than max(1% of what it had, 64 MiB), either way.
func TestDiskChanged(t *testing.T) {
	const gib, mib = int64(1 << 30), int64(1 << 20)
	r := &RefusedSha{Code: "DISK_INSUFFICIENT", Disk: []DiskFree{{"/d", 32 * mib}, {"/c", 500 * gib}}}
	for _, c := range []struct {
		name    string
		now     []DiskFree
		changed bool
	}{
		{"same", []DiskFree{{"/d", 32 * mib}, {"/c", 500 * gib}}, false},
		{"same, other order", []DiskFree{{"/c", 500 * gib}, {"/d", 32 * mib}}, false},
		{"small path within 64 MiB", []DiskFree{{"/d", 96 * mib}, {"/c", 500 * gib}}, false},
		{"small path past 64 MiB", []DiskFree{{"/d", 97 * mib}, {"/c", 500 * gib}}, true},
		{"small path shrinks to nothing", []DiskFree{{"/d", 0}, {"/c", 500 * gib}}, false},
		{"large path within 1%", []DiskFree{{"/d", 32 * mib}, {"/c", 500*gib - 5*gib}}, false},
		{"large path shrinks past 1%", []DiskFree{{"/d", 32 * mib}, {"/c", 500*gib - 6*gib}}, true},
		{"large path grows past 1%", []DiskFree{{"/d", 32 * mib}, {"/c", 506 * gib}}, true},
		{"a path gone", []DiskFree{{"/d", 32 * mib}}, true},
		{"a path added", []DiskFree{{"/d", 32 * mib}, {"/c", 500 * gib}, {"/e", gib}}, true},
		{"a path renamed", []DiskFree{{"/d", 32 * mib}, {"/x", 500 * gib}}, true},
	} {
		if why := r.DiskChanged(c.now); (why != "") != c.changed {
			t.Errorf("%s: DiskChanged = %q, want changed %v", c.name, why, c.changed)
		}
	}
	if why := (&RefusedSha{Code: "DISK_INSUFFICIENT"}).DiskChanged([]DiskFree{{"/d", 1}}); why == "" {
		t.Error("a disk refusal kept without measures stands")
	}
}

// applied_files belongs to one sha; one no agent writes is refused by field, and a state
// without it (an older agent's) knows no staged files.
func TestAppliedFiles(t *testing.T) {
	s := &State{AppliedSha: shaB, AppliedFiles: &ReleaseFiles{Sha: shaB, Files: []string{"a", "b/c"}}}
	if got := s.StagedFiles(shaB); strings.Join(got, ",") != "a,b/c" {
		t.Errorf("StagedFiles = %q", got)
	}
	for _, sha := range []string{"ab12", ""} {
		if got := s.StagedFiles(sha); got != nil {
			t.Errorf("StagedFiles(%q) = %q, want none", sha, got)
		}
	}
	var old State
	if err := json.Unmarshal([]byte(`{"applied_sha": "`+shaB+`"}`), &old); err != nil || old.StagedFiles(shaB) != nil {
		t.Errorf("a state without applied_files: %v, %q", err, old.StagedFiles(shaB))
	}
	for _, c := range []struct{ body, want string }{
		{`{"files": ["a"]}`, "applied_files: sha"},
		{`{"sha": "x"}`, "applied_files: files"},
		{`{"sha": "x", "files": []}`, "applied_files: files"},
		{`{"sha": "x", "files": ["a", ""]}`, "applied_files: files[1]"},
		{`{"sha": "x", "files": ["a", "a"]}`, "applied_files: files[1]"},
		// names the agent never stages: the revert reads through an os.Root, but the load says so first
		{`{"sha": "x", "files": ["a", "../b"]}`, "applied_files: files[1]"},
		{`{"sha": "x", "files": ["/etc/passwd"]}`, "applied_files: files[0]"},
		{`{"sha": "x", "files": ["a", "c/../../b"]}`, "applied_files: files[1]"},
		{`{"sha": "x", "files": ["./a"]}`, "applied_files: files[0]"},
		{`{"sha": "x", "files": ["a//b"]}`, "applied_files: files[0]"},
		{`{"sha": "x", "files": ["a\\b"]}`, "applied_files: files[0]"},
		{`{"sha": "x", "files": ["."]}`, "applied_files: files[0]"},
		{`{"sha": "x", "files": [".env"]}`, "applied_files: files[0]"},
		{`{"sha": "x", "files": "a"}`, "applied_files"},
		{`[]`, "applied_files"},
	} {
		var st State
		err := json.Unmarshal([]byte(`{"applied_files": `+c.body+`}`), &st)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.body, err, c.want)
		}
	}
}

func TestTTLLeft(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &State{Token: &TokenMeta{ObtainedAt: t0, TTLSec: 3600}}
	if got := st.Token.TTLLeft(t0.Add(10 * time.Minute)); got == nil || *got != 3000 {
		t.Errorf("TTLLeft after 10 min = %v, want 3000", got)
	}
	if got := st.Token.TTLLeft(t0.Add(2 * time.Hour)); got == nil || *got != 0 {
		t.Errorf("TTLLeft past the end = %v, want 0", got)
	}
	if got := (&State{}).Token.TTLLeft(t0); got != nil {
		t.Errorf("TTLLeft without a token = %v, want nil", *got)
	}
}

// Save writes only when the content changes: a state saved (or loaded) and saved again unchanged
// is not written, whatever fields it holds — a field this version does not know included, so
// the fields other code adds ride in the tick's one write without a save of their own.
func TestSaveSkipsAnUnchangedState(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(p, []byte(`{"env_id": "env-qa-02", "applied_sha": "`+shaA+`", "added_by_a_later_issue": {"x": 1}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// written(): was p replaced since the last call? A hard link keeps the old file alive, so its
	// inode number cannot come back for the new one.
	keep := p + ".keep"
	written := func() bool {
		t.Helper()
		now, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		old, err := os.Stat(keep)
		replaced := err != nil || !os.SameFile(now, old)
		os.Remove(keep)
		if err := os.Link(p, keep); err != nil {
			t.Fatal(err)
		}
		return replaced
	}
	written()
	s, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	if !written() {
		t.Fatal("a state in another layout than Save's was not rewritten")
	}
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	if written() {
		t.Error("Save rewrote an unchanged state")
	}
	again, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := Save(p, again); err != nil {
		t.Fatal(err)
	}
	if written() {
		t.Error("Save rewrote a state unchanged since Load")
	}
	again.LastResult = "healthy"
	if err := Save(p, again); err != nil {
		t.Fatal(err)
	}
	if !written() {
		t.Fatal("a changed state was not written")
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), `"added_by_a_later_issue"`) || !strings.Contains(string(b), `"healthy"`) {
		t.Errorf("the write lost a field:\n%s", b)
	}
	// Another path is another file: nothing is skipped there.
	other := filepath.Join(filepath.Dir(p), "copy.json")
	if err := Save(other, again); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("saving to another path: %v", err)
	}
}

// A lease back-off holds until Until, but never longer than MaxLeaseBackoff from now: one
// further ahead came from a clock that ran ahead or a hand edit, and is lapsed.
func TestLeaseBackoffHoldsNoLongerThanTheLongest(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		b          *LeaseBackoff
		holds, far bool
	}{
		{"none", nil, false, false},
		{"ahead", &LeaseBackoff{Until: now.Add(30 * time.Minute)}, true, false},
		{"the longest", &LeaseBackoff{Until: now.Add(MaxLeaseBackoff)}, true, false},
		{"past the longest", &LeaseBackoff{Until: now.Add(MaxLeaseBackoff + time.Second)}, false, true},
		{"years ahead", &LeaseBackoff{Until: now.AddDate(5, 0, 0)}, false, true},
		{"over", &LeaseBackoff{Until: now}, false, false},
	} {
		if got := tc.b.Holds(now); got != tc.holds {
			t.Errorf("%s: Holds = %v, want %v", tc.name, got, tc.holds)
		}
		if got := tc.b.TooFar(now); got != tc.far {
			t.Errorf("%s: TooFar = %v, want %v", tc.name, got, tc.far)
		}
	}
}
