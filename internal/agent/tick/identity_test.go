package tick_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity/identitytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const day = 24 * time.Hour

// identityFixture is the box's enrolled identity file and the fake controller behind it.
type identityFixture struct {
	ctrl *identitytest.Server
	path string
	who  identity.Who
}

// enroll gives the harness's box an identity valid for left, kept by a Renewer that decides by who.
func (h *harness) enroll(left time.Duration, who identity.Who) *identityFixture {
	h.t.Helper()
	ctrl, err := identitytest.Start(identitytest.Options{Now: h.clock.Now})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(ctrl.Close)
	raw, err := ctrl.Enroll("monky-host."+env, h.clock.Now().Add(left))
	if err != nil {
		h.t.Fatal(err)
	}
	dir := filepath.Join(h.dir, "identities")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		h.t.Fatal(err)
	}
	p := filepath.Join(dir, "monky-host."+env+".json")
	if err := os.WriteFile(p, raw, 0o640); err != nil {
		h.t.Fatal(err)
	}
	h.id = &identityFixture{ctrl: ctrl, path: p, who: who}
	return h.id
}

// renewer is what the CLI builds for each tick: a new one, as every tick is a new process.
func (f *identityFixture) renewer(h *harness) *identity.Renewer {
	return &identity.Renewer{
		Path: f.path, Who: f.who, Controller: transport.Extender{Timeout: 10 * time.Second},
		Now: h.clock.Now, Log: slog.New(journal.New(h.logs, slog.LevelDebug)), Step: h.step,
	}
}

func (f *identityFixture) file(t testing.TB) *identity.File {
	t.Helper()
	raw, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	id, err := identity.Parse(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// lastNotAfter is the identity_not_after of env's last check-in.
func (h *harness) lastNotAfter() string {
	h.t.Helper()
	cs := h.ten.Checkins(env)
	if len(cs) == 0 {
		h.t.Fatal("no check-in")
	}
	return cs[len(cs)-1].Request.IdentityNotAfter
}

// checkinHook runs before before each check-in.
type checkinHook struct {
	tick.Tenancy
	before func()
}

func (c checkinHook) Checkin(ctx context.Context, tok secret.Value, req protocol.CheckinRequest) (*protocol.CheckinResponse, error) {
	c.before()
	return c.Tenancy.Checkin(ctx, tok, req)
}

// Every check-in carries the certificate's horizon, whoever renews it; the admin listing shows it.
func TestTheCheckinCarriesTheIdentityHorizon(t *testing.T) {
	h := newHarness(t)
	id := h.enroll(300*day, identity.Who{Transport: "sdk", Window: 30 * day})
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	want := id.file(t).Leaf().NotAfter.UTC().Format(time.RFC3339)
	if got := h.lastNotAfter(); got != want {
		t.Fatalf("identity_not_after = %q, want %q", got, want)
	}
	if a, _ := h.ten.AdminAgent(env); a.IdentityNotAfter == nil || *a.IdentityNotAfter != want {
		t.Errorf("the admin listing has %v", a.IdentityNotAfter)
	}
	if st := h.state(); st.Identity == nil || st.Identity.NotAfter == nil || st.Identity.NotAfter.Format(time.RFC3339) != want {
		t.Errorf("state.json identity = %+v", st.Identity)
	}
}

// With the system transport and the tunneller holding the identity, a certificate inside the
// window is never extended by the agent: the tunneller renews it. The horizon is still reported.
func TestSystemTransportNeverExtendsAndStillReports(t *testing.T) {
	h := newHarness(t)
	active := func(context.Context) (bool, error) { return true, nil }
	id := h.enroll(10*day, identity.Who{Transport: "system", Window: 30 * day, TunnellerActive: active})
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.expectExit(tick.ExitOK)
	if c := id.ctrl.Counts("monky-host." + env); c.Opened != 0 || c.Extends != 0 {
		t.Fatalf("the agent called the controller: %+v", c)
	}
	if got := h.lastNotAfter(); got != id.file(t).Leaf().NotAfter.UTC().Format(time.RFC3339) {
		t.Fatalf("identity_not_after = %q", got)
	}
}

// A renewal killed after any of its steps: the next tick authenticates with the identity on disk,
// converges, finishes the renewal, and its check-in after that carries the new horizon.
func TestARenewalKilledAtAnyStepIsFinishedByTheNextTick(t *testing.T) {
	for _, at := range identity.Steps {
		t.Run(at, func(t *testing.T) {
			h := newHarness(t)
			id := h.enroll(10*day, identity.Who{Transport: "sdk", Window: 30 * day})
			old := id.file(t)
			first := h.desire(bundleSpec{})
			reached := false
			h.step = func(name string) error {
				if name == at {
					reached = true
					return errCrash
				}
				return nil
			}
			if code := h.tick(); code == tick.ExitOK || !reached {
				t.Fatalf("the killed tick exited %d, step reached %v", code, reached)
			}
			h.step = nil
			assertNoTempFiles(t, h.cfg.StateDir)

			// What the sdk transport would load for the check-in must be what the controller accepts.
			var atCheckin []bool
			h.wrap = func(d *tick.Deps) {
				d.Tenancy = checkinHook{Tenancy: d.Tenancy, before: func() {
					atCheckin = append(atCheckin, id.ctrl.Accepts("monky-host."+env, id.file(t).CertPEM))
				}}
			}
			h.expectExit(tick.ExitOK)
			if len(atCheckin) != 1 || !atCheckin[0] {
				t.Fatalf("at the next tick's check-in the identity file authenticates: %v", atCheckin)
			}
			h.wrap = nil
			f := id.file(t)
			name := "monky-host." + env
			if !id.ctrl.Accepts(name, f.CertPEM) || f.Leaf().Fingerprint == old.Leaf().Fingerprint || id.ctrl.Accepts(name, old.CertPEM) {
				t.Fatalf("the next tick did not leave a renewed identity the controller accepts:\n%s", h.logs.String())
			}
			if _, err := os.Stat(id.path + identity.PendingSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("pending file left: %v", err)
			}
			if st := h.state(); st.AppliedSha != first || st.Identity == nil || st.Identity.Renewal != nil || st.Identity.RenewedAt == nil {
				t.Fatalf("state after the next tick: applied %.12s identity %+v", st.AppliedSha, st.Identity)
			}
			h.expectExit(tick.ExitOK)
			if got := h.lastNotAfter(); got != f.Leaf().NotAfter.UTC().Format(time.RFC3339) {
				t.Errorf("the check-in after the renewal carries %q, want the new %s", got, f.Leaf().NotAfter.Format(time.RFC3339))
			}
		})
	}
}
