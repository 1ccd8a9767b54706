package exporter

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/expfmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

var now = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

func ptr[T any](v T) *T { return &v }

// doc is a small fleet: a silent box, a healthy one, and an orphan identity.
func doc() *report.Document {
	d := &report.Document{Schema: report.Schema, Now: now.Format(time.RFC3339), Summary: map[string]int{}}
	for _, v := range verdict.All() {
		d.Summary[string(v)] = 0
	}
	add := func(e report.Env) {
		d.Envs = append(d.Envs, e)
		d.Summary[e.Verdict]++
	}
	add(report.Env{EnvID: "env-a", Site: "cbs", Verdict: "SILENT", CheckinAgeS: ptr(int64(600)), StaleAfterS: 180, CheckinIntervalS: 60,
		AgentVersion: "0.2.0", MeshOnline: ptr(true), IdentityID: ptr("z1"), MissingAttributes: []string{},
		Timer:      &protocol.AdminTimer{Enabled: ptr(false), Active: ptr(false)},
		LastResult: "healthy", AppliedSha: "aaaa", DesiredSha: "bbbb", DesiredAt: ptr(now.Add(-time.Hour).Format(time.RFC3339)),
		NextStep: "agent stopped on a live host: systemctl enable --now monky-deployd.timer", LastDetail: "secret-ish detail",
		StaleCause: verdict.CauseTimerDisabled})
	add(report.Env{EnvID: "env-b", Site: "cbs", Verdict: "OK", CheckinAgeS: ptr(int64(20)), StaleAfterS: 180, CheckinIntervalS: 60,
		AgentVersion: "0.2.0", MeshOnline: ptr(true), IdentityID: ptr("z2"), MissingAttributes: []string{},
		Timer: &protocol.AdminTimer{Enabled: ptr(true), Active: ptr(true)}, LastResult: "strange-new-result", TokenTTLS: ptr(int64(7200)),
		Cert: &report.CertHorizon{NotAfter: now.Add(12 * 24 * time.Hour).Format(time.RFC3339), Source: "controller", DaysLeft: 12}})
	add(report.Env{EnvID: "env-c", Site: "cbs", Verdict: "BACKOFF", CheckinAgeS: ptr(int64(30)), StaleAfterS: 180, CheckinIntervalS: 60,
		LastResult: "failed", AppliedSha: "aaaa", DesiredSha: "cccc", FailedSha: ptr("cccc"), Attempts: 3,
		NextAttemptAt: ptr(now.Add(8 * time.Minute).Format(time.RFC3339)),
		LastFailure:   &protocol.Failure{Sha: "cccc0123456789ab", Code: "UNHEALTHY", Detail: "secret-ish: api unhealthy", At: now.Add(-5 * time.Minute).Format(time.RFC3339), Attempts: 3}})
	add(report.Env{EnvID: "env-d", Site: "osg", Verdict: "HELD", Reasons: []string{"HELD", "DRIFT"}, CheckinAgeS: ptr(int64(20)), StaleAfterS: 180,
		Hold: &protocol.Hold{Reason: "db migration, secret-ish", By: "alice", Since: now.Add(-26 * time.Hour).Format(time.RFC3339), Until: now.Add(2 * time.Hour).Format(time.RFC3339)}})
	add(report.Env{EnvID: "env-e", Site: "osg", Verdict: "DEFERRED", Reasons: []string{"DEFERRED"}, CheckinAgeS: ptr(int64(20)), StaleAfterS: 180,
		DeferredUntil: ptr(now.Add(15 * time.Hour).Format(time.RFC3339))})
	// A hold tenancy's clock says is over, and a deferral of a sha that is applied: no series.
	add(report.Env{EnvID: "env-f", Site: "osg", Verdict: "OK", CheckinAgeS: ptr(int64(20)), StaleAfterS: 180,
		Hold:          &protocol.Hold{Reason: "r", By: "bob", Since: now.Add(-5 * time.Hour).Format(time.RFC3339), Until: now.Add(-time.Hour).Format(time.RFC3339)},
		DeferredUntil: ptr(now.Add(15 * time.Hour).Format(time.RFC3339))})
	add(report.Env{EnvID: "env-old", Verdict: "ORPHAN_IDENTITY", MeshOnline: ptr(false), IdentityID: ptr("z3")})
	// The same env once more (an orphan identity named after an env with another identity).
	add(report.Env{EnvID: "env-old", Verdict: "ORPHAN_IDENTITY", MeshOnline: ptr(true)})
	return d
}

