package tick_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// applyWithBootstrapToken runs a first apply while tenancy refuses every lease: the apply goes
// on with the bootstrap token, swap deferred (PROTOCOL: 429 with a working token).
func applyWithBootstrapToken(t *testing.T, h *harness) {
	t.Helper()
	h.ten.SetLeaseLimit(0)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.expectLog("lease rate-limited; applying with the current token, swap deferred")
	if st := h.state(); st.Token == nil || st.Token.Source != "bootstrap" || h.ten.LeasesGranted(env) != 0 {
		t.Fatalf("after the first apply: token %+v, leases %d", st.Token, h.ten.LeasesGranted(env))
	}
	h.ten.SetLeaseLimit(5)
}

// The 0.1.6 lease-budget lesson with a bootstrap-era token: a deploy retried by the timer while
// OpenBao refuses logins must not lease on every tick. The one grant leased is kept and logged
// in with once OpenBao is back.
func TestRetriedDeployWithABootstrapTokenLeasesOnce(t *testing.T) {
	h := newHarness(t)
	applyWithBootstrapToken(t, h)

	const failing = 4
	h.bao.FailNext("auth/jwt-tenancy/login", http.StatusServiceUnavailable, failing)
	h.docker.PullFail = "Error response from daemon: manifest unknown\n"
	want := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	for i := range failing {
		h.endBackoff()
		h.expectExit(tick.ExitFailed) // the pull fails; the secrets were read with the bootstrap token
		if n := h.ten.LeasesGranted(env); n != 1 {
			t.Fatalf("tick %d of a retried deploy: %d leases granted, want 1", i+1, n)
		}
		if st := h.state(); st.Token.Source != "bootstrap" || st.PendingLease == nil {
			t.Fatalf("tick %d: token %+v, pending lease %+v", i+1, st.Token, st.PendingLease)
		}
		if mode(t, filepath.Join(h.cfg.StateDir, "lease.jwt")) != 0o600 {
			t.Fatal("the kept grant is not 0600")
		}
	}
	h.expectLog("lease login failed; the grant is kept for the next tick")
	h.expectLog("new token not obtained; applying with the current token, swap deferred")

	h.docker.PullFail = ""
	h.endBackoff()
	h.expectExit(tick.ExitOK)
	st := h.state()
	if st.AppliedSha != want || st.Token.Source != "lease" || st.PendingLease != nil || h.ten.LeasesGranted(env) != 1 {
		t.Errorf("after OpenBao came back: applied %.12s, token %+v, pending %+v, leases %d", st.AppliedSha, st.Token, st.PendingLease, h.ten.LeasesGranted(env))
	}
	if _, err := os.Stat(filepath.Join(h.cfg.StateDir, "lease.jwt")); !os.IsNotExist(err) {
		t.Errorf("the kept grant outlived its login: %v", err)
	}
	if h.bao.Revokes() != 1 {
		t.Errorf("revokes = %d, want 1 (the bootstrap token after the swap)", h.bao.Revokes())
	}
}

// Without a working token a kept grant still saves the budget: the ticks end with exit 75 and
// no new lease until the grant expires.
func TestKeptGrantWithoutAWorkingToken(t *testing.T) {
	h := newHarness(t)
	applyWithBootstrapToken(t, h)
	h.bao.FailNext("auth/jwt-tenancy/login", http.StatusServiceUnavailable, 3)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	// OpenBao refuses the token (403 on lookup): a lease is due; its login fails, and so does
	// the kept grant's, twice.
	h.bao.FailNext("auth/token/lookup-self", http.StatusForbidden, 3)
	for range 3 {
		h.expectExit(tick.ExitTemporary)
	}
	if n := h.ten.LeasesGranted(env); n != 1 {
		t.Errorf("%d leases for three ticks of a failing login, want 1", n)
	}
	// The grant expires: the next tick leases again, once, and the expired grant is gone.
	h.clock.Advance(2 * time.Hour)
	h.expectExit(tick.ExitOK)
	if n := h.ten.LeasesGranted(env); n != 2 {
		t.Errorf("%d leases after the kept grant expired, want 2", n)
	}
	if leaseGrantExists(t, h) || h.state().PendingLease != nil {
		t.Error("the expired grant is still kept")
	}
	if strings.Contains(h.logs.String(), "kept lease grant refused") {
		t.Error("the expired grant was logged in with")
	}
}

