//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// The identity certificate's renewal against the real controller (issue 21): the controller of
// the quickstart signs for a year, and a window longer than that makes a renewal due at once.

// readIdentity parses the box's identity file as the agent does.
func (m *mesh) readIdentity(t testing.TB) *identity.File {
	t.Helper()
	raw, err := os.ReadFile(m.identity)
	if err != nil {
		t.Fatal(err)
	}
	f, err := identity.Parse(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// authenticates opens (and closes) an API session at the real controller with f's certificate.
func authenticates(t testing.TB, f *identity.File) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := transport.Extender{}.Open(ctx, f)
	if err != nil {
		return err
	}
	s.Close(ctx)
	return nil
}

func fileOwner(t testing.TB, p string) (mode os.FileMode, uid, gid uint32) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	sys := st.Sys().(*syscall.Stat_t)
	return st.Mode(), sys.Uid, sys.Gid
}

// TestMeshSDKRenewsItsIdentity: a tick of the sdk transport renews the certificate through the
// real controller: a new key and certificate in the same file (same mode, owner and group), the
// controller accepts the new certificate and refuses the old, the next tick checks in through
// the mesh with the new certificate and carries its identity_not_after.
func TestMeshSDKRenewsItsIdentity(t *testing.T) {
	m := newMesh(t, "meshrenew", attrAgent, attrBao)
	if err := os.Chmod(m.identity, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(m.identity, os.Getuid(), 64124); err != nil { // a group the file keeps
		t.Fatal(err)
	}
	old := m.readIdentity(t)
	mode0, uid0, gid0 := fileOwner(t, m.identity)
	if err := authenticates(t, old); err != nil {
		t.Fatalf("the enrolled identity does not authenticate: %v", err)
	}
	if left := time.Until(old.Leaf().NotAfter); left < 360*24*time.Hour {
		t.Fatalf("the controller signed for %s, not a year", left)
	}

	// The controller signs to the second (now + 1 year): a renewal in the enrolment's second
	// would get a certificate ending no later than the current one, which the agent rightly
	// refuses. Let the second turn.
	time.Sleep(1100 * time.Millisecond)
	m.configure(t, "sdk", "identity_renew_below_s: 34560000\n") // 400 days: due at once
	tk := m.tick(t)
	if tk.Exit != 0 {
		m.fatalWithJournals("the renewing tick exited %d", tk.Exit)
	}
	if !strings.Contains(tk.Output, "identity: certificate renewed: valid until") {
		m.fatalWithJournals("the tick did not renew the identity")
	}
	renewed := m.readIdentity(t)
	switch {
	case renewed.Leaf().Fingerprint == old.Leaf().Fingerprint:
		t.Fatal("the identity file still holds the old certificate")
	case string(renewed.KeyPEM) == string(old.KeyPEM):
		t.Error("the key was not rolled")
	case !renewed.Leaf().NotAfter.After(old.Leaf().NotAfter):
		t.Errorf("the new certificate ends %s, the old %s", renewed.Leaf().NotAfter, old.Leaf().NotAfter)
	}
	if mode, uid, gid := fileOwner(t, m.identity); mode != mode0 || uid != uid0 || gid != gid0 {
		t.Errorf("identity is %v %d:%d after the renewal, was %v %d:%d", mode, uid, gid, mode0, uid0, gid0)
	}
	if err := authenticates(t, renewed); err != nil {
		t.Errorf("the controller refuses the renewed certificate: %v", err)
	}
	if err := authenticates(t, old); !errors.Is(err, identity.ErrRefused) {
		t.Errorf("the controller still takes the old certificate (err %v)", err)
	}
	if _, err := os.Stat(m.identity + identity.PendingSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pending file is left: %v", err)
	}

	// The default window: the next ticks check in with the renewed identity and renew nothing.
	m.configure(t, "sdk", "")
	before := len(m.w.Stack.Tenancy.Checkins(m.env))
	if tk := m.tick(t); tk.Exit != 0 || strings.Contains(tk.Output, "certificate renewed") {
		m.fatalWithJournals("the tick after the renewal exited %d", tk.Exit)
	}
	cs := m.w.Stack.Tenancy.Checkins(m.env)
	if len(cs) <= before {
		m.fatalWithJournals("no check-in through the mesh after the renewal")
	}
	want := renewed.Leaf().NotAfter.UTC().Format(time.RFC3339)
	if got := cs[len(cs)-1].Request.IdentityNotAfter; got != want {
		t.Errorf("the check-in carries identity_not_after %q, want the renewed %s", got, want)
	}
	st, err := state.Load(m.box.Dir + "/state/state.json")
	if err != nil {
		t.Fatal(err)
	}
	if st.Identity == nil || st.Identity.RenewedAt == nil || st.Identity.Renewal != nil || st.Identity.Fingerprint != renewed.Leaf().Fingerprint {
		t.Errorf("state.json identity = %+v", st.Identity)
	}

	// fleetctl reads the same date from the controller's cert authenticator.
	doc := m.realStatus(t)
	e, ok := doc.env(m.env)
	if !ok || e.Cert == nil || e.Cert.Source != "controller" || e.Cert.NotAfter != want || e.Verdict != "OK" {
		t.Errorf("fleetctl status: %+v (cert %+v), want OK with the controller's %s", e, e.Cert, want)
	}
}

// TestMeshProxyDaemonRenewsInPlace: the proxy daemon renews the certificate while it runs and
// carries ticks before and after on the new one, without a restart.
func TestMeshProxyDaemonRenewsInPlace(t *testing.T) {
	m := newMesh(t, "meshrenewp", attrAgent, attrBao)
	old := m.readIdentity(t)
	// A window that comes due about a minute after the daemon starts: ticks go through the old
	// certificate first, then the daemon renews in place.
	window := int64(time.Until(old.Leaf().NotAfter).Seconds()) - 60
	tenancyAddr, baoAddr := freeAddr(t), freeAddr(t)
	m.configure(t, "proxy", fmt.Sprintf("identity_renew_below_s: %d\n", window))
	cfg, err := os.ReadFile(m.box.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.Replace(string(cfg), "  port: 443\n", "  port: 443\n  proxy_addr: "+tenancyAddr+"\n", 1)
	cfgText = strings.Replace(cfgText, "  addr: "+m.baoAddr+"\n", "  addr: "+m.baoAddr+"\n  proxy_addr: "+baoAddr+"\n", 1)
	if err := os.WriteFile(m.box.ConfigPath, []byte(cfgText), 0o640); err != nil {
		t.Fatal(err)
	}
	proc, stop := m.proxyDaemon(t)
	m.converge(t, 8)
	if f := m.readIdentity(t); f.Leaf().Fingerprint != old.Leaf().Fingerprint {
		t.Fatalf("renewed before the window: the test cannot show the daemon carrying ticks across it")
	}
	deadline := time.Now().Add(4 * time.Minute)
	for m.readIdentity(t).Leaf().Fingerprint == old.Leaf().Fingerprint {
		if time.Now().After(deadline) {
			t.Fatalf("the proxy daemon did not renew the identity within 4 minutes:\n%s", proc.LogTail())
		}
		if tk := m.tick(t); tk.Exit != 0 { // ticks keep going while the window approaches
			m.fatalWithJournals("a tick through the proxy before the renewal exited %d", tk.Exit)
		}
		time.Sleep(2 * time.Second)
	}
	renewed := m.readIdentity(t)
	if err := authenticates(t, old); !errors.Is(err, identity.ErrRefused) {
		t.Errorf("the controller still takes the old certificate (err %v)", err)
	}
	for i := 0; i < 3; i++ {
		if tk := m.tick(t); tk.Exit != 0 {
			m.fatalWithJournals("tick %d through the proxy after its renewal exited %d", i+1, tk.Exit)
		}
	}
	if cs := m.w.Stack.Tenancy.Checkins(m.env); cs[len(cs)-1].Request.IdentityNotAfter != renewed.Leaf().NotAfter.UTC().Format(time.RFC3339) {
		t.Errorf("the last check-in carries %q", cs[len(cs)-1].Request.IdentityNotAfter)
	}
	log := proc.LogTail()
	for _, want := range []string{"identity: certificate renewed", "proxy: ziti context replaced with the renewed identity"} {
		if !strings.Contains(log, want) {
			t.Errorf("proxy log lacks %q:\n%s", want, log)
		}
	}
	// The daemon that carried those ticks is the one started before: still running, stops cleanly.
	if err := stop(); err != nil {
		t.Fatalf("the proxy daemon after the renewal: %v", err)
	}
}

// TestMeshFleetctlCertHorizon: fleetctl reads the certificate's horizon from the real
// controller: OK with the default threshold, EXPIRING with one longer than its life, and the
// exporter's series carries it.
func TestMeshFleetctlCertHorizon(t *testing.T) {
	m := newMesh(t, "meshcert", attrAgent, attrBao)
	m.configure(t, "sdk", "")
	m.converge(t, 6)
	want := m.readIdentity(t).Leaf().NotAfter
	e, ok := m.realStatus(t).env(m.env)
	if !ok || e.Verdict != "OK" || e.Cert == nil || e.Cert.Source != "controller" || e.Cert.NotAfter != want.UTC().Format(time.RFC3339) {
		t.Fatalf("fleetctl status with the default threshold: %+v (cert %+v)", e, e.Cert)
	}
	r := m.realFleetctl(t, "status", "--env", m.env, "--expiring-within", "400d", "-o", "wide")
	if r.Exit != 1 || !strings.Contains(r.Stdout, "EXPIRING") || !strings.Contains(r.Stdout, "identity certificate expires in") {
		t.Errorf("--expiring-within 400d: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
	r = m.realFleetctl(t, "status", "--env", m.env, "-o", "prometheus")
	series := fmt.Sprintf(`monky_fleet_env_identity_cert_expiry_timestamp_seconds{env=%q,site="demo"} `, m.env)
	if !strings.Contains(r.Stdout, series) {
		t.Errorf("-o prometheus lacks %s:\n%s", series, r.Stdout)
	}
	if r := m.realFleetctl(t, "gate", "--env", m.env, "--expiring-within", "400d"); r.Exit != 1 ||
		!strings.Contains(r.Stdout, "1 with an identity certificate expiring or expired") {
		t.Errorf("gate --expiring-within 400d: exit %d\n%s%s", r.Exit, r.Stdout, r.Stderr)
	}
}

// TestMeshRenewalKilledAtEachStep: a renewal against the real controller, stopped after each of
// its steps as a kill -9 would stop it (the step hook returns before the next step runs), then
// the real agent's next tick: it authenticates with what is on disk, checks in through the mesh,
// keeps the release converged and finishes the renewal (or, killed before anything reached the
// disk, keeps the old certificate the controller still accepts). One identity goes through all
// the steps in turn, so a renewal also starts while the controller holds an unverified
// certificate of the one killed after extend.
func TestMeshRenewalKilledAtEachStep(t *testing.T) {
	m := newMesh(t, "meshrenewk", attrAgent, attrBao)
	m.configure(t, "sdk", "") // the default window: the ticks themselves renew nothing
	m.converge(t, 8)
	statePath := filepath.Join(m.box.Dir, "state", "state.json")
	errKill := errors.New("killed")
	for _, at := range identity.Steps {
		// The controller signs to the second (now + 1 year): a renewal in the same second as the
		// last one would get a certificate ending no later than the current, which the agent
		// rightly refuses (a capped CA). Let the second turn.
		time.Sleep(1100 * time.Millisecond)
		old := m.readIdentity(t)
		st, err := state.Load(statePath)
		if err != nil {
			t.Fatal(err)
		}
		var log strings.Builder
		rn := &identity.Renewer{
			Path: m.identity, Who: identity.Who{Transport: "sdk", Window: 400 * 24 * time.Hour}, // due at once
			Controller: transport.Extender{}, Now: time.Now, Log: slog.New(slog.NewTextHandler(&log, nil)),
			Step: func(name string) error {
				if name == at {
					return errKill
				}
				return nil
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		_, err = rn.Renew(ctx, st, func() error { return state.Save(statePath, st) })
		cancel()
		var stop *identity.StepStop
		if !errors.As(err, &stop) || stop.Name != at {
			t.Fatalf("%s: the renewal was not stopped there: %v\n%s", at, err, log.String())
		}

		before := len(m.w.Stack.Tenancy.Checkins(m.env))
		tk := m.tick(t)
		if tk.Exit != 0 {
			m.fatalWithJournals("%s: the tick after the kill exited %d", at, tk.Exit)
		}
		cs := m.w.Stack.Tenancy.Checkins(m.env)
		if len(cs) <= before {
			m.fatalWithJournals("%s: no check-in through the mesh after the kill", at)
		}
		now := m.readIdentity(t)
		if err := authenticates(t, now); err != nil {
			t.Fatalf("%s: the controller refuses the identity on disk after the next tick: %v", at, err)
		}
		if _, err := os.Stat(m.identity + identity.PendingSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the pending file is left: %v", at, err)
		}
		switch renewed := now.Leaf().Fingerprint != old.Leaf().Fingerprint; {
		case at == identity.StepExtended && renewed:
			t.Errorf("%s: nothing was on disk, yet the identity changed", at)
		case at != identity.StepExtended && !renewed:
			t.Errorf("%s: the next tick did not finish the renewal:\n%s", at, tk.Output)
		case renewed:
			if err := authenticates(t, old); !errors.Is(err, identity.ErrRefused) {
				t.Errorf("%s: the controller still takes the old certificate (err %v)", at, err)
			}
		}
		want := now.Leaf().NotAfter.UTC().Format(time.RFC3339)
		if got := cs[len(cs)-1].Request.IdentityNotAfter; got != want {
			t.Errorf("%s: the check-in carries identity_not_after %q, want %s", at, got, want)
		}
		after, err := state.Load(statePath)
		if err != nil {
			t.Fatal(err)
		}
		if after.LastResult != protocol.ResultHealthy || after.AppliedSha != st.AppliedSha {
			t.Errorf("%s: after the next tick the box is %q on %.12s, want healthy on %.12s", at, after.LastResult, after.AppliedSha, st.AppliedSha)
		}
		if after.Identity == nil || after.Identity.Fingerprint != now.Leaf().Fingerprint ||
			(after.Identity.Renewal != nil && after.Identity.Renewal.Step == state.RenewalPending) {
			t.Errorf("%s: state.json identity = %+v", at, after.Identity)
		}
	}
}
