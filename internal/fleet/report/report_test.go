package report

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/olekukonko/tablewriter/pkg/twwidth"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/fleettest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// sources turns the demo fleet into what the two clients return.
func sources(f fleettest.Fleet) (*admin.Agents, []ziti.Identity) {
	ids := make([]ziti.Identity, 0, len(f.Identities))
	for i, z := range f.Identities {
		online := z.Online
		ids = append(ids, ziti.Identity{
			ID: "zid" + string(rune('a'+i)), Name: z.Name, RoleAttributes: z.RoleAttributes, Online: &online,
			Hostname: z.Hostname, SDKVersion: z.SDKVersion, SDKApp: z.SDKApp, EnrollmentPending: z.EnrollmentJWT != "",
		})
	}
	return &admin.Agents{Now: f.Now, Agents: f.Agents, Pages: 1}, ids
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestDemoFleetGolden(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	doc, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		format render.Format
		file   string
	}{
		{render.FormatTable, "status.table.golden"},
		{render.FormatWide, "status.wide.golden"},
		{render.FormatJSON, "status.json.golden"},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			b, err := render.Printer{Format: tc.format}.Render(doc)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.file, b)
		})
	}
	t.Run("gate", func(t *testing.T) {
		g := NewGate(doc, GateOptions{Allow: []string{"env-old-*"}})
		b, err := render.Printer{Format: render.FormatTable}.Render(g)
		if err != nil {
			t.Fatal(err)
		}
		golden(t, "gate.table.golden", b)
	})
}