// A temporary failure after the token was settled (a KV read) does not make the next tick
// lease again: the lease token is still valid and is reused.
func TestTemporaryReadFailureDoesNotReLease(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.bao.FailNext("monky/data/env-qa-02/see/db_password", http.StatusServiceUnavailable, 1)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitTemporary)
	h.expectExit(tick.ExitOK)
	if n := h.ten.LeasesGranted(env); n != 1 {
		t.Errorf("leases = %d, want 1", n)
	}
}

// The lease's addr (or, from an older tenancy, its nested vault.addr) is where its grant logs in
// and where the token it gives reads: here an OpenBao only the lease names.
func TestLeaseAddrIsWhereTheTokenLivesAndReads(t *testing.T) {
	for _, shape := range []tenancytest.LeaseShape{tenancytest.LeaseNormal, tenancytest.LeaseLegacyVault} {
		t.Run(map[tenancytest.LeaseShape]string{tenancytest.LeaseNormal: "addr", tenancytest.LeaseLegacyVault: "vault.addr"}[shape], func(t *testing.T) {
			h := newHarnessOpts(t, harnessOptions{secondBao: &baotest.Options{}})
			// The check-in keeps naming the config's OpenBao; only the lease names the second.
			h.ten.SetVault(env, protocol.Vault{Addr: h.bao.URL, Mount: "monky", Prefix: env + "/see", AuthMount: "jwt-tenancy", AuthRole: "see-env"})
			h.ten.SetLeaseShape(env, shape)
			h.bao2.Put(env, "gemini_api_key", "value", "from-the-lease-bao")
			h.bao2.Put(env, "db_password", "value", dbPassword)
			h.bao2.Put(env, "registry", "value", "robot:"+registryPwd)
			sha := h.desire(bundleSpec{})
			h.expectExit(tick.ExitOK)
			if h.bao.Logins() != 1 || h.bao2.Logins() != 1 || h.bao.Reads() != 0 || h.bao2.Reads() != 3 {
				t.Errorf("config OpenBao: %d logins %d reads; lease OpenBao: %d logins %d reads; want 1/0 and 1/3",
					h.bao.Logins(), h.bao.Reads(), h.bao2.Logins(), h.bao2.Reads())
			}
			envText, _ := os.ReadFile(filepath.Join(h.cfg.EnvDir(), "releases", sha, ".env"))
			if !strings.Contains(string(envText), "from-the-lease-bao") {
				t.Errorf(".env lacks the value of the lease's OpenBao:\n%s", envText)
			}
			if h.bao.Revokes() != 1 {
				t.Errorf("bootstrap token revoked %d times at the OpenBao that minted it, want 1", h.bao.Revokes())
			}
			// The next apply looks the token up where it lives and reuses it.
			h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
			h.expectExit(tick.ExitOK)
			if n := h.ten.LeasesGranted(env); n != 1 || h.bao2.Reads() != 6 {
				t.Errorf("second apply: leases %d, reads at the lease's OpenBao %d; want 1 and 6", n, h.bao2.Reads())
			}
		})
	}
}