func parse(t *testing.T, page []byte) map[string]string {
	t.Helper()
	var p expfmt.TextParser
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(page))
	if err != nil {
		t.Fatalf("exposition does not parse: %v\n%s", err, page)
	}
	out := map[string]string{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetGauge().GetValue()
			if m.Counter != nil {
				v = m.GetCounter().GetValue()
			}
			out[name+"{"+strings.Join(labels, ",")+"}"] = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return out
}

func TestEncode(t *testing.T) {
	page, err := Encode(doc())
	if err != nil {
		t.Fatal(err)
	}
	got := parse(t, page)
	for series, want := range map[string]string{
		"monky_fleet_env_verdict{env=env-a,site=cbs,verdict=SILENT}":                        "1",
		"monky_fleet_env_verdict{env=env-a,site=cbs,verdict=OK}":                            "0",
		"monky_fleet_env_verdict{env=env-b,site=cbs,verdict=OK}":                            "1",
		"monky_fleet_env_verdict{env=env-old,site=,verdict=ORPHAN_IDENTITY}":                "1",
		"monky_fleet_env_checkin_age_seconds{env=env-a,site=cbs}":                           "600",
		"monky_fleet_env_stale_after_seconds{env=env-a,site=cbs}":                           "180",
		"monky_fleet_env_mesh_online{env=env-a,site=cbs}":                                   "1",
		"monky_fleet_env_mesh_online{env=env-old,site=}":                                    "0",
		"monky_fleet_env_timer_enabled{env=env-a,site=cbs}":                                 "0",
		"monky_fleet_env_timer_active{env=env-b,site=cbs}":                                  "1",
		"monky_fleet_env_agent_info{env=env-a,site=cbs,version=0.2.0}":                      "1",
		"monky_fleet_env_drift_seconds{env=env-a,site=cbs}":                                 "3600",
		"monky_fleet_env_drift_seconds{env=env-b,site=cbs}":                                 "0",
		"monky_fleet_env_last_result{env=env-a,result=healthy,site=cbs}":                    "1",
		"monky_fleet_env_last_result{env=env-b,result=other,site=cbs}":                      "1",
		"monky_fleet_env_token_ttl_seconds{env=env-b,site=cbs}":                             "7200",
		"monky_fleet_env_identity_missing_attributes{env=env-a,site=cbs}":                   "0",
		"monky_fleet_env_deploy_attempts{env=env-c,site=cbs}":                               "3",
		"monky_fleet_env_deploy_next_attempt_timestamp_seconds{env=env-c,site=cbs}":         strconv.FormatInt(now.Add(8*time.Minute).Unix(), 10),
		"monky_fleet_envs{verdict=ORPHAN_IDENTITY}":                                         "2",
		"monky_fleet_env_stale_cause{cause=timer_disabled,env=env-a,site=cbs}":              "1",
		"monky_fleet_env_last_failure_info{code=UNHEALTHY,env=env-c,sha=cccc0123,site=cbs}": "3",
		"monky_fleet_env_last_failure_timestamp_seconds{env=env-c,site=cbs}":                strconv.FormatInt(now.Add(-5*time.Minute).Unix(), 10),
		"monky_fleet_envs{verdict=SILENT}":                                                  "1",
		"monky_fleet_envs{verdict=" + string(verdict.All()[len(verdict.All())-1]) + "}":     "2",
		"monky_fleet_env_hold_since_timestamp_seconds{env=env-d,site=osg}":                  strconv.FormatInt(now.Add(-26*time.Hour).Unix(), 10),
		"monky_fleet_env_hold_until_timestamp_seconds{env=env-d,site=osg}":                  strconv.FormatInt(now.Add(2*time.Hour).Unix(), 10),
		"monky_fleet_env_deferred_until_timestamp_seconds{env=env-e,site=osg}":              strconv.FormatInt(now.Add(15*time.Hour).Unix(), 10),
		"monky_fleet_env_identity_cert_expiry_timestamp_seconds{env=env-b,site=cbs}":        strconv.FormatInt(now.Add(12*24*time.Hour).Unix(), 10),
		"monky_fleet_envs{verdict=HELD}":                                                    "1",
	} {
		g, ok := got[series]
		if !ok {
			t.Errorf("no series %s", series)
			continue
		}
		if g != want {
			t.Errorf("%s = %q, want %q", series, g, want)
		}
	}
	// Every verdict has its series for every env: a verdict added to the list appears here.
	n := 0
	for s := range got {
		if strings.HasPrefix(s, "monky_fleet_env_verdict{env=env-a,") {
			n++
		}
	}
	if n != len(verdict.All()) {
		t.Errorf("env-a has %d verdict series, want %d", n, len(verdict.All()))
	}
	for _, absent := range []string{"monky_fleet_env_deploy_attempts{env=env-a,site=cbs}", "monky_fleet_env_deploy_next_attempt_timestamp_seconds{env=env-b,site=cbs}",
		"monky_fleet_env_identity_cert_expiry_timestamp_seconds{env=env-a,site=cbs}",
		"monky_fleet_env_stale_cause{cause=timer_disabled,env=env-b,site=cbs}", "monky_fleet_env_last_failure_timestamp_seconds{env=env-a,site=cbs}",
		"monky_fleet_env_hold_since_timestamp_seconds{env=env-f,site=osg}", "monky_fleet_env_hold_until_timestamp_seconds{env=env-f,site=osg}",
		"monky_fleet_env_deferred_until_timestamp_seconds{env=env-f,site=osg}", "monky_fleet_env_hold_since_timestamp_seconds{env=env-e,site=osg}"} {
		if _, ok := got[absent]; ok {
			t.Errorf("series %s for an env not backing off", absent)
		}
	}
	for _, bad := range []string{"secret-ish", "systemctl", "strange-new-result"} {
		if bytes.Contains(page, []byte(bad)) {
			t.Errorf("exposition carries %q", bad)
		}
	}
}