func TestDemoFleetVerdicts(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	v020, _ := verdict.ParseVersion("0.2.0")
	doc, err := Build(agents, ids, Options{Orphans: true, Thresholds: verdict.Thresholds{MinVersion: &v020}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range doc.Envs {
		got[e.EnvID] = e.Verdict
	}
	want := map[string]string{
		"env-dev-01": "SILENT", "env-dev-02": "OK", "env-dev-03": "OK", "env-dev-04": "SILENT", "env-dev-08": "SILENT",
		"env-qa-01": "FAILING", "env-qa-02": "ATTRS_MISSING", "env-qa-03": "DRIFT",
		"env-stg-01": "OFFLINE", "env-stg-02": "NEVER_CHECKED_IN", "env-stg-03": "NO_IDENTITY",
		"env-prod-01": "OK", "env-prod-02": "OUTDATED", "env-old-07": "ORPHAN_IDENTITY",
	}
	for env, v := range want {
		if got[env] != v {
			t.Errorf("%s: %s, want %s", env, got[env], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("rows %v", got)
	}
	// Every verdict is in the summary, zero or not, so a consumer can index it blindly.
	for _, v := range verdict.All() {
		if _, ok := doc.Summary[string(v)]; !ok {
			t.Errorf("summary lacks %s", v)
		}
	}
	if line := doc.SummaryLine(); line != "14 envs: 3 OK, 1 NO_IDENTITY, 1 ATTRS_MISSING, 1 NEVER_CHECKED_IN, 3 SILENT, 1 OFFLINE, 1 FAILING, 1 DRIFT, 1 OUTDATED, 1 ORPHAN_IDENTITY" {
		t.Errorf("summary line %q", line)
	}
}

// The 0.1.8 story as the SRE reads it: online, stale, the timer reported disabled, and the
// version it last ran.
func TestSilentDisableSignature(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	doc, err := Build(agents, ids, Options{EnvGlob: "env-dev-08"})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Envs) != 1 {
		t.Fatalf("rows %d", len(doc.Envs))
	}
	e := doc.Envs[0]
	if e.Verdict != "SILENT" || e.MeshOnline == nil || !*e.MeshOnline || *e.CheckinAgeS != 29*60 {
		t.Fatalf("row %+v", e)
	}
	for _, s := range []string{"timer reported disabled", "last ran 0.1.8", "systemctl enable --now monky-deployd.timer"} {
		if !strings.Contains(e.NextStep, s) {
			t.Errorf("next step %q lacks %q", e.NextStep, s)
		}
	}
}

func TestOptions(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	for _, tc := range []struct {
		name string
		opts Options
		want []string
	}{
		// The worst first, then by env id.
		{"glob", Options{EnvGlob: "env-qa-*", Orphans: true}, []string{"env-qa-02", "env-qa-01", "env-qa-03"}},
		{"verdicts", Options{Orphans: true, Verdicts: map[verdict.Verdict]bool{verdict.Silent: true, verdict.OrphanIdentity: true}},
			[]string{"env-dev-01", "env-dev-04", "env-dev-08", "env-old-07"}},
		{"glob applies to orphans", Options{EnvGlob: "env-old-*", Orphans: true}, []string{"env-old-07"}},
		{"no orphans when filtered by site", Options{EnvGlob: "env-old-*"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, err := Build(agents, ids, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range doc.Envs {
				got = append(got, e.EnvID)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("envs %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Build(agents, ids, Options{EnvGlob: "env-["}); err == nil {
		t.Error("a bad glob was accepted")
	}
}

// Staleness is measured against the `now` tenancy sent, whatever the machine's clock says:
// moving it changes nothing, because Build has no other clock to read.
func TestAgesUseTenancysNow(t *testing.T) {
	f := fleettest.Demo(fleettest.Now)
	agents, ids := sources(f)
	doc, err := Build(agents, ids, Options{EnvGlob: "env-dev-02"})
	if err != nil {
		t.Fatal(err)
	}
	if got := *doc.Envs[0].CheckinAgeS; got != 20 {
		t.Errorf("age %ds, want 20s against tenancy's now", got)
	}
	if doc.Now != "2026-12-02T10:00:00Z" {
		t.Errorf("now %q", doc.Now)
	}
}

func TestIdentityNameFromTenancy(t *testing.T) {
	at := fleettest.Now.Format(time.RFC3339)
	agents := &admin.Agents{Now: fleettest.Now, Agents: []protocol.AdminAgent{{EnvID: "env-a", Identity: "monky-host.env-a-renamed", LastCheckinAt: &at}}}
	online := true
	ids := []ziti.Identity{{ID: "1", Name: "monky-host.env-a-renamed", RoleAttributes: ziti.RequiredAttributes(), Online: &online}}
	doc, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Envs) != 1 || doc.Envs[0].Verdict != "OK" {
		t.Fatalf("envs %+v", doc.Envs)
	}
}

func TestJSONShape(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	doc, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Schema  int                          `json:"schema"`
		Now     string                       `json:"now"`
		Summary map[string]int               `json:"summary"`
		Envs    []map[string]json.RawMessage `json:"envs"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Schema != 1 || raw.Now == "" || len(raw.Envs) != 14 {
		t.Fatalf("doc %+v", raw)
	}
	for _, e := range raw.Envs {
		for _, k := range []string{"env_id", "site", "verdict", "reasons", "next_step", "last_checkin_at", "checkin_age_s",
			"agent_version", "mesh_online", "role_attributes", "applied_sha", "desired_sha", "last_result", "timer",
			"stale_cause", "last_action", "checkin_tick_id", "result_tick_id", "last_exit_code", "apply_timeout_s", "last_failure", "enrollment_pending"} {
			if _, ok := e[k]; !ok {
				t.Errorf("env %s lacks %q", e["env_id"], k)
			}
		}
	}
	// mesh_online is null, not false, when there is no identity to ask about.
	for _, e := range raw.Envs {
		if string(e["env_id"]) == `"env-stg-03"` && string(e["mesh_online"]) != "null" {
			t.Errorf("env-stg-03 mesh_online %s, want null", e["mesh_online"])
		}
	}
}

// WriteJSON must be byte for byte what the encoder writes, or the goldens and every consumer
// would see two different documents depending on the path taken.
func TestWriteJSONMatchesTheEncoder(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	full, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	tricky := *full
	tricky.Envs = append([]Env{}, full.Envs...)
	tricky.Envs[0].LastDetail = "<html> & \"quotes\" \u2028 \u2029 \\ é \x00 \x1f \x7f"
	tricky.Envs[0].Reasons = nil
	tricky.Envs[0].RoleAttributes = []string{}
	tricky.Envs[0].Hostname = "\t\n\r\b\f"
	for _, tc := range []struct {
		name string
		doc  *Document
	}{
		{"demo", full},
		{"escapes", &tricky},
		{"no envs", &Document{Schema: 1, Now: "x", Summary: map[string]int{}, Envs: []Env{}}},
		{"nil envs", &Document{Schema: 1, Now: "x", Summary: map[string]int{"OK": 0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(tc.doc); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := tc.doc.WriteJSON(&got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("WriteJSON differs from the encoder:\n%s\n---\n%s", got.String(), want.String())
			}
		})
	}
	// Invalid UTF-8 cannot reach a document (both sources are read strictly, as valid UTF-8),
	// but were it there, it would read back as the encoder's would: U+FFFD, written unescaped.
	bad := *full
	bad.Envs = append([]Env{}, full.Envs...)
	bad.Envs[0].LastDetail = "a \xff\xfe b"
	var got bytes.Buffer
	if err := bad.WriteJSON(&got); err != nil {
		t.Fatal(err)
	}
	var back Document
	if err := json.Unmarshal(got.Bytes(), &back); err != nil || back.Envs[0].LastDetail != "a \ufffd\ufffd b" {
		t.Errorf("invalid UTF-8 reads back as %q (%v)", back.Envs[0].LastDetail, err)
	}
}

// Keeps and IdentityOf are what fleetctl's confirmation of missing identities uses too, so the
// envs it looks up are the ones Build judges, under the names Build judges them by.
func TestKeepsAndIdentityOf(t *testing.T) {
	for _, tc := range []struct {
		glob, env string
		want      bool
	}{
		{"", "env-dev-01", true}, {"env-dev-*", "env-dev-01", true}, {"env-dev-*", "env-prod-01", false},
		{"env-dev-0[18]", "env-dev-08", true}, {"[", "env-dev-01", false},
	} {
		if got := Keeps(tc.glob, tc.env); got != tc.want {
			t.Errorf("Keeps(%q, %q) = %v, want %v", tc.glob, tc.env, got, tc.want)
		}
	}
	if got := IdentityOf(protocol.AdminAgent{EnvID: "env-dev-01"}); got != "monky-host.env-dev-01" {
		t.Errorf("IdentityOf without identity = %q", got)
	}
	if got := IdentityOf(protocol.AdminAgent{EnvID: "env-dev-01", Identity: "monky-host.renamed"}); got != "monky-host.renamed" {
		t.Errorf("IdentityOf with identity = %q", got)
	}
}

// A box backing off shows it in its row and its JSON: which sha failed how often, what it
// reverted to, when it tries next.
func TestBackoffRow(t *testing.T) {
	now := fleettest.Now
	stamp := func(d time.Duration) *string { s := now.Add(d).Format(time.RFC3339); return &s }
	failed, applied := "9f3e21d07a1b", "7a10c4e2b9d8"
	a := protocol.AdminAgent{EnvID: "env-qa-03", Site: "cbs", AgentVersion: "0.2.0", LastCheckinAt: stamp(-20 * time.Second),
		CheckinIntervalS: 60, DesiredSha: failed, DesiredAt: stamp(-40 * time.Minute), AppliedSha: applied,
		LastResult: "healthy", LastResultAt: stamp(-20 * time.Second),
		FailedSha: &failed, Attempts: 3, NextAttemptAt: stamp(8 * time.Minute), RevertedTo: &applied, RevertHealthy: ptrTo(true)}
	online := true
	ids := []ziti.Identity{{ID: "z1", Name: "monky-host.env-qa-03", RoleAttributes: []string{ziti.AttrDeployAgent, ziti.AttrOpenBaoClient}, Online: &online}}
	doc, err := Build(&admin.Agents{Now: now, Agents: []protocol.AdminAgent{a}}, ids, Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := doc.Envs[0]
	if e.Verdict != "BACKOFF" || !slices.Equal(e.Reasons, []string{"BACKOFF", "DRIFT"}) ||
		!strings.HasPrefix(e.NextStep, "9f3e21d0 failed 3×, reverted to 7a10c4e2 (healthy), next try in 8m") {
		t.Errorf("row = %s %v %q", e.Verdict, e.Reasons, e.NextStep)
	}
	b, err := render.Printer{Format: render.FormatJSON}.Render(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"failed_sha": "9f3e21d07a1b"`, `"attempts": 3`, `"next_attempt_at": "` + *stamp(8 * time.Minute) + `"`,
		`"reverted_to": "7a10c4e2b9d8"`, `"revert_healthy": true`, `"BACKOFF": 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}
	tb, err := render.Printer{Format: render.FormatTable}.Render(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tb), "BACKOFF") || !strings.Contains(string(tb), "1 env: 1 BACKOFF") {
		t.Errorf("table:\n%s", tb)
	}
}

func ptrTo[T any](v T) *T { return &v }

// The gate keeps only what blocks: an OK env does not, a backing-off one says so, an allowed
// one is counted apart; with --expect-version an OK env still running the old version since the
// start is a LAGGARD, and the start is recorded.
func TestNewGate(t *testing.T) {
	now := fleettest.Now
	start := now.Add(-10 * time.Minute)
	stamp := func(d time.Duration) *string { s := now.Add(d).Format(time.RFC3339); return &s }
	failed := "9f3e21d07a1b"
	doc := &Document{Now: now.Format(time.RFC3339), Envs: []Env{
		{EnvID: "env-a", Verdict: "OK", AgentVersion: "0.3.0", LastCheckinAt: stamp(-time.Minute)},
		{EnvID: "env-b", Verdict: "OK", AgentVersion: "0.2.0", LastCheckinAt: stamp(-time.Minute)},
		{EnvID: "env-c", Verdict: "BACKOFF", Reasons: []string{"BACKOFF"}, AgentVersion: "0.3.0", LastCheckinAt: stamp(-time.Minute),
			DesiredSha: failed, FailedSha: &failed, NextAttemptAt: stamp(8 * time.Minute), NextStep: "9f3e21d0 failed 3×"},
		{EnvID: "env-old-1", Verdict: "FAILING"},
	}}
	byEnv := func(g *Gate) map[string]Blocker {
		m := map[string]Blocker{}
		for _, b := range g.Blockers {
			m[b.EnvID] = b
		}
		return m
	}

	g := NewGate(doc, GateOptions{Allow: []string{"env-old-*"}})
	bs := byEnv(g)
	if g.Pass || g.Envs != 3 || len(bs) != 1 || g.StartedAt != "" || !slices.Equal(g.Allowed, []string{"env-old-1"}) {
		t.Fatalf("gate without --expect-version = %+v", g)
	}
	if c := bs["env-c"]; !c.BackingOff || c.NextAttemptAt == nil || c.Lagging || c.Why != "9f3e21d0 failed 3×" {
		t.Errorf("backing-off blocker = %+v", c)
	}
	if line := g.line(); !strings.Contains(line, "(1 allowed)") {
		t.Errorf("line %q does not count the allowed env", line)
	}

	g = NewGate(doc, GateOptions{Allow: []string{"env-old-*"}, ExpectVersion: "0.3.0", StartedAt: start})
	bs = byEnv(g)
	if g.StartedAt != start.UTC().Format(time.RFC3339) || len(bs) != 2 {
		t.Fatalf("gate with --expect-version = %+v", g)
	}
	if b := bs["env-b"]; b.Verdict != Laggard || !b.Lagging || !slices.Equal(b.Reasons, []string{Laggard}) || !strings.Contains(b.Why, "running 0.2.0, expected 0.3.0") {
		t.Errorf("laggard = %+v", b)
	}
	if c := bs["env-c"]; c.Lagging || c.Verdict != "BACKOFF" || !slices.Equal(c.Reasons, []string{"BACKOFF"}) {
		t.Errorf("a blocker that runs the expected version is not lagging: %+v", c)
	}

	// Nothing allowed: the line names no allowed envs.
	doc.Envs = doc.Envs[:1]
	if g := NewGate(doc, GateOptions{}); !g.Pass || g.line() != "gate: PASS — 1 envs OK" {
		t.Errorf("gate of one OK env: pass %v, line %q", g.Pass, g.line())
	}
	// With --expect-version a pass names the version and since when.
	g = NewGate(doc, GateOptions{ExpectVersion: "0.3.0", StartedAt: start})
	if want := "gate: PASS — 1 envs OK, all running 0.3.0 since " + start.UTC().Format(time.RFC3339); !g.Pass || g.line() != want {
		t.Errorf("gate with --expect-version of one OK env: pass %v, line %q, want %q", g.Pass, g.line(), want)
	}
}

// BackingOff needs a failed sha, and that sha still desired.
func TestBackingOff(t *testing.T) {
	sha, other, empty := "9f3e21d07a1b", "7a10c4e2b9d8", ""
	for _, tc := range []struct {
		failed  *string
		desired string
		want    bool
	}{{nil, sha, false}, {&empty, "", false}, {&sha, sha, true}, {&sha, other, false}} {
		if got := (Env{FailedSha: tc.failed, DesiredSha: tc.desired}).BackingOff(); got != tc.want {
			t.Errorf("failed %v desired %q: BackingOff = %v", tc.failed, tc.desired, got)
		}
	}
}

// The interval an agent declares sets its staleness: 3 × 5 min, so a check-in 10 min old is fresh.
func TestDeclaredIntervalSetsStaleness(t *testing.T) {
	now := fleettest.Now
	at := now.Add(-10 * time.Minute).Format(time.RFC3339)
	a := protocol.AdminAgent{EnvID: "env-qa-05", Site: "cbs", AgentVersion: "0.2.0", LastCheckinAt: &at, CheckinIntervalS: 300}
	online := true
	ids := []ziti.Identity{{ID: "z1", Name: "monky-host.env-qa-05", RoleAttributes: []string{ziti.AttrDeployAgent, ziti.AttrOpenBaoClient}, Online: &online}}
	doc, err := Build(&admin.Agents{Now: now, Agents: []protocol.AdminAgent{a}}, ids, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e := doc.Envs[0]; e.StaleAfterS != 900 || e.Verdict == "SILENT" {
		t.Errorf("stale after %d s, verdict %s; want 900 s and not SILENT", e.StaleAfterS, e.Verdict)
	}
}

// An orphan identity named like a tenancy env is listed after that env's own row.
func TestSameEnvIDKeepsTheAgentRowFirst(t *testing.T) {
	now := fleettest.Now
	at := now.Add(-time.Minute).Format(time.RFC3339)
	a := protocol.AdminAgent{EnvID: "env-qa-06", Site: "cbs", AgentVersion: "0.2.0", LastCheckinAt: &at, CheckinIntervalS: 60,
		Identity: "monky-host.env-qa-06-new"}
	online := true
	ids := []ziti.Identity{
		{ID: "z1", Name: "monky-host.env-qa-06-new", RoleAttributes: []string{ziti.AttrDeployAgent, ziti.AttrOpenBaoClient}, Online: &online},
		{ID: "z2", Name: "monky-host.env-qa-06", Online: &online},
	}
	doc, err := Build(&admin.Agents{Now: now, Agents: []protocol.AdminAgent{a}}, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(doc.Envs) != 2 || doc.Envs[0].Verdict == "ORPHAN_IDENTITY" || doc.Envs[1].Verdict != "ORPHAN_IDENTITY" {
		t.Fatalf("rows %+v", doc.Envs)
	}
}

// The TIMER column: what the agent's last check-in said of its systemd timer.
func TestTimerColumn(t *testing.T) {
	yes, no := true, false
	for _, tc := range []struct {
		t    *protocol.AdminTimer
		want string
	}{
		{nil, ""}, {&protocol.AdminTimer{}, ""},
		{&protocol.AdminTimer{Enabled: &no, Active: &yes}, "disabled"},
		{&protocol.AdminTimer{Enabled: &yes, Active: &no}, "inactive"},
		{&protocol.AdminTimer{Enabled: &yes, Active: &yes}, "enabled"},
		{&protocol.AdminTimer{Enabled: &yes}, "enabled"},
	} {
		if got := timer(tc.t); got != tc.want {
			t.Errorf("timer(%+v) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

// The table fits 120 columns, the worst rows first, each next step the short action; the wide
// table and the JSON carry the whole step, never cut.
func TestTableFitsAndJSONIsWhole(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	long := strings.Repeat("layer sha256:0123456789abcdef ", 20) + "the end"
	for i := range agents.Agents {
		if a := &agents.Agents[i]; a.EnvID == "env-qa-01" {
			a.LastDetail = "PULL_FAILED: " + long
		}
	}
	doc, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	tb, _ := render.Printer{Format: render.FormatTable}.Render(doc)
	for _, l := range strings.Split(strings.TrimRight(string(tb), "\n"), "\n") {
		if n := twwidth.Width(l); n > TableWidth {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	wide, _ := render.Printer{Format: render.FormatWide}.Render(doc)
	js, _ := render.Printer{Format: render.FormatJSON}.Render(doc)
	for name, b := range map[string][]byte{"wide": wide, "json": js} {
		if !strings.Contains(string(b), "the end") || strings.Contains(string(b), "…") {
			t.Errorf("%s does not carry the whole step", name)
		}
	}
	var ranks []int
	for _, e := range doc.Envs {
		ranks = append(ranks, verdict.Rank(verdict.Verdict(e.Verdict)))
	}
	if !slices.IsSorted(ranks) {
		t.Errorf("rows not sorted by severity: %v", ranks)
	}
}

// ShortenWords never splits a word, a path or a command, and marks the cut.
func TestShortenWords(t *testing.T) {
	for _, tc := range []struct {
		s     string
		width int
		want  string
	}{
		{"short enough", 20, "short enough"},
		{"systemctl enable --now monky-deployd.timer", 30, "systemctl enable --now…"},
		{"refused: DISK_INSUFFICIENT: image storage", 25, "refused…"},
		{"averyveryverylongwordwithoutspaces", 10, "averyvery…"},
	} {
		if got := ShortenWords(tc.s, tc.width); got != tc.want || twwidth.Width(got) > tc.width {
			t.Errorf("ShortenWords(%q, %d) = %q, want %q", tc.s, tc.width, got, tc.want)
		}
	}
}

// On a terminal the verdict is coloured by severity; plain output (a pipe) has no escape code.
func TestVerdictColours(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	doc, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := render.Printer{Format: render.FormatTable}.Render(doc)
	if strings.Contains(string(plain), "\x1b[") {
		t.Error("an escape code without Color")
	}
	colour, _ := render.Printer{Format: render.FormatTable, Color: true}.Render(doc)
	for _, want := range []string{"\x1b[31mSILENT\x1b[0m", "\x1b[32mOK\x1b[0m", "\x1b[33mDRIFT\x1b[0m", "\x1b[35mORPHAN_IDENTITY\x1b[0m"} {
		if !strings.Contains(string(colour), want) {
			t.Errorf("coloured table lacks %q", want)
		}
	}
	js, _ := render.Printer{Format: render.FormatJSON, Color: true}.Render(doc)
	if strings.Contains(string(js), "\x1b[") {
		t.Error("an escape code in JSON")
	}
}

// A gate that judged nothing is closed, naming what matched nothing; --expect-version without a
// wait names no start time it never had.
func TestGateOfNothingFails(t *testing.T) {
	agents, ids := sources(fleettest.Demo(fleettest.Now))
	none, err := Build(agents, ids, Options{EnvGlob: "env-nope-*"})
	if err != nil {
		t.Fatal(err)
	}
	g := NewGate(none, GateOptions{Matched: `--env "env-nope-*"`, ExpectVersion: "0.3.0"})
	tb, _ := render.Printer{Format: render.FormatTable}.Render(g)
	if g.Pass || string(tb) != "gate: FAIL — no env matched --env \"env-nope-*\": a gate that judged nothing passes nothing\n" {
		t.Errorf("pass %v:\n%s", g.Pass, tb)
	}
	prod, _ := Build(agents, ids, Options{EnvGlob: "env-prod-01"})
	g = NewGate(prod, GateOptions{ExpectVersion: "0.2.0"})
	tb, _ = render.Printer{Format: render.FormatTable}.Render(g)
	if !g.Pass || string(tb) != "gate: PASS — 1 envs OK, all running 0.2.0\n" || strings.Contains(string(tb), "0001") {
		t.Errorf("pass %v:\n%s", g.Pass, tb)
	}
}

// A held box and a deferred one: their rows, JSON fields, and the gate naming both as blockers,
// counted apart from failures.
func TestHeldAndDeferredRowsAndGate(t *testing.T) {
	now := fleettest.Now
	stamp := func(d time.Duration) *string { s := now.Add(d).Format(time.RFC3339); return &s }
	base := func(env, desired string) protocol.AdminAgent {
		return protocol.AdminAgent{EnvID: env, Site: "osg", AgentVersion: "0.3.0", LastCheckinAt: stamp(-20 * time.Second),
			CheckinIntervalS: 60, DesiredSha: desired, DesiredAt: stamp(-2 * time.Hour), AppliedSha: "7a10c4e2b9d8",
			LastResult: "healthy", LastResultAt: stamp(-20 * time.Second)}
	}
	held := base("env-prod-03", "9f3e21d07a1b")
	held.Hold = &protocol.Hold{Reason: "db migration by hand, OPS-4411", By: "alice", Since: *stamp(-26 * time.Hour), Until: *stamp(2 * time.Hour)}
	deferred := base("env-prod-04", "9f3e21d07a1b")
	deferred.DeferredUntil = stamp(15 * time.Hour)
	failing := base("env-prod-05", "7a10c4e2b9d8")
	failing.LastResult, failing.LastDetail = "unhealthy", "api: exited"
	online := true
	var ids []ziti.Identity
	for _, env := range []string{"env-prod-03", "env-prod-04", "env-prod-05"} {
		ids = append(ids, ziti.Identity{ID: "z" + env, Name: ziti.IdentityName(env), RoleAttributes: ziti.RequiredAttributes(), Online: &online})
	}
	doc, err := Build(&admin.Agents{Now: now, Agents: []protocol.AdminAgent{held, deferred, failing}}, ids, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Rows sort by severity: the failure first, then the hold, then the deferral.
	h, d := doc.Envs[1], doc.Envs[2]
	if doc.Envs[0].Verdict != "FAILING" {
		t.Errorf("first row = %s, want FAILING", doc.Envs[0].Verdict)
	}
	if h.Verdict != "HELD" || !slices.Equal(h.Reasons, []string{"HELD", "DRIFT"}) ||
		h.NextStep != "held by alice until 2026-12-02T12:00Z (in 2h): db migration by hand, OPS-4411; monky-deployd unhold on the box ends it" {
		t.Errorf("held row = %s %v %q", h.Verdict, h.Reasons, h.NextStep)
	}
	if d.Verdict != "DEFERRED" || !strings.Contains(d.NextStep, "until 2026-12-03T01:00Z (in 15h)") {
		t.Errorf("deferred row = %s %v %q", d.Verdict, d.Reasons, d.NextStep)
	}
	b, err := render.Printer{Format: render.FormatJSON}.Render(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"hold": {`, `"reason": "db migration by hand, OPS-4411"`, `"by": "alice"`, `"since": "2026-12-01T08:00:00Z"`,
		`"until": "2026-12-02T12:00:00Z"`, `"deferred_until": "2026-12-03T01:00:00Z"`, `"HELD": 1`, `"DEFERRED": 1`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s:\n%s", want, b)
		}
	}

	g := NewGate(doc, GateOptions{})
	if g.Pass || len(g.Blockers) != 3 || g.Held() != 1 || g.Deferred() != 1 || g.BackingOff() != 0 {
		t.Fatalf("gate = %+v", g)
	}
	if b := g.Blockers[1]; !b.Held || b.Hold == nil || b.Hold.By != "alice" || b.Deferred {
		t.Errorf("held blocker = %+v", b)
	}
	if b := g.Blockers[2]; !b.Deferred || b.DeferredUntil == nil || *b.DeferredUntil != "2026-12-03T01:00:00Z" || b.Held {
		t.Errorf("deferred blocker = %+v", b)
	}
	if b := g.Blockers[0]; b.Held || b.Deferred || b.Verdict != "FAILING" {
		t.Errorf("failing blocker = %+v", b)
	}
	// The 120-column tables give the hold and the deferral their own short step.
	tb, _ := render.Printer{Format: render.FormatTable}.Render(doc)
	for _, want := range []string{"held by alice until 12-02 12:00Z: monky-deployd unhold ends it", "9f3e21d0 waits for its apply window until 12-03 01:00Z"} {
		if !strings.Contains(string(tb), want) {
			t.Errorf("table lacks %q:\n%s", want, tb)
		}
	}
	line := g.line()
	if line != "gate: FAIL — 3 of 3 envs block; 1 held by a human (not a failure: monky-deployd unhold ends it); 1 deferred to an apply window (not a failure)" {
		t.Errorf("line = %q", line)
	}
}

// BenchmarkWriteJSON10k is status -o json's writing of 10,000 envs (fleettest.Large), alone.
func BenchmarkWriteJSON10k(b *testing.B) {
	agents, ids := sources(fleettest.Large(fleettest.Now, 10_000))
	doc, err := Build(agents, ids, Options{Orphans: true})
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for b.Loop() {
		cw := &countWriter{}
		if err := doc.WriteJSON(cw); err != nil {
			b.Fatal(err)
		}
		n = cw.n
	}
	b.SetBytes(n)
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