// A 401 after the check-in adopted tenancy's OpenBao coordinates re-bootstraps there, with the
// adopted auth mount and role, not with the config's.
func TestReBootstrapUsesTheAdoptedOpenBao(t *testing.T) {
	h := newHarnessOpts(t, harnessOptions{secondBao: &baotest.Options{AuthMount: "jwt-alt", Role: "see-env-alt"}})
	h.bao2.Put(env, "gemini_api_key", "value", geminiKey)
	h.bao2.Put(env, "db_password", "value", dbPassword)
	h.bao2.Put(env, "registry", "value", "robot:"+registryPwd)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK) // bootstrap at the config's OpenBao, the lease at tenancy's
	h.bao.Close()             // from now on only tenancy's OpenBao answers

	// The token's grant is superseded; a fresh grant was staged (no re-reveal: the check-in
	// still passes, the bundle fetch is the first call refused).
	jwt, _, err := h.signer.Sign(env, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.cfg.BootstrapFile, []byte(jwt+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.ten.FailNext(tenancytest.Bundle, http.StatusUnauthorized, protocol.CodeUnauthenticated, 1)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	h.expectLog("AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside")
	if h.bao2.Logins() != 3 { // lease, re-bootstrap, lease (the swap of the new bootstrap token)
		t.Errorf("logins at the adopted OpenBao = %d, want 3", h.bao2.Logins())
	}
}

// keepAGrant leaves a lease grant kept by a failing deploy: the lease login fails once for a
// temporary reason, the apply goes on with the bootstrap token and fails at the pull.
func keepAGrant(t *testing.T, h *harness) {
	t.Helper()
	applyWithBootstrapToken(t, h)
	h.bao.FailNext("auth/jwt-tenancy/login", http.StatusServiceUnavailable, 1)
	h.docker.PullFail = "Error response from daemon: manifest unknown\n"
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitFailed)
	if st := h.state(); st.PendingLease == nil || h.ten.LeasesGranted(env) != 1 {
		t.Fatalf("no kept grant: pending %+v, leases %d", st.PendingLease, h.ten.LeasesGranted(env))
	}
	h.docker.PullFail = ""
	h.endBackoff()
}

func leaseGrantExists(t *testing.T, h *harness) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(h.cfg.StateDir, "lease.jwt"))
	return err == nil
}

// A kit re-reveal supersedes every grant tenancy signed for the env, the kept lease grant
// included; OpenBao's jwt mount keeps no replay state and would still log in with it. The
// re-bootstrapped box must lease anew, or its fresh bootstrap token is revoked for a token
// tenancy refuses, and the box is locked out until another kit.
func TestKeptGrantDiesWithItsTokenGeneration(t *testing.T) {
	h := newHarness(t)
	keepAGrant(t, h)
	h.writeBootstrap() // the re-reveal: the token and the kept grant are superseded
	h.expectExit(tick.ExitOK)
	h.expectLog("AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside")
	if n := h.ten.LeasesGranted(env); n != 2 {
		t.Errorf("leases = %d, want 2 (the superseded grant must not be used)", n)
	}
	if leaseGrantExists(t, h) || h.state().PendingLease != nil {
		t.Error("the superseded grant is still kept")
	}
	h.expectExit(tick.ExitOK) // the heartbeat's bearer is accepted
	if r := h.lastReport(); r.Result != "healthy" {
		t.Errorf("heartbeat after the re-reveal = %+v", r)
	}
}

// The token dropped on a 401 takes its kept grant with it at once, whether or not a new kit
// was run yet.
func TestKeptGrantIsDeletedWithTheDroppedToken(t *testing.T) {
	h := newHarness(t)
	keepAGrant(t, h)
	h.ten.Supersede(env) // a re-reveal whose kit has not been run
	h.expectExit(tick.ExitFailed)
	h.expectLog("re-run the install kit")
	if leaseGrantExists(t, h) || h.state().PendingLease != nil {
		t.Error("the grant of the dropped token is still kept")
	}
}

// A kept grant is used only under the token that leased it (bearer_accessor).
func TestKeptGrantOfAnotherTokenIsNotUsed(t *testing.T) {
	h := newHarness(t)
	keepAGrant(t, h)
	st := h.state()
	st.PendingLease.BearerAccessor = "accessor-of-a-dropped-token"
	saveState(t, h, st)
	logins := h.bao.Logins()
	h.expectExit(tick.ExitOK)
	if n := h.ten.LeasesGranted(env); n != 2 || h.bao.Logins() != logins+1 {
		t.Errorf("leases %d, logins %d; want 2 leases and one login (not the foreign grant's)", n, h.bao.Logins()-logins)
	}
	if leaseGrantExists(t, h) {
		t.Error("the foreign grant was not deleted")
	}
}

