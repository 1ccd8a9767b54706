// Package prometheus_test checks the shipped alert rules against the code that makes their
// series: a renamed series, a missing summary or an alert without a promtool unit test fails
// here, without promtool (rules_integration_test.go runs promtool itself).
package prometheus_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/metrics"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/exporter"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func rules(t *testing.T) []rule {
	t.Helper()
	raw, err := os.ReadFile("monky-deployd.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var out []rule
	for _, g := range doc.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// emitted is every series name the agent's textfile and the fleet exporter can produce.
func emitted(t *testing.T) map[string]bool {
	t.Helper()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	page, err := metrics.Encode(metrics.Tick{
		EnvID: "env-a", Version: "0.2.0", Start: now, End: now, Interval: time.Minute,
		State: &state.State{LastResult: "failed", LastSha: "abc", Token: &state.TokenMeta{Source: "lease", ObtainedAt: now, TTLSec: 60},
			LeaseBackoff: &state.LeaseBackoff{Until: now.Add(time.Hour)}, LastTickOKAt: &now},
		Report: &metrics.Report{Result: "failed"}, Containers: []protocol.Container{{State: "running"}},
		Disk: []metrics.Disk{{Path: "/", FreeBytes: 1}}, DiskFloorBytes: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	yes, age := true, int64(10)
	doc := &report.Document{Now: now.Format(time.RFC3339), Summary: map[string]int{}, Envs: []report.Env{{
		EnvID: "env-a", Site: "cbs", Verdict: "OK", CheckinAgeS: &age, MeshOnline: &yes, IdentityID: new(string),
		Timer: &protocol.AdminTimer{Enabled: &yes, Active: &yes}, AgentVersion: "0.2.0", LastResult: "healthy", TokenTTLS: &age,
	}, {
		EnvID: "env-h", Site: "cbs", Verdict: "HELD", Reasons: []string{"HELD", "DEFERRED"}, CheckinAgeS: &age,
		Hold:          &protocol.Hold{Reason: "r", By: "b", Since: now.Add(-time.Hour).Format(time.RFC3339), Until: now.Add(time.Hour).Format(time.RFC3339)},
		DeferredUntil: new(string),
	}}}
	*doc.Envs[1].DeferredUntil = now.Add(time.Hour).Format(time.RFC3339)
	fleet, err := exporter.Encode(doc)
	if err != nil {
		t.Fatal(err)
	}
	ex := exporter.New(exporter.Options{
		Sources: []string{"tenancy"}, Refresh: time.Minute, Timeout: time.Minute, Now: time.Now,
		Read:   func(ctx context.Context) (*report.Document, error) { return doc, nil },
		Source: func(error) []string { return nil }, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	ex.Refresh(context.Background())
	rec := httptest.NewRecorder()
	ex.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	names := map[string]bool{}
	for _, p := range [][]byte{page, fleet, rec.Body.Bytes()} {
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (\S+) `).FindAllSubmatch(p, -1) {
			names[string(m[1])] = true
		}
	}
	return names
}

func TestRulesUseOnlySeriesTheCodeMakes(t *testing.T) {
	names := emitted(t)
	series := regexp.MustCompile(`\bmonky_[a-z_]+`)
	for _, r := range rules(t) {
		for _, s := range series.FindAllString(r.Expr, -1) {
			if !names[s] {
				t.Errorf("%s: series %s is made by nothing (made: %v)", r.Alert, s, names)
			}
		}
	}
}

func TestEveryAlertIsNamedSummarisedAndUnitTested(t *testing.T) {
	want := []string{"MonkyAgentSilent", "MonkyAgentTimerDisabled", "MonkyAgentFailing", "MonkyAgentRefusing",
		"MonkyAgentBackingOff", "MonkyTokenExpiring", "MonkyIdentityAttrsMissing", "MonkyFleetExporterDown", "MonkyDeploydTickStale",
		"MonkyHoldOverdue"}
	tests, err := os.ReadFile("monky-deployd.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]rule{}
	for _, r := range rules(t) {
		have[r.Alert] = r
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" || r.Labels["severity"] == "" {
			t.Errorf("%s: needs a summary, a description and a severity", r.Alert)
		}
		// One evaluation that does not fire yet and one that fires, at least; and the healthy fleet.
		if n := strings.Count(string(tests), "alertname: "+r.Alert); n < 3 {
			t.Errorf("%s: %d evaluations in the unit tests, want its time to fire and the healthy fleet", r.Alert, n)
		}
	}
	for _, a := range want {
		if _, ok := have[a]; !ok {
			t.Errorf("alert %s is missing", a)
		}
	}
}

// The summaries carry the next step fleetctl status prints for the same condition.
func TestSummariesCarryFleetctlsNextStep(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	last, yes := now.Add(-time.Hour), true
	judge := func(in verdict.Input) string {
		return verdict.Evaluate(in, now, verdict.Thresholds{}).NextStep
	}
	agent := &verdict.Agent{EnvID: "ENV", Site: "SITE", Version: "0.2.0", LastCheckin: &last}
	silent := judge(verdict.Input{Agent: agent, Mesh: &verdict.Mesh{Name: "monky-host.ENV", Online: &yes}})
	fresh := now
	attrs := judge(verdict.Input{Agent: &verdict.Agent{EnvID: "ENV", LastCheckin: &fresh},
		Mesh: &verdict.Mesh{Name: "monky-host.ENV", Online: &yes, MissingAttributes: []string{"openbao-client"}}})
	drift := judge(verdict.Input{Agent: &verdict.Agent{EnvID: "ENV", LastCheckin: &fresh, DesiredSha: "a", AppliedSha: "b", DesiredAt: &last},
		Mesh: &verdict.Mesh{Name: "monky-host.ENV", Online: &yes}})
	applied, wanted, ok, next := "7a10c4e2aa", "9f3e21d0bb", true, now.Add(8*time.Minute)
	backoff := judge(verdict.Input{Agent: &verdict.Agent{EnvID: "ENV", LastCheckin: &fresh, DesiredSha: wanted, AppliedSha: applied, LastResult: "failed",
		Backoff: &verdict.Backoff{FailedSha: wanted, Attempts: 3, RevertedTo: applied, RevertHealthy: &ok, NextAttemptAt: &next}},
		Mesh: &verdict.Mesh{Name: "monky-host.ENV", Online: &yes}})
	if backoff == "" {
		t.Fatal("no next step for a backing-off env")
	}
	held := judge(verdict.Input{Agent: &verdict.Agent{EnvID: "ENV", LastCheckin: &fresh,
		Hold: &verdict.Hold{Reason: "r", By: "alice", Since: now.Add(-26 * time.Hour), Until: now.Add(time.Hour)}},
		Mesh: &verdict.Mesh{Name: "monky-host.ENV", Online: &yes}})
	r := map[string]string{}
	for _, x := range rules(t) {
		r[x.Alert] = strings.ReplaceAll(x.Annotations["summary"], "{{ $labels.env }}", "ENV")
	}
	// A silent box's step depends on evidence a rule cannot weigh (timer, last exit code, a
	// running apply): its summary sends the operator to the command that weighs it.
	if silent == "" || !strings.Contains(r["MonkyAgentSilent"], "fleetctl describe ENV") {
		t.Errorf("MonkyAgentSilent: summary %q does not point at fleetctl describe ENV", r["MonkyAgentSilent"])
	}
	for _, wrong := range []string{"systemctl enable"} {
		if strings.Contains(r["MonkyAgentSilent"], wrong) {
			t.Errorf("MonkyAgentSilent: summary %q gives one step for every silent box (%q)", r["MonkyAgentSilent"], wrong)
		}
	}
	for alert, step := range map[string]string{
		"MonkyAgentTimerDisabled":   "systemctl enable --now monky-deployd.timer",
		"MonkyDeploydTickStale":     "systemctl enable --now monky-deployd.timer",
		"MonkyIdentityAttrsMissing": attrs[strings.Index(attrs, ": ")+2:],
		"MonkyAgentFailing":         strings.Split(drift, ": ")[1],
		"MonkyDeployBackingOff":     backoff[strings.Index(backoff, ": ")+2:],
		"MonkyHoldOverdue":          held[strings.LastIndex(held, "; ")+2:],
	} {
		if !strings.Contains(r[alert], step) {
			t.Errorf("%s: summary %q lacks fleetctl's next step %q", alert, r[alert], step)
		}
	}
}