// A label longer than maxLabel is cut on a rune boundary, whatever the width of the runes around
// the cut, and marked: what remains is the start of what the agent reported, in valid UTF-8.
func TestLongLabelsAreCutOnARune(t *testing.T) {
	for _, version := range []string{
		strings.Repeat("é", 100),         // 2-byte runes
		"a" + strings.Repeat("€", 60),    // 3-byte runes, cut inside one
		"ab" + strings.Repeat("😀", 40),   // 4-byte runes
		strings.Repeat("x", maxLabel),    // fits exactly: kept whole
		strings.Repeat("x", maxLabel+1),  // one byte over
		strings.Repeat("x", 125) + "€€€", // the cut falls right after an ASCII run
	} {
		d := doc()
		d.Envs[0].AgentVersion = version
		page, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		var p expfmt.TextParser
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(page))
		if err != nil {
			t.Fatal(err)
		}
		got, found := "", false
		for _, m := range mfs["monky_fleet_env_agent_info"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "version" && len(l.GetValue()) > 8 {
					got, found = l.GetValue(), true
				}
			}
		}
		if !found {
			t.Fatalf("no agent_info series for version %q", version)
		}
		if len(version) <= maxLabel {
			if got != version {
				t.Errorf("a label that fits was changed: %q → %q", version, got)
			}
			continue
		}
		kept, cut := strings.CutSuffix(got, "…")
		if !cut || len(got) > maxLabel || len(got) < maxLabel-len("…")-3 || !utf8.ValidString(got) || !strings.HasPrefix(version, kept) {
			t.Errorf("label of %d bytes cut to %q (%d bytes)", len(version), got, len(got))
		}
	}
}

func TestEncodeRefusesABadClock(t *testing.T) {
	d := doc()
	d.Now = "yesterday"
	if _, err := Encode(d); err == nil || !strings.Contains(err.Error(), "now") {
		t.Errorf("error %v, want one naming now", err)
	}
}

// fakeSource is a Reader whose answers the test sets; it counts readings.
type fakeSource struct {
	mu    sync.Mutex
	reads int
	err   error
}

func (f *fakeSource) read(context.Context) (*report.Document, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.err != nil {
		return nil, f.err
	}
	return doc(), nil
}

type sourceErr struct{ name string }

func (e sourceErr) Error() string { return "cannot read the " + e.name }

