package report

import (
	"errors"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/fleettest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// The controller's certificate wins; the check-in's date stands in when the controller has none
// (or none it can read), and the document says which it used.
func TestCertHorizons(t *testing.T) {
	now := fleettest.Now
	day := 24 * time.Hour
	stamp := func(at time.Time) *string { s := at.UTC().Format(time.RFC3339); return &s }
	agent := func(env string, checkinNotAfter *string) protocol.AdminAgent {
		return protocol.AdminAgent{EnvID: env, Site: "cbs", Identity: ziti.IdentityName(env), AgentVersion: "0.3.0", Transport: "sdk",
			LastCheckinAt: stamp(now.Add(-10 * time.Second)), CheckinIntervalS: 60, LastResult: protocol.ResultHealthy,
			IdentityNotAfter: checkinNotAfter}
	}
	id := func(env string, cert *ziti.Certificate) ziti.Identity {
		on := true
		return ziti.Identity{ID: "z-" + env, Name: ziti.IdentityName(env), RoleAttributes: ziti.RequiredAttributes(), Online: &on, Cert: cert}
	}
	agents := &admin.Agents{Now: now, Agents: []protocol.AdminAgent{
		agent("env-ok", stamp(now.Add(10*day))), // the controller's date wins over the agent's
		agent("env-expiring", nil),
		agent("env-expired", nil),
		agent("env-checkin", stamp(now.Add(5*day))),
		agent("env-garbage", stamp(now.Add(300*day))),
		agent("env-none", nil),
	}}
	agents.Agents[2].LastCheckinAt = stamp(now.Add(-50 * time.Hour))
	ids := []ziti.Identity{
		id("env-ok", &ziti.Certificate{NotAfter: now.Add(364 * day)}),
		id("env-expiring", &ziti.Certificate{NotAfter: now.Add(12*day + time.Hour)}),
		id("env-expired", &ziti.Certificate{NotAfter: now.Add(-36 * time.Hour)}),
		id("env-checkin", nil),
		id("env-garbage", &ziti.Certificate{Err: errors.New("certPem: no PEM CERTIFICATE block")}),
		id("env-none", nil),
	}
	doc, err := Build(agents, ids, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		verdict, cell, source string
		days                  int64
	}{
		"env-ok":       {"OK", "364d", "controller", 364},
		"env-expiring": {"EXPIRING", "12d", "controller", 12},
		"env-expired":  {"EXPIRED", "expired", "controller", -2},
		"env-checkin":  {"EXPIRING", "5d (check-in)", "checkin", 5},
		"env-garbage":  {"OK", "300d (check-in)", "checkin", 300},
		"env-none":     {"OK", "-", "", 0},
	}
	for _, e := range doc.Envs {
		w := want[e.EnvID]
		if e.Verdict != w.verdict || e.cert() != w.cell {
			t.Errorf("%s: verdict %s cell %q, want %s %q", e.EnvID, e.Verdict, e.cert(), w.verdict, w.cell)
		}
		if w.source == "" {
			if e.Cert != nil {
				t.Errorf("%s: cert %+v, want null", e.EnvID, e.Cert)
			}
			continue
		}
		if e.Cert == nil || e.Cert.Source != w.source || e.Cert.DaysLeft != w.days {
			t.Errorf("%s: cert %+v, want %s %d days", e.EnvID, e.Cert, w.source, w.days)
		}
	}
	if doc.Summary[string(verdict.Expiring)] != 2 || doc.Summary[string(verdict.Expired)] != 1 {
		t.Errorf("summary %v", doc.Summary)
	}
	// --expiring-within moves the threshold, the default is 21 days.
	doc, _ = Build(agents, ids, Options{Thresholds: verdict.Thresholds{ExpiringWithin: 400 * day}})
	if v := doc.Envs[envIndex(doc, "env-ok")].Verdict; v != "EXPIRING" {
		t.Errorf("env-ok with --expiring-within 400d: %s", v)
	}
	// A gate counts them as blockers, and says how many are about the certificate.
	g := NewGate(doc, GateOptions{})
	if g.Pass || g.Certificates() != 5 || !strings.Contains(g.line(), "5 with an identity certificate expiring or expired") {
		t.Errorf("gate: pass %v, certificates %d, line %q", g.Pass, g.Certificates(), g.line())
	}
	// A bad identity_not_after from tenancy names the env and field.
	bad := "soon"
	agents.Agents[0].IdentityNotAfter = &bad
	if _, err := Build(agents, nil, Options{}); err == nil || !strings.Contains(err.Error(), "env-ok.identity_not_after") {
		t.Errorf("err = %v", err)
	}
}

func envIndex(d *Document, env string) int {
	for i, e := range d.Envs {
		if e.EnvID == env {
			return i
		}
	}
	return -1
}
