package agent_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/tenancy/tenancytest"
)

// applyWithBootstrapToken runs a first apply while tenancy refuses every lease: the apply goes
// on with the bootstrap token, swap deferred (PROTOCOL: 429 with a working token).
func applyWithBootstrapToken(t *testing.T, h *harness) {
	t.Helper()
	h.ten.SetLeaseLimit(0)
	h.desire(bundleSpec{})
	h.expectExit(agent.ExitOK)
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
		h.expectExit(agent.ExitFailed) // the pull fails; the secrets were read with the bootstrap token
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
	h.expectExit(agent.ExitOK)
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
		h.expectExit(agent.ExitTemporary)
	}
	if n := h.ten.LeasesGranted(env); n != 1 {
		t.Errorf("%d leases for three ticks of a failing login, want 1", n)
	}
	// The grant expires: the next tick leases again, once.
	h.clock.Advance(2 * time.Hour)
	h.expectExit(agent.ExitOK)
	if n := h.ten.LeasesGranted(env); n != 2 {
		t.Errorf("%d leases after the kept grant expired, want 2", n)
	}
}

// A bootstrap token is looked up before the swap: an OpenBao that cannot be reached costs no
// lease (the login with it would fail the same way).
func TestBootstrapTokenLookupFailureSpendsNoLease(t *testing.T) {
	h := newHarness(t)
	applyWithBootstrapToken(t, h)
	h.bao.FailNext("auth/token/lookup-self", http.StatusServiceUnavailable, 1)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(agent.ExitTemporary)
	if n := h.ten.LeasesGranted(env); n != 0 {
		t.Errorf("leases = %d while OpenBao was down, want 0", n)
	}
	h.expectExit(agent.ExitOK)
	if n := h.ten.LeasesGranted(env); n != 1 || h.state().Token.Source != "lease" {
		t.Errorf("after recovery: leases %d, token %+v; want the one swap", n, h.state().Token)
	}
}

// A temporary failure after the token was settled (a KV read) does not make the next tick
// lease again: the lease token is still valid and is reused.
func TestTemporaryReadFailureDoesNotReLease(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(agent.ExitOK)
	h.bao.FailNext("monky/data/env-qa-02/see/db_password", http.StatusServiceUnavailable, 1)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(agent.ExitTemporary)
	h.expectExit(agent.ExitOK)
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
			h.expectExit(agent.ExitOK)
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
			h.expectExit(agent.ExitOK)
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
	h.expectExit(agent.ExitOK) // bootstrap at the config's OpenBao, the lease at tenancy's
	h.bao.Close()              // from now on only tenancy's OpenBao answers

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
	h.expectExit(agent.ExitOK)
	h.expectLog("AGENT_UNAUTHENTICATED: bearer refused; token dropped")
	if h.bao2.Logins() != 3 { // lease, re-bootstrap, lease (the swap of the new bootstrap token)
		t.Errorf("logins at the adopted OpenBao = %d, want 3", h.bao2.Logins())
	}
}