func newTestExporter(src *fakeSource) *Exporter {
	clock := now
	return New(Options{
		Read: src.read,
		Source: func(err error) []string {
			var se sourceErr
			if errors.As(err, &se) {
				return []string{se.name}
			}
			return nil
		},
		Sources: []string{"ziti controller", "tenancy"},
		Refresh: time.Hour, Timeout: time.Minute,
		Now: func() time.Time { clock = clock.Add(time.Second); return clock },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

func scrape(t *testing.T, h http.Handler) map[string]string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("scrape: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	return parse(t, rec.Body.Bytes())
}

// Scrapes never read the sources; a failed reading keeps the last good view and says so.
func TestServesTheLastGoodView(t *testing.T) {
	src := &fakeSource{}
	ex := newTestExporter(src)
	before := scrape(t, ex)
	if _, ok := before["monky_fleet_exporter_views_total{}"]; !ok || len(before) > 8 {
		t.Errorf("before any reading: %v", before)
	}
	ex.Refresh(context.Background())
	for range 20 {
		scrape(t, ex)
	}
	if src.reads != 1 {
		t.Errorf("%d readings after 20 scrapes, want 1", src.reads)
	}
	ok := scrape(t, ex)
	if ok["monky_fleet_exporter_view_fresh{}"] != "1" || ok["monky_fleet_env_verdict{env=env-a,site=cbs,verdict=SILENT}"] != "1" {
		t.Errorf("after a good reading: %v", ok)
	}

	src.err = sourceErr{"tenancy"}
	ex.Refresh(context.Background())
	got := scrape(t, ex)
	for series, want := range map[string]string{
		"monky_fleet_exporter_view_fresh{}":                                          "0",
		"monky_fleet_exporter_source_up{source=tenancy}":                             "0",
		"monky_fleet_exporter_source_up{source=ziti controller}":                     "1",
		"monky_fleet_exporter_source_errors_total{source=tenancy}":                   "1",
		"monky_fleet_exporter_source_errors_total{source=ziti controller}":           "0",
		"monky_fleet_exporter_views_total{}":                                         "1",
		"monky_fleet_env_verdict{env=env-a,site=cbs,verdict=SILENT}":                 "1",
		"monky_fleet_exporter_view_timestamp_seconds{}":                              ok["monky_fleet_exporter_view_timestamp_seconds{}"],
		"monky_fleet_exporter_source_last_success_timestamp_seconds{source=tenancy}": ok["monky_fleet_exporter_source_last_success_timestamp_seconds{source=tenancy}"],
	} {
		if g, present := got[series]; !present || g != want {
			t.Errorf("after a failed reading: %s = %q (present %v), want %q", series, g, present, want)
		}
	}

	src.err = errors.New("something else")
	ex.Refresh(context.Background())
	if got := scrape(t, ex); got["monky_fleet_exporter_source_errors_total{source=unknown}"] != "1" {
		t.Errorf("an error of no known source: %v", got)
	}
}

func TestRunStopsWithItsContext(t *testing.T) {
	src := &fakeSource{}
	ex := newTestExporter(src)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ex.Run(ctx); close(done) }()
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestOnlyMetricsIsServed(t *testing.T) {
	ex := newTestExporter(&fakeSource{})
	for path, code := range map[string]int{"/": 200, "/metrics": 200, "/debug/pprof/": 404, "/metrics/x": 404} {
		rec := httptest.NewRecorder()
		ex.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != code {
			t.Errorf("GET %s: %d, want %d", path, rec.Code, code)
		}
	}
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/metrics", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", rec.Code)
	}
}

// The exposition is kept gzipped: served as it is to a scraper that accepts gzip (Prometheus
// does), unpacked for one that does not, the same text either way; HEAD gets no body.
func TestServesGzipWhenAccepted(t *testing.T) {
	ex := newTestExporter(&fakeSource{})
	ex.Refresh(context.Background())
	get := func(method, accept string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, "/metrics", nil)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		ex.ServeHTTP(rec, req)
		return rec
	}
	plain := get(http.MethodGet, "")
	if plain.Header().Get("Content-Encoding") != "" || !strings.Contains(plain.Body.String(), "monky_fleet_env_verdict{") {
		t.Fatalf("without Accept-Encoding: %v\n%.300s", plain.Header(), plain.Body.String())
	}
	for accept, gz := range map[string]bool{"gzip": true, "br, gzip;q=0.5": true, "GZIP": true, "gzip;q=0": false, "identity": false, "deflate": false} {
		rec := get(http.MethodGet, accept)
		if got := rec.Header().Get("Content-Encoding") == "gzip"; got != gz {
			t.Errorf("Accept-Encoding %q: gzip %v, want %v", accept, got, gz)
			continue
		}
		if rec.Header().Get("Vary") != "Accept-Encoding" {
			t.Errorf("Accept-Encoding %q: Vary %q", accept, rec.Header().Get("Vary"))
		}
		body := rec.Body.Bytes()
		if gz {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(body, plain.Body.Bytes()) {
			t.Errorf("Accept-Encoding %q: another exposition", accept)
		}
	}
	for _, accept := range []string{"", "gzip"} {
		if rec := get(http.MethodHead, accept); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
			t.Errorf("HEAD (Accept-Encoding %q): %d, %d bytes", accept, rec.Code, rec.Body.Len())
		}
	}
}