// A kept grant OpenBao refuses for good is dropped, and one new lease is taken in the same tick.
func TestKeptGrantRefusedLeasesOnceMore(t *testing.T) {
	h := newHarness(t)
	keepAGrant(t, h)
	h.bao.FailNext("auth/jwt-tenancy/login", http.StatusBadRequest, 1)
	h.expectExit(tick.ExitOK)
	h.expectLog("kept lease grant refused by OpenBao; leasing again")
	st := h.state()
	if n := h.ten.LeasesGranted(env); n != 2 || st.Token.Source != "lease" || st.PendingLease != nil || st.LeaseBackoff != nil {
		t.Errorf("leases %d, token %+v, pending %+v, back-off %+v", n, st.Token, st.PendingLease, st.LeaseBackoff)
	}
}

// A lease whose login OpenBao refuses for good (400 here; a 403, a TLS failure or an unrouted
// address alike) must not be retried by leasing on every tick: 3 ticks were 3 leases of the 5
// an hour. New leases wait an hour; meanwhile a working token applies.
func TestRefusedLeaseLoginBacksOff(t *testing.T) {
	t.Run("with a working token", func(t *testing.T) {
		h := newHarness(t)
		applyWithBootstrapToken(t, h)
		h.bao.FailNext("auth/jwt-tenancy/login", http.StatusBadRequest, 1)
		h.docker.PullFail = "Error response from daemon: manifest unknown\n"
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		for i := range 3 {
			h.endBackoff()
			h.expectExit(tick.ExitFailed) // the pull; the secrets were read with the bootstrap token
			if n := h.ten.LeasesGranted(env); n != 1 {
				t.Fatalf("tick %d: %d leases, want 1", i+1, n)
			}
		}
		h.expectLog("lease login refused by OpenBao; no new lease until the back-off ends")
		h.expectLog("no new lease while OpenBao refuses lease logins; applying with the current token, swap deferred")
		if st := h.state(); st.LeaseBackoff == nil || st.PendingLease != nil || leaseGrantExists(t, h) {
			t.Fatalf("back-off %+v, pending %+v", st.LeaseBackoff, st.PendingLease)
		}
		h.docker.PullFail = ""
		h.clock.Advance(leaseBackoffForTest)
		h.expectExit(tick.ExitOK)
		if st := h.state(); h.ten.LeasesGranted(env) != 2 || st.Token.Source != "lease" || st.LeaseBackoff != nil {
			t.Errorf("after the back-off: leases %d, token %+v, back-off %+v", h.ten.LeasesGranted(env), st.Token, st.LeaseBackoff)
		}
	})
	t.Run("without a working token", func(t *testing.T) {
		h := newHarness(t)
		applyWithBootstrapToken(t, h)
		h.bao.FailNext("auth/token/lookup-self", http.StatusForbidden, 3)
		h.bao.FailNext("auth/jwt-tenancy/login", http.StatusBadRequest, 1)
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		h.expectExit(tick.ExitFailed)
		h.endBackoff()
		err := h.tickErr()
		if tick.ExitCode(err) != tick.ExitFailed || !strings.Contains(err.Error(), "no new lease until") {
			t.Errorf("second tick: %v", err)
		}
		if n := h.ten.LeasesGranted(env); n != 1 {
			t.Errorf("%d leases for two ticks of a refused login, want 1", n)
		}
		if r := h.lastReport(); r.Result != "failed" || !strings.Contains(r.Detail, "no new lease until") {
			t.Errorf("report = %+v", r)
		}
	})
}

const leaseBackoffForTest = time.Hour

