package metrics

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	shaA = "7a10c4e2b3f4a5b6c7d8e9f0a1b2c3d4e5f60718"
	shaB = "9f3e21d0aa11bb22cc33dd44ee55ff6600112233"
)

var (
	t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	// secrets a state or a tick may sit next to; none may reach the textfile.
	accessor = "hvs-accessor-SECRET-5d1c"
	detail   = "refused: PRIVILEGED: password=hunter2-SECRET in the compose file"
)

// fullTick is a tick that saw everything: a failed apply of shaB while shaA runs.
func fullTick() Tick {
	ok := t0.Add(-10 * time.Minute)
	healthy := true
	return Tick{
		EnvID: "env-qa-02", Version: "0.2.0",
		Start: t0, End: t0.Add(1500 * time.Millisecond), ExitCode: 1,
		State: &state.State{
			EnvID: "env-qa-02", AppliedSha: shaA, LastSha: shaB, LastResult: protocol.ResultFailed, LastDetail: detail,
			Token:        &state.TokenMeta{Source: state.SourceLease, Accessor: accessor, ObtainedAt: t0.Add(-time.Hour), TTLSec: 4 * 3600},
			LeaseBackoff: &state.LeaseBackoff{Until: t0.Add(30 * time.Minute), Reason: detail},
			Counters:     state.Counters{Applies: 12, Failures: 3, Refusals: 1, Leases: 5, DriftCorrections: 2},
			Hold:         &state.Hold{Reason: detail, By: "alice", Since: t0.Add(-time.Hour), Until: t0.Add(3 * time.Hour)},
			Deferred:     &state.Deferral{Action: "apply", Sha: shaB, Since: t0, Until: t0.Add(15 * time.Hour)},
			LastTickOKAt: &ok,
			Backoff:      &state.DeployBackoff{Sha: shaB, Attempts: 3, NextAttemptAt: t0.Add(8 * time.Minute), RevertedTo: shaA, RevertHealthy: &healthy},
			Identity:     &state.IdentityCert{Renewal: &state.IdentityRenewal{Failures: 2, LastError: detail}},
		},
		IdentityCertNotAfter: t0.Add(20 * 24 * time.Hour),
		IdentityCANotAfter:   t0.Add(900 * 24 * time.Hour),
		BaoCANotAfter:        t0.Add(60 * 24 * time.Hour),
		Report:               &Report{Result: protocol.ResultFailed, Delivered: true},
		Containers: []protocol.Container{
			{Service: "web", State: "running", Health: "healthy"},
			{Service: "worker", State: "running", Health: "unhealthy"},
			{Service: "cron", State: "running"},
			{Service: "init", State: "exited"},
		},
		Disk:           []Disk{{Path: "/var/lib/docker", FreeBytes: 10 << 30}, {Path: "/var/lib/containerd", FreeBytes: 3 << 30}},
		DiskFloorBytes: 2 << 30,
		Interval:       time.Minute,
	}
}

func TestEncodeGolden(t *testing.T) {
	cases := map[string]Tick{
		"full": fullTick(),
		// Another tick held the lock: state is read, nothing else was seen.
		"lock_held": {EnvID: "env-qa-02", Version: "0.2.0", Interval: time.Minute, Start: t0, End: t0.Add(3 * time.Millisecond), LockHeld: true,
			State: &state.State{AppliedSha: shaA, LastResult: protocol.ResultHealthy, Counters: state.Counters{Applies: 2}}},
		// The config could not be read: no env, no state, exit 78.
		"config_error": {Version: "0.2.0", Start: t0, End: t0.Add(time.Millisecond), ExitCode: 78},
	}
	for name, tick := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Encode(tick)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".prom")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("textfile differs from %s:\n%s", golden, got)
			}
			// What node_exporter will read: the text format's own parser accepts it.
			var p expfmt.TextParser
			if _, err := p.TextToMetricFamilies(bytes.NewReader(got)); err != nil {
				t.Errorf("the text parser refuses the textfile: %v", err)
			}
		})
	}
}