// FuzzEncode feeds tenancy's strings (env, site, version, result, times) to the encoder: it must
// never panic, its output must parse, and no label value may exceed maxLabel bytes.
func FuzzEncode(f *testing.F) {
	f.Add("env-a", "cbs", "0.2.0", "healthy", now.Format(time.RFC3339))
	f.Add("\xff", "", strings.Repeat("9", 500), "weird", "not a time")
	f.Add("env-é", "sité", "a"+strings.Repeat("€", 60), "healthy", "")
	f.Fuzz(func(t *testing.T, env, site, version, result, desiredAt string) {
		d := doc()
		d.Envs[0].EnvID, d.Envs[0].Site, d.Envs[0].AgentVersion, d.Envs[0].LastResult = env, site, version, result
		d.Envs[0].DesiredAt = &desiredAt
		page, err := Encode(d)
		if err != nil {
			t.Fatal(err)
		}
		var p expfmt.TextParser
		mfs, err := p.TextToMetricFamilies(bytes.NewReader(page))
		if err != nil {
			t.Fatalf("output does not parse: %v", err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if len(l.GetValue()) > maxLabel || !utf8.ValidString(l.GetValue()) {
						t.Fatalf("label %s is %d bytes: %q", l.GetName(), len(l.GetValue()), l.GetValue())
					}
				}
			}
		}
	})
}

// Scrapes served while readings replace the view always get one whole exposition (run with
// -race to check the locking too).
func TestScrapesDuringRefreshes(t *testing.T) {
	src := &fakeSource{}
	ex := newTestExporter(src)
	ex.Refresh(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 20 {
			if i%2 == 1 {
				src.mu.Lock()
				src.err = sourceErr{"tenancy"}
				src.mu.Unlock()
			} else {
				src.mu.Lock()
				src.err = nil
				src.mu.Unlock()
			}
			ex.Refresh(context.Background())
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		got := scrape(t, ex)
		if got["monky_fleet_env_verdict{env=env-a,site=cbs,verdict=SILENT}"] != "1" {
			t.Fatalf("a scrape during a refresh lost the view: %v", got)
		}
	}
}

// A fleet larger than a chunk is written chunk by chunk and still reads as one exposition: every
// family once (a second HELP or TYPE fails the parse), every env's series there, the duplicate
// orphan row still dropped across chunks, and the summary once.
func TestEncodeInChunks(t *testing.T) {
	d := doc()
	for i := 0; i < 2*chunkEnvs+7; i++ {
		e := d.Envs[1] // env-b, OK
		e.EnvID = "env-n" + strconv.Itoa(i)
		d.Envs = append(d.Envs, e)
		d.Summary[e.Verdict]++
	}
	e := d.Envs[4] // the duplicate orphan, now in the last chunk
	d.Envs = append(d.Envs[:4], d.Envs[5:]...)
	d.Envs = append(d.Envs, e)
	page, err := Encode(d)
	if err != nil {
		t.Fatal(err)
	}
	got := parse(t, page)
	if n := strings.Count(string(page), "# TYPE monky_fleet_env_verdict "); n != 1 {
		t.Errorf("env_verdict's TYPE written %d times", n)
	}
	wantVerdicts := (len(d.Envs) - 1) * len(verdict.All())
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "monky_fleet_env_verdict{") {
			n++
		}
	}
	if n != wantVerdicts {
		t.Errorf("%d env_verdict series, want %d", n, wantVerdicts)
	}
	if got[`monky_fleet_env_verdict{env=env-n`+strconv.Itoa(2*chunkEnvs+6)+`,site=cbs,verdict=OK}`] != "1" || got[`monky_fleet_env_mesh_online{env=env-old,site=}`] != "0" {
		t.Error("a series of the last chunk is missing, or the duplicate orphan row overwrote the first")
	}
	if got[`monky_fleet_envs{verdict=OK}`] != strconv.Itoa(d.Summary["OK"]) {
		t.Errorf("envs{OK} = %s, want %d", got[`monky_fleet_envs{verdict=OK}`], d.Summary["OK"])
	}
}