// A lease_backoff.until further ahead than the longest back-off (written while the clock ran
// ahead, or by hand) is lapsed, with a warning: held, it stopped every lease for years, and the
// token expired into "re-run the install kit".
func TestLeaseBackoffFarAheadIsLapsed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ahead time.Duration
		holds bool
	}{
		{"five years ahead", 5 * 365 * 24 * time.Hour, false},
		{"a minute past the longest", leaseBackoffForTest + time.Minute, false},
		{"the longest", leaseBackoffForTest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			applyWithBootstrapToken(t, h)
			// state.json as a hand edit or a clock that ran ahead left it
			raw, err := os.ReadFile(h.cfg.StatePath())
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			until := h.clock.Now().Add(tc.ahead).UTC().Format(time.RFC3339)
			doc["lease_backoff"] = map[string]any{"until": until, "reason": "bao: login: HTTP 400: role not found"}
			raw, _ = json.Marshal(doc)
			if err := os.WriteFile(h.cfg.StatePath(), raw, 0o600); err != nil {
				t.Fatal(err)
			}
			h.bao.FailNext("auth/token/lookup-self", http.StatusForbidden, 3) // no working token: only a lease applies
			h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
			err = h.tickErr()
			st := h.state()
			if tc.holds {
				if tick.ExitCode(err) != tick.ExitFailed || !strings.Contains(err.Error(), "no new lease until "+until) || h.ten.LeasesGranted(env) != 0 {
					t.Fatalf("tick = %v, leases %d: a back-off within the longest must hold", err, h.ten.LeasesGranted(env))
				}
				if strings.Contains(h.logs.String(), "treated as lapsed") {
					t.Error("a back-off within the longest was called lapsed")
				}
				return
			}
			if err != nil || h.ten.LeasesGranted(env) != 1 || st.Token.Source != "lease" || st.LeaseBackoff != nil {
				t.Fatalf("tick = %v, leases %d, token %+v, back-off %+v: want one lease and the back-off gone", err, h.ten.LeasesGranted(env), st.Token, st.LeaseBackoff)
			}
			h.expectLog("WARN lease back-off ends further ahead than any back-off the agent starts (a clock that ran ahead, or an edited state.json); treated as lapsed")
			h.expectLog("until=" + until)
		})
	}
}

// A token whose OpenBao address died (the check-in now names another) is looked up at the
// tick's OpenBao: valid there, it is recorded as living there and reused; refused there, one
// lease replaces it. Before, every apply ended at the dead address with exit 75 until the
// token's TTL ran out.
func TestTokenOfADeadOpenBaoAddress(t *testing.T) {
	t.Run("valid at the new address", func(t *testing.T) {
		h := newHarness(t)
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK) // the lease token lives at the config's address
		// The same OpenBao, now under another address; the old one stops answering.
		other := httptest.NewServer(h.bao)
		t.Cleanup(other.Close)
		h.ten.SetVault(env, protocol.Vault{Addr: other.URL, Mount: "monky", Prefix: env + "/see", AuthMount: "jwt-tenancy", AuthRole: "see-env"})
		h.bao.Close()
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		h.expectExit(tick.ExitOK)
		h.expectLog("the OpenBao that minted the token does not answer; using the tick's OpenBao")
		if st := h.state(); st.Token.Addr != other.URL || h.ten.LeasesGranted(env) != 1 {
			t.Errorf("token addr %q, leases %d; want %q and 1", st.Token.Addr, h.ten.LeasesGranted(env), other.URL)
		}
	})
	t.Run("unknown at the new address", func(t *testing.T) {
		h := newHarnessOpts(t, harnessOptions{secondBao: &baotest.Options{}})
		h.bao2.Put(env, "gemini_api_key", "value", geminiKey)
		h.bao2.Put(env, "db_password", "value", dbPassword)
		h.bao2.Put(env, "registry", "value", "robot:"+registryPwd)
		applyWithBootstrapToken(t, h) // the bootstrap token lives at the config's OpenBao
		h.bao.Close()
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		h.expectExit(tick.ExitOK)
		if st := h.state(); st.Token.Source != "lease" || st.Token.Addr != h.bao2.URL || h.ten.LeasesGranted(env) != 1 {
			t.Errorf("token %+v, leases %d; want one lease at %s", st.Token, h.ten.LeasesGranted(env), h.bao2.URL)
		}
		h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
		h.expectExit(tick.ExitOK)
		if n := h.ten.LeasesGranted(env); n != 1 {
			t.Errorf("leases = %d after another apply, want 1", n)
		}
	})
}

