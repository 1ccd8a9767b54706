package doctor

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"
)

const day = 24 * time.Hour

// docNow is the fixture's clock.
var docNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// writeIdentity replaces the fixture's identity with one whose certificate ends certEnd and whose
// CA ends caEnd, owned by uid (the agent's for a renewable one).
func (f *fixture) writeIdentity(certEnd, caEnd time.Time, uid uint32) {
	f.t.Helper()
	ca := testpki.NewCAValid(f.t, "net CA", time.Unix(0, 0), caEnd)
	leaf := ca.Client(f.t, "monky-host."+envID, time.Unix(0, 0), certEnd)
	b, _ := json.Marshal(map[string]any{"ztAPI": "https://ctrl.example.net:1280", "id": map[string]string{
		"cert": "pem:" + string(leaf.CertPEM), "key": "pem:" + string(leaf.KeyPEM), "ca": "pem:" + string(ca.PEM)}})
	write(f.t, f.cfg().Identity, string(b), 0o640)
	f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o640, UID: uid, GID: zitiGID}
}

func TestIdentityCertCheck(t *testing.T) {
	far, caFar := docNow.Add(300*day), docNow.Add(3000*day)
	tests := []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{
		{"far from expiry, the agent can renew", func(f *fixture) { f.writeIdentity(far, caFar, agentUID) },
			want{status: OK, detail: []string{"valid until 2027-09-28T10:00:00Z (300d)", "renewed by agent (transport sdk"}}},
		{"far from expiry, a file the agent cannot replace", func(f *fixture) { f.writeIdentity(far, caFar, zitiUID) },
			want{status: Warn, detail: []string{"when it comes due the agent cannot renew it", "belongs to ziti"}, fix: []string{"chown monky-deployd /", "monky-host.env-qa-02.json"}}},
		{"within the window and blocked", func(f *fixture) { f.writeIdentity(docNow.Add(10*day), caFar, zitiUID) },
			want{status: Fail, detail: []string{"the agent must renew it now and cannot"}, fix: []string{"chown monky-deployd"}}},
		{"within the window, renewal failing", func(f *fixture) {
			f.writeIdentity(docNow.Add(10*day), caFar, agentUID)
			st := &state.State{Identity: &state.IdentityCert{Renewal: &state.IdentityRenewal{Failures: 3, LastError: "extend: HTTP 503"}}}
			if err := state.Save(f.cfg().StatePath(), st); err != nil {
				t.Fatal(err)
			}
		}, want{status: Warn, detail: []string{"(10d), within identity_renew_below_s", "should have by now", "3 in a row): extend: HTTP 503"}, fix: []string{"grep 'identity:'"}}},
		{"expired", func(f *fixture) { f.writeIdentity(docNow.Add(-2*day), caFar, agentUID) },
			want{status: Fail, detail: []string{"expired 2d ago", "off the mesh"}, fix: []string{"fleetctl onboard env-qa-02 --reissue"}}},
		{"a half-done renewal", func(f *fixture) {
			f.writeIdentity(far, caFar, agentUID)
			write(f.t, f.cfg().Identity+".renew", "{}", 0o640)
		}, want{status: Warn, detail: []string{"a renewal is half done"}, fix: []string{"the next tick finishes it"}}},
		{"renewal off, near", func(f *fixture) {
			f.writeIdentity(docNow.Add(10*day), caFar, agentUID)
			f.cfg().IdentityRenewBelowS = 0
		}, want{status: Warn, detail: []string{"renewal is off"}, fix: []string{"set identity_renew_below_s"}}},
		{"the tunneller renews it, near", func(f *fixture) {
			f.writeIdentity(docNow.Add(10*day), caFar, zitiUID)
			f.cfg().Transport = "system"
		}, want{status: Warn, detail: []string{"renewed by ziti-edge-tunnel", "should have by now"}, fix: []string{"journalctl -u ziti-edge-tunnel.service"}}},
		{"system transport, unreadable", func(f *fixture) {
			f.cfg().Transport = "system"
			f.fs.readErr[f.cfg().Identity] = &os.PathError{Op: "open", Path: f.cfg().Identity, Err: os.ErrPermission}
		}, want{status: Skip, detail: []string{"ziti-edge-tunnel holds the identity"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			tc.setup(f)
			tc.want.assert(t, f.check("identity-cert"))
		})
	}
}

func TestCAChecks(t *testing.T) {
	far := docNow.Add(3000 * day)
	f := newFixture(t, "")
	f.writeIdentity(far, far, agentUID)
	want{status: OK, detail: []string{"id.ca", "CN=net CA expires"}}.assert(t, f.check("identity-ca"))
	f.writeIdentity(far, docNow.Add(20*day), agentUID)
	want{status: Warn, detail: []string{"(20d)"}, fix: []string{"re-enrol"}}.assert(t, f.check("identity-ca"))
	f.writeIdentity(far, docNow.Add(-day), agentUID)
	want{status: Fail, detail: []string{"expired 1d ago", "TLS to the server it vouches for fails"}}.assert(t, f.check("identity-ca"))

	p := f.cfg().Bao.CAFile
	want{status: Skip, detail: []string{"does not exist", "system roots"}}.assert(t, f.check("openbao-ca"))
	write(t, p, "not PEM", 0o644)
	want{status: Fail, detail: []string{"no PEM CERTIFICATE block", "refuses it"}, fix: []string{p}}.assert(t, f.check("openbao-ca"))
	write(t, p, string(testpki.NewCAValid(t, "bao CA", time.Unix(0, 0), docNow.Add(10*day)).PEM), 0o644)
	want{status: Warn, detail: []string{"CN=bao CA expires", "(10d)"}, fix: []string{"replace " + p}}.assert(t, f.check("openbao-ca"))
	write(t, p, string(testpki.NewCAValid(t, "bao CA", time.Unix(0, 0), far).PEM), 0o644)
	want{status: OK, detail: []string{"CN=bao CA"}}.assert(t, f.check("openbao-ca"))
}

// A warning prints its fix and fails nothing; only FAIL makes doctor exit 1.
func TestWarnPrintsItsFixAndFailsNothing(t *testing.T) {
	rs, allOK := Run(context.Background(), []Check{{Name: "identity-cert", Run: func(context.Context) Result {
		return warn("expires in 12d", "journalctl -u monky-deployd")
	}}})
	var b strings.Builder
	if err := Print(&b, rs); err != nil {
		t.Fatal(err)
	}
	if !allOK || Failed(rs) != 0 || b.String() != "WARN identity-cert expires in 12d — fix: journalctl -u monky-deployd\n" {
		t.Errorf("allOK %v, printed %q", allOK, b.String())
	}
}