func TestSeriesValues(t *testing.T) {
	g := parsedGatherer(t, fullTick())
	want := `
# HELP monky_deployd_containers Containers of the env's compose project by state, as the last report saw them.
# TYPE monky_deployd_containers gauge
monky_deployd_containers{env="env-qa-02",state="healthy"} 1
monky_deployd_containers{env="env-qa-02",state="not_running"} 1
monky_deployd_containers{env="env-qa-02",state="running"} 1
monky_deployd_containers{env="env-qa-02",state="starting"} 0
monky_deployd_containers{env="env-qa-02",state="unhealthy"} 1
# HELP monky_deployd_token_ttl_seconds Seconds the agent's OpenBao token has left, by where it came from (bootstrap or lease).
# TYPE monky_deployd_token_ttl_seconds gauge
monky_deployd_token_ttl_seconds{env="env-qa-02",source="lease"} 10798.5
# HELP monky_deployd_failures_total Attempts reported failed.
# TYPE monky_deployd_failures_total counter
monky_deployd_failures_total{env="env-qa-02"} 3
# HELP monky_deployd_deploy_backoff_attempts Failed applies of the desired sha the agent is backing off from.
# TYPE monky_deployd_deploy_backoff_attempts gauge
monky_deployd_deploy_backoff_attempts{env="env-qa-02",sha="` + shaB + `"} 3
# HELP monky_deployd_deploy_reverted_healthy 1 when the release brought back after the failure came up healthy, 0 when none was or it did not.
# TYPE monky_deployd_deploy_reverted_healthy gauge
monky_deployd_deploy_reverted_healthy{env="env-qa-02"} 1
`
	if err := testutil.GatherAndCompare(g, strings.NewReader(want),
		"monky_deployd_containers", "monky_deployd_token_ttl_seconds", "monky_deployd_failures_total",
		"monky_deployd_deploy_backoff_attempts", "monky_deployd_deploy_reverted_healthy"); err != nil {
		t.Error(err)
	}
}

// encodeParsed is Encode's output and its families as the text format's own parser reads them.
func encodeParsed(t *testing.T, tick Tick) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	got, err := Encode(tick)
	if err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(got))
	if err != nil {
		t.Fatalf("output does not parse: %v\n%s", err, got)
	}
	return mfs, got
}

// parsedGatherer is Encode's output read back by the text format's own parser (node_exporter's
// reading), as a gatherer for testutil.
func parsedGatherer(t *testing.T, tick Tick) prometheus.Gatherer {
	t.Helper()
	mfs, _ := encodeParsed(t, tick)
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		out := make([]*dto.MetricFamily, 0, len(mfs))
		for _, mf := range mfs {
			out = append(out, mf)
		}
		slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
		return out, nil
	})
}

func TestNothingSecretOrUnbounded(t *testing.T) {
	tick := fullTick()
	tick.State.LastSha = "not a sha; password=hunter2-SECRET"
	tick.State.Backoff.Sha = "not a sha; password=hunter2-SECRET"
	tick.State.Token.Source = "SECRET-source"
	got, err := Encode(tick)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"SECRET", "hunter2", accessor, "PRIVILEGED", "web", "worker"} {
		if bytes.Contains(got, []byte(bad)) {
			t.Errorf("textfile contains %q:\n%s", bad, got)
		}
	}
	for _, want := range []string{`sha="invalid"`, `source="unknown"`} {
		if !bytes.Contains(got, []byte(want)) {
			t.Errorf("textfile lacks %s", want)
		}
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "monky_deployd.prom")
	if err := WriteFile(path, fullTick()); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (node_exporter runs as another user)", st.Mode().Perm())
	}
	// A second write replaces the first whole; no temp file is left for node_exporter to read.
	second := fullTick()
	second.ExitCode = 75
	if err := WriteFile(path, second); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte(`monky_deployd_last_tick_exit_code{env="env-qa-02"} 75`)) {
		t.Errorf("second write not in place:\n%s", data)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the textfile directory, want 1", len(ents))
	}

	missing := filepath.Join(dir, "absent", "monky_deployd.prom")
	if err := WriteFile(missing, fullTick()); !errors.Is(err, ErrNoDir) {
		t.Errorf("missing directory: %v, want ErrNoDir", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); err == nil {
		t.Error("WriteFile created node_exporter's directory")
	}
	notDir := filepath.Join(dir, "monky_deployd.prom", "x.prom")
	if err := WriteFile(notDir, fullTick()); err == nil || errors.Is(err, ErrNoDir) {
		t.Errorf("a file where the directory should be: %v, want an error", err)
	}
}

// FuzzEncode feeds state.json's strings (a file on disk, not a promise) to the encoder: it must
// never panic, and its output must parse.
func FuzzEncode(f *testing.F) {
	f.Add(shaA, "lease", "failed", "/var/lib/docker", "healthy", "running")
	f.Add("\xff\xfe", "\x00", "refused", "", "", "")
	f.Fuzz(func(t *testing.T, sha, source, result, path, health, cstate string) {
		tick := fullTick()
		tick.State.LastSha, tick.State.AppliedSha = sha, sha
		tick.State.Token.Source = source
		tick.State.LastResult = result
		tick.Containers = append(tick.Containers, protocol.Container{Health: health, State: cstate})
		if path != "" {
			tick.Disk = []Disk{{Path: strings.ToValidUTF8(path, "?"), FreeBytes: 1}}
		}
		mfs, got := encodeParsed(t, tick)
		// The hand-written encoder writes what expfmt writes of the same families.
		names := slices.Sorted(maps.Keys(mfs))
		var again bytes.Buffer
		for _, n := range names {
			if _, err := expfmt.MetricFamilyToText(&again, mfs[n]); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(again.Bytes(), got) {
			t.Fatalf("expfmt writes the parsed textfile otherwise:\n%s\nwant\n%s", got, again.Bytes())
		}
	})
}