// A lease token of 1 h under the default renew_below_s of 3600 is renewed below half its TTL:
// compared with 3600 itself, every apply leased again, even right after a renewal.
func TestShortLivedLeaseTokenIsReusedAndRenewed(t *testing.T) {
	h := newHarnessOpts(t, harnessOptions{secondBao: &baotest.Options{TokenTTL: time.Hour}})
	h.bao2.Put(env, "gemini_api_key", "value", geminiKey)
	h.bao2.Put(env, "db_password", "value", dbPassword)
	h.bao2.Put(env, "registry", "value", "robot:"+registryPwd)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.expectLog("lease token TTL is not above bao.renew_below_s")
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK) // 1 h left: reused
	h.clock.Advance(40 * time.Minute)
	h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
	h.expectExit(tick.ExitOK) // 20 min left: renewed to 1 h, kept
	h.desire(bundleSpec{template: defaultTemplate + "V=4\n"})
	h.expectExit(tick.ExitOK) // reused again
	if n, r := h.ten.LeasesGranted(env), h.bao2.Renews(); n != 1 || r != 1 {
		t.Errorf("leases %d renews %d, want 1 and 1", n, r)
	}
}

// A token that lives longer than renew_below_s is renewed at renew_below_s, as configured: half
// its TTL is the threshold only for tokens that live no longer than renew_below_s.
func TestRenewBelowIsHonouredForTokensThatOutliveIt(t *testing.T) {
	h := newHarnessOpts(t, harnessOptions{secondBao: &baotest.Options{TokenTTL: 90 * time.Minute}})
	h.bao2.Put(env, "gemini_api_key", "value", geminiKey)
	h.bao2.Put(env, "db_password", "value", dbPassword)
	h.bao2.Put(env, "registry", "value", "robot:"+registryPwd)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.clock.Advance(40 * time.Minute) // 50 min left: under renew_below_s (60 min), over half the TTL (45)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	if n, r := h.ten.LeasesGranted(env), h.bao2.Renews(); n != 1 || r != 1 {
		t.Errorf("leases %d renews %d, want 1 and 1", n, r)
	}
	if strings.Contains(h.logs.String(), "not above bao.renew_below_s") {
		t.Error("warned about a token that outlives renew_below_s")
	}
}

// A 401 on the lease drops the token looked up before; when the re-bootstrap in the same tick
// brings a fresh one and the retried lease is rate-limited, the apply goes on with the fresh
// token (it works: it just passed tenancy), even though the dropped one had been refused.
func TestFreshBootstrapTokenWorksAfterAnUnauthenticatedLease(t *testing.T) {
	h := newHarness(t)
	applyWithBootstrapToken(t, h)
	jwt, _, err := h.signer.Sign(env, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.cfg.BootstrapFile, []byte(jwt+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.bao.FailNext("auth/token/lookup-self", http.StatusForbidden, 1)
	h.ten.FailNext(tenancytest.Lease, http.StatusUnauthorized, protocol.CodeUnauthenticated, 1)
	h.ten.SetLeaseLimit(0)
	sha := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	h.expectLog("lease rate-limited; applying with the current token, swap deferred")
	if st := h.state(); st.AppliedSha != sha || st.Token.Source != "bootstrap" {
		t.Errorf("applied %.12s token %+v", st.AppliedSha, st.Token)
	}
}

// A kept grant that expired is deleted by the next tick, a heartbeat included (it used to stay
// on disk for good), and so is a lease.jwt no state names (a tick killed between writing it and
// recording it).
func TestLeaseGrantFilesAreTidiedAtTickStart(t *testing.T) {
	t.Run("expired", func(t *testing.T) {
		h := newHarness(t)
		keepAGrant(t, h)
		h.desire(bundleSpec{}) // the running release again: converged, heartbeats only
		h.expectExit(tick.ExitOK)
		if !leaseGrantExists(t, h) {
			t.Fatal("a heartbeat dropped a grant that still lasts")
		}
		h.clock.Advance(2 * time.Hour)
		h.expectExit(tick.ExitOK)
		if leaseGrantExists(t, h) || h.state().PendingLease != nil {
			t.Error("the expired grant outlived a heartbeat")
		}
	})
	t.Run("orphaned", func(t *testing.T) {
		h := newHarness(t)
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK)
		if err := os.WriteFile(filepath.Join(h.cfg.StateDir, "lease.jwt"), []byte("eyJorphan\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		h.expectExit(tick.ExitOK)
		if leaseGrantExists(t, h) {
			t.Error("an orphaned lease.jwt outlived a heartbeat")
		}
	})
}
