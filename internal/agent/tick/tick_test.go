package tick_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestFirstApply(t *testing.T) {
	h := newHarness(t)
	sha := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)

	// Bootstrap: logged in with the kit's grant, which is then gone from disk.
	if _, err := os.Stat(h.cfg.BootstrapFile); !os.IsNotExist(err) {
		t.Errorf("bootstrap grant still on disk after login: %v", err)
	}
	if got := mode(t, h.cfg.TokenPath()); got != 0o600 {
		t.Errorf("bao.token mode %o, want 600", got)
	}
	// The bootstrap token was swapped for a lease once, and the old one revoked.
	if n := h.ten.LeasesGranted(env); n != 1 {
		t.Errorf("leases granted = %d, want 1", n)
	}
	if h.bao.Revokes() != 1 {
		t.Errorf("revokes = %d, want 1 (the bootstrap token after the swap)", h.bao.Revokes())
	}
	st := h.state()
	if st.AppliedSha != sha || st.Token == nil || st.Token.Source != "lease" || st.LastResult != "applied" {
		t.Errorf("state = applied %q token %+v result %q", st.AppliedSha, st.Token, st.LastResult)
	}
	if got := mode(t, h.cfg.StatePath()); got != 0o600 {
		t.Errorf("state.json mode %o, want 600", got)
	}

	// Release staged and promoted; .env rendered 0600 with the values, no registry password.
	cur, err := os.Readlink(filepath.Join(h.cfg.EnvDir(), "current"))
	if err != nil || cur != filepath.Join("releases", sha) {
		t.Fatalf("current → %q (%v), want releases/%s", cur, err, sha)
	}
	envPath := filepath.Join(h.cfg.EnvDir(), "releases", sha, ".env")
	if got := mode(t, envPath); got != 0o600 {
		t.Errorf(".env mode %o, want 600", got)
	}
	envText, _ := os.ReadFile(envPath)
	if !strings.Contains(string(envText), "DB_PASSWORD="+dbPassword) {
		t.Errorf(".env lacks DB_PASSWORD:\n%s", envText)
	}
	if !strings.Contains(string(envText), "# rendered by tenancy: substitutes every ${VAR} below") {
		t.Errorf(".env lost the comment line:\n%s", envText)
	}
	if strings.Contains(string(envText), registryPwd) {
		t.Error("the registry password is in .env")
	}

	// Registry credential: the agent's own DOCKER_CONFIG, 0600 in a 0700 dir.
	cfgPath := filepath.Join(h.cfg.DockerConfigDir(), "config.json")
	if mode(t, h.cfg.DockerConfigDir()) != 0o700 || mode(t, cfgPath) != 0o600 {
		t.Errorf("docker config modes dir %o file %o", mode(t, h.cfg.DockerConfigDir()), mode(t, cfgPath))
	}
	var dc struct {
		Auths map[string]struct{ Auth string } `json:"auths"`
	}
	raw, _ := os.ReadFile(cfgPath)
	if err := json.Unmarshal(raw, &dc); err != nil {
		t.Fatal(err)
	}
	dec, _ := base64.StdEncoding.DecodeString(dc.Auths["harbor.tikali.net"].Auth)
	if string(dec) != "robot$pull:"+registryPwd {
		t.Errorf("docker config auth for harbor.tikali.net is wrong")
	}
	for _, c := range h.docker.Calls() {
		if !slices.Contains(c.Env, "DOCKER_CONFIG="+h.cfg.DockerConfigDir()) {
			t.Errorf("%s ran without the agent's DOCKER_CONFIG", c)
		}
		for _, kv := range c.Env {
			if strings.Contains(kv, registryPwd) || strings.Contains(kv, dbPassword) {
				t.Errorf("%s carries a secret in its environment", c)
			}
		}
	}
	want := []string{"info --format {{json .}}", "compose --profile * config --format json", "compose pull", "compose up -d --remove-orphans", "compose ps -a --format json"}
	if got := h.docker.Subcommands(); !slices.Equal(got[:5], want) {
		t.Errorf("docker calls = %q, want them to start %q", got, want)
	}
	if running := h.docker.Running(); !slices.Equal(running, []string{"api", "worker"}) {
		t.Errorf("running = %v", running)
	}

	r := h.lastReport()
	if r.Result != "applied" || r.Sha != sha || len(r.Containers) != 2 || r.AgentVersion == "" {
		t.Errorf("report = %+v", r)
	}
	h.expectLog("checkin: action=apply desired=" + sha[:12] + " applied=-")
	h.expectLog("read 3 secret(s): DB_PASSWORD, GEMINI_API_KEY (+ registry credential)")
	h.expectLog("promoted release " + sha[:12])
	h.expectLog("applied " + sha[:12])
}

// With drift correction off (issue 22: on by default, drift_test.go), a converged tick only looks.
func TestConvergedTickReportsHealth(t *testing.T) {
	h := newHarness(t, "drift_correction: false")
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	leases, reads := h.ten.LeasesGranted(env), h.bao.Reads()

	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "healthy" || len(r.Containers) != 2 {
		t.Errorf("heartbeat = %+v", r)
	}
	h.expectLog("checkin: action=none")
	h.expectLog("healthy; heartbeat reported")
	if h.ten.LeasesGranted(env) != leases || h.bao.Reads() != reads {
		t.Error("a converged tick leased or read secrets")
	}

	h.docker.Stop("worker")
	h.expectExit(tick.ExitOK)
	r := h.lastReport()
	if r.Result != "unhealthy" || !strings.Contains(r.Detail, "worker: exited") {
		t.Errorf("heartbeat after a stop = %+v", r)
	}
	if h.docker.Count("compose up") != 1 {
		t.Error("a heartbeat restarted containers")
	}
}

func TestSecondApplyReusesTheLeaseToken(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	// A new bundle: the valid lease token is reused, not re-leased (5 leases an hour).
	h.desire(bundleSpec{manifest: `{"entries": [{"var": "GEMINI_API_KEY", "path": "gemini_api_key", "version": 1}, {"var": "DB_PASSWORD", "path": "db_password"}]}`})
	h.expectExit(tick.ExitOK)
	if n := h.ten.LeasesGranted(env); n != 1 || h.bao.Renews() != 0 {
		t.Errorf("leases = %d renews = %d, want 1 and 0 (a valid token is reused as it is)", n, h.bao.Renews())
	}
	if st := h.state(); st.Token.Source != "lease" || st.AppliedSha != h.lastReport().Sha {
		t.Errorf("state after second apply: %+v", st)
	}
}

func TestLeaseTokenBelowRenewThreshold(t *testing.T) {
	for _, tc := range []struct {
		name       string
		renewable  bool
		wantLeases int
		wantRenews int
	}{
		{"renewed when renewable", true, 1, 1},
		{"re-leased when not renewable", false, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.desire(bundleSpec{})
			h.expectExit(tick.ExitOK)
			tok, _ := os.ReadFile(h.cfg.TokenPath())
			token := strings.TrimSpace(string(tok))
			h.bao.SetTTL(token, 10*time.Minute) // under renew_below_s (3600)
			h.bao.SetRenewable(token, tc.renewable)
			h.desire(bundleSpec{template: defaultTemplate + "EXTRA=1\n"})
			h.expectExit(tick.ExitOK)
			if h.ten.LeasesGranted(env) != tc.wantLeases || h.bao.Renews() != tc.wantRenews {
				t.Errorf("leases %d renews %d, want %d %d", h.ten.LeasesGranted(env), h.bao.Renews(), tc.wantLeases, tc.wantRenews)
			}
		})
	}
}

func TestRateLimitedLease(t *testing.T) {
	t.Run("with a working token the apply goes on and the swap is deferred", func(t *testing.T) {
		h := newHarness(t)
		h.ten.SetLeaseLimit(0)
		sha := h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK)
		st := h.state()
		if st.AppliedSha != sha || st.Token.Source != "bootstrap" || h.lastReport().Result != "applied" {
			t.Errorf("state %+v report %+v", st, h.lastReport())
		}
		h.expectLog("lease rate-limited; applying with the current token, swap deferred")
	})
	t.Run("without a working token the tick is temporary", func(t *testing.T) {
		h := newHarness(t)
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK)
		h.ten.SetLeaseLimit(0)
		// OpenBao no longer vouches for the lease token (lookup-self refused), and tenancy will
		// not lease: nothing to read secrets with.
		h.bao.FailNext("auth/token/lookup-self", http.StatusForbidden, 1)
		h.desire(bundleSpec{template: defaultTemplate + "EXTRA=1\n"})
		h.expectExit(tick.ExitTemporary)
		if h.docker.Count("compose up") != 1 {
			t.Error("compose ran without secrets")
		}
	})
}

func TestRollbackRefusedUnlessAllowed(t *testing.T) {
	h := newHarness(t)
	first := makeFiles(bundleSpec{})
	h.ten.SetDesired(env, first)
	h.expectExit(tick.ExitOK)
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	ups := h.docker.Count("compose up")

	h.ten.SetDesired(env, first)
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != "refused" || !strings.HasPrefix(r.Detail, "ROLLBACK_REFUSED: ") {
		t.Errorf("report = %+v", r)
	}
	if h.ten.LeasesGranted(env) != 1 || h.docker.Count("compose up") != ups {
		t.Error("a refused bundle leased or started something")
	}
	h.expectLog("refused: ROLLBACK_REFUSED: ")

	h.desire(bundleSpec{agent: map[string]any{"allow_rollback": true}})
	// The allowed variant differs from `first` by its bundle.json, so it is a new sha; roll back
	// to the very first sha by allowing it in place.
	allowed := makeFiles(bundleSpec{agent: map[string]any{"allow_rollback": true}})
	h.ten.SetDesired(env, allowed)
	h.expectExit(tick.ExitOK)
	h.ten.SetDesired(env, first)
	h.expectExit(tick.ExitFailed) // still refused: the first bundle does not allow it
	h.ten.SetDesired(env, allowed)
	h.expectExit(tick.ExitOK) // the allowed one was applied before but it allows rollback
}

func TestDiskRefusal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		need    int64
		root    int64
		ctrd    int64
		refused bool
		detail  []string
	}{
		{"declared size over the tightest filesystem", 4 << 30, 500 << 30, 5 << 30, true, []string{"bundle needs 8192 MiB (4096 MiB × 1.5 + 2048 MiB headroom)", "containerd"}},
		{"no declared size still needs the headroom floor", 0, 500 << 30, 32 << 20, true, []string{"declares no size", "has 32 MiB free"}},
		{"no declared size with room applies", 0, 500 << 30, 500 << 30, false, nil},
		{"declared size with room applies", 1 << 30, 500 << 30, 400 << 30, false, nil},
		// need × factor does not fit an int64: it must not wrap to a negative requirement that passes
		{"declared size too big to compute", math.MaxInt64, 500 << 30, 500 << 30, true, []string{"has 512000 MiB free"}},
		{"declared size just under the wrap", math.MaxInt64 / 3 * 2, 500 << 30, 500 << 30, true, []string{"has 512000 MiB free"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.free[h.docker.RootDir] = tc.root
			os.MkdirAll(h.docker.RootDir, 0o755)
			h.free[h.cfg.ContainerdRoot] = tc.ctrd
			agentProfile := map[string]any{}
			if tc.need > 0 {
				agentProfile["disk_need_bytes"] = tc.need
			}
			h.desire(bundleSpec{agent: agentProfile})
			if !tc.refused {
				h.expectExit(tick.ExitOK)
				return
			}
			h.expectExit(tick.ExitFailed)
			r := h.lastReport()
			if r.Result != "refused" || !strings.HasPrefix(r.Detail, "DISK_INSUFFICIENT: image storage (") {
				t.Fatalf("report = %+v", r)
			}
			for _, want := range append(tc.detail, h.docker.RootDir) {
				if !strings.Contains(r.Detail, want) {
					t.Errorf("detail %q lacks %q", r.Detail, want)
				}
			}
			if h.ten.LeasesGranted(env) != 0 || h.docker.Count("compose pull") != 0 {
				t.Error("a disk refusal leased or pulled")
			}
		})
	}
}

func TestRefusalsComeBeforeAnyLease(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spec   bundleSpec
		prefix string
		want   []string
	}{
		{"unresolved variable", bundleSpec{template: "# ${IN_A_COMMENT} is not a reference\n  # nor ${THIS}\nA=${MISSING_ONE}\nB=${MISSING_TWO}\nGEMINI_API_KEY=${GEMINI_API_KEY}\n"},
			"ENV_INCOMPLETE: ", []string{"MISSING_ONE", "MISSING_TWO"}},
		{"privileged lists every finding", bundleSpec{compose: `services:
  api:
    image: x/api:1
    privileged: true
    network_mode: host
  agent:
    image: x/agent:1
    volumes: ["/var/run/docker.sock:/var/run/docker.sock"]
    cap_add: [SYS_ADMIN]
`}, "PRIVILEGED_REFUSED: ", []string{"api: privileged", "api: network_mode", "agent: cap_add", "agent: volumes[0]: bind source outside the release directory (/var/run/docker.sock)"}},
		{"build is never allowed", bundleSpec{compose: "services:\n  api:\n    build: .\n", agent: map[string]any{"allow_privileged": true}}, "BUNDLE_INVALID: ", []string{"api"}},
		{"manifest path escaping the prefix", bundleSpec{manifest: `{"entries": [{"var": "X", "path": "../env-prod-01/see/key"}]}`, template: "X=${X}\n"}, "MANIFEST_PATH: ", []string{"../env-prod-01/see/key"}},
		{"bundle path escaping the release", bundleSpec{extra: map[string]string{"../evil": "x"}}, "BUNDLE_INVALID: ", []string{"../evil"}},
		{"no bundle.json", bundleSpec{noMeta: true}, "BUNDLE_INVALID: ", []string{"bundle.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.desire(tc.spec)
			h.expectExit(tick.ExitFailed)
			r := h.lastReport()
			if r.Result != "refused" || !strings.HasPrefix(r.Detail, tc.prefix) {
				t.Fatalf("report = %+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Detail, w) {
					t.Errorf("detail %q lacks %q", r.Detail, w)
				}
			}
			if strings.Contains(r.Detail, "IN_A_COMMENT") || strings.Contains(r.Detail, "THIS") {
				t.Errorf("a reference in a comment line counted: %q", r.Detail)
			}
			if h.ten.LeasesGranted(env) != 0 || h.bao.Reads() != 0 || len(h.docker.Calls()) > 1 {
				t.Errorf("refusal after leasing %d, reading %d, docker %q", h.ten.LeasesGranted(env), h.bao.Reads(), h.docker.Subcommands())
			}
			h.expectLog("refused: " + tc.prefix)
			if _, err := os.Stat(filepath.Join(h.cfg.EnvDir(), "current")); !os.IsNotExist(err) {
				t.Error("a refused bundle was promoted")
			}
		})
	}
}

func TestBundleShaMismatch(t *testing.T) {
	h := newHarness(t)
	files := makeFiles(bundleSpec{})
	h.ten.SetDesiredRaw(env, strings.Repeat("ab", 32), files)
	h.expectExit(tick.ExitFailed)
	if r := h.lastReport(); r.Result != "refused" || !strings.HasPrefix(r.Detail, "BUNDLE_SHA_MISMATCH: ") {
		t.Errorf("report = %+v", r)
	}
	if h.ten.LeasesGranted(env) != 0 {
		t.Error("leased for a mismatching bundle")
	}
}

func TestLegacyAppRoleLeaseIsRefused(t *testing.T) {
	for _, shape := range []tenancytest.LeaseShape{tenancytest.LeaseAppRole, tenancytest.LeaseMissingJWT} {
		h := newHarness(t)
		h.ten.SetLeaseShape(env, shape)
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitFailed)
		r := h.lastReport()
		if r.Result != "failed" || !strings.Contains(r.Detail, "LEASE_SHAPE") {
			t.Errorf("shape %d: report %+v", shape, r)
		}
		if h.docker.Count("compose up") != 0 {
			t.Error("compose ran after a LEASE_SHAPE refusal")
		}
	}
}

func TestComposePullFailureCarriesTheRegistrysWords(t *testing.T) {
	h := newHarness(t)
	h.docker.PullFail = "Error response from daemon: Head \"https://harbor.tikali.net/v2/monky/api/manifests/1.4.2\": no basic auth credentials\n"
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != "failed" || !strings.Contains(r.Detail, "no basic auth credentials") || !strings.HasPrefix(r.Detail, "compose pull: ") {
		t.Errorf("report = %+v", r)
	}
	h.expectLog("failed: compose pull: docker compose pull failed (rc=1)")
	if h.docker.Count("compose up") != 0 {
		t.Error("compose up ran after a failed pull")
	}
}

func TestUnhealthyAfterUpReportsFailedWithLogs(t *testing.T) {
	h := newHarness(t)
	first := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)

	h.docker.Health["api"] = "unhealthy"
	h.docker.Logs = "api-1 | connecting with password " + dbPassword + "\napi-1 | health check failed\n"
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n", agent: map[string]any{"healthy_timeout_s": 30}})
	var upAt, failedAt time.Time
	h.step = func(name string) error {
		switch name {
		case "up":
			upAt = h.clock.Now()
		case "failed":
			failedAt = h.clock.Now()
		}
		return nil
	}
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != "failed" || !strings.Contains(r.Detail, "not healthy after 30s: api: running/unhealthy") {
		t.Errorf("report = %+v", r)
	}
	// The bundle's 30 s is what was waited, on the agent's clock, not the config's 60 s.
	if waited := failedAt.Sub(upAt); waited < 30*time.Second || waited >= 60*time.Second {
		t.Errorf("the failing tick waited %s for health, want the bundle's 30 s", waited)
	}
	if !strings.Contains(r.LogTail, "health check failed") || strings.Contains(r.LogTail, dbPassword) || !strings.Contains(r.LogTail, "***") {
		t.Errorf("log tail not the redacted compose logs: %q", r.LogTail)
	}
	if st := h.state(); st.AppliedSha != first || st.LastResult != "failed" {
		t.Errorf("state applied %q result %q, want the previous sha kept", st.AppliedSha, st.LastResult)
	}
}

func TestHealthWaitsThroughStarting(t *testing.T) {
	h := newHarness(t)
	h.docker.TurnsHealthyAfter["api"] = 3
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose ps") < 4 {
		t.Errorf("ps calls = %d, want the agent to wait through starting", h.docker.Count("compose ps"))
	}
}

func TestDownKeepsVolumesUnlessBothSay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		purge   bool
		config  string
		removed bool
	}{
		{"retire keeps volumes by default", false, "", false},
		{"purge asked but config keeps", true, "", false},
		{"config purges but not asked", false, "volumes_on_absent: purge", false},
		{"both say purge", true, "volumes_on_absent: purge", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.config)
			h.desire(bundleSpec{compose: defaultCompose + "volumes:\n  data: {}\n"})
			h.expectExit(tick.ExitOK)
			h.ten.Retire(env, tc.purge)
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); r.Result != "down" {
				t.Errorf("report = %+v", r)
			}
			if len(h.docker.Running()) != 0 {
				t.Error("containers still running after down")
			}
			if h.docker.Volumes() == tc.removed {
				t.Errorf("volumes present = %v, want removed = %v", h.docker.Volumes(), tc.removed)
			}
		})
	}
}

func TestUnauthenticatedReBootstrapsWithAFreshGrant(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	// A kit re-reveal supersedes the grant behind the current token; install.sh staged the new one.
	h.writeBootstrap()
	h.expectExit(tick.ExitOK)
	if _, err := os.Stat(h.cfg.BootstrapFile); !os.IsNotExist(err) {
		t.Error("the fresh grant was not used and deleted")
	}
	if r := h.lastReport(); r.Result != "healthy" {
		t.Errorf("report after re-bootstrap = %+v", r)
	}
	h.expectLog("AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside")
}

func TestUnauthenticatedWithoutAGrantAsksForTheKit(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	refused, _ := os.ReadFile(h.cfg.TokenPath())
	revokes := h.bao.Revokes()
	h.ten.Supersede(env) // retire or a re-reveal whose kit was not run
	h.expectExit(tick.ExitFailed)
	h.expectLog("re-run the install kit")
	if _, err := os.Stat(h.cfg.TokenPath()); !os.IsNotExist(err) {
		t.Error("the refused token is still the agent's token")
	}
	// Kept aside as evidence, 0600, and revoked at OpenBao.
	kept, err := os.ReadFile(h.cfg.TokenPath() + ".superseded")
	if err != nil || len(refused) == 0 || string(kept) != string(refused) {
		t.Errorf("bao.token.superseded = %q, %v; want the refused token", kept, err)
	}
	if fi, err := os.Stat(h.cfg.TokenPath() + ".superseded"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("bao.token.superseded: %v, %v; want mode 0600", fi, err)
	}
	if h.bao.Revokes() != revokes+1 {
		t.Errorf("revocations = %d, want one more than %d", h.bao.Revokes(), revokes)
	}
	h.expectLog("AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside")
	h.expectLog("revoked=true")
	if h.state().AppliedSha == "" {
		t.Error("state lost the applied sha")
	}
}

func TestNoTokenAndNoGrant(t *testing.T) {
	h := newHarness(t)
	os.Remove(h.cfg.BootstrapFile)
	err := h.tickErr()
	// The CLI prints the error: it names the missing grant and what to do.
	want := "no OpenBao token and no bootstrap grant at " + h.cfg.BootstrapFile + ": re-run the install kit"
	if tick.ExitCode(err) != tick.ExitFailed || !errors.Is(err, tick.ErrNeedsKit) || err.Error() != want {
		t.Errorf("error = %v, want %q (exit 1)", err, want)
	}
	if len(h.ten.Checkins(env)) != 0 {
		t.Error("checked in without a token")
	}
}

func TestEnvMismatchStopsAtOnce(t *testing.T) {
	h := newHarness(t)
	h.ten.FailNext(tenancytest.Checkin, http.StatusForbidden, protocol.CodeEnvMismatch, 1)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitConfig)
	if n := len(h.ten.Reports(env)) + len(h.ten.Leases(env)) + len(h.ten.BundleFetches(env)); n != 0 {
		t.Errorf("%d calls after AGENT_ENV_MISMATCH", n)
	}
	h.expectLog("AGENT_ENV_MISMATCH")
}

func TestTemporaryFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ep     tenancytest.Endpoint
		status int
	}{
		{"checkin 503", tenancytest.Checkin, http.StatusServiceUnavailable},
		{"checkin 500", tenancytest.Checkin, http.StatusInternalServerError},
		{"bundle 502", tenancytest.Bundle, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.desire(bundleSpec{})
			h.ten.FailNext(tc.ep, tc.status, "", 1)
			h.expectExit(tick.ExitTemporary)
			h.expectLog("temporary network failure")
			h.expectExit(tick.ExitOK) // the next timer tick converges
		})
	}
	t.Run("tenancy unreachable", func(t *testing.T) {
		h := newHarness(t)
		h.desire(bundleSpec{})
		h.ten.Close()
		h.expectExit(tick.ExitTemporary)
	})
}

// Laptop mode: a check-in that gets no answer (or a 5xx) is a laptop off the mesh, exit 0 with
// one info line; every other temporary failure keeps exit 75.
func TestLaptopMode(t *testing.T) {
	quiet := func(t *testing.T, h *harness) {
		t.Helper()
		h.expectExit(tick.ExitOK)
		lines := strings.Split(strings.TrimSpace(h.logs.String()), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, "INFO laptop mode: tenancy unreachable; nothing to do") || strings.Contains(h.logs.String(), "WARN") {
			t.Errorf("journal, want one info line for the offline tick:\n%s", h.logs.String())
		}
	}
	t.Run("tenancy unreachable", func(t *testing.T) {
		h := newHarness(t, "laptop_mode: true")
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK) // bootstrapped and applied while on the mesh
		h.ten.Close()
		h.logs = &syncbuf.Buffer{}
		quiet(t, h)
	})
	t.Run("check-in 503", func(t *testing.T) {
		h := newHarness(t, "laptop_mode: true")
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK)
		h.ten.FailNext(tenancytest.Checkin, http.StatusServiceUnavailable, "", 1)
		h.logs = &syncbuf.Buffer{}
		quiet(t, h)
	})
	t.Run("first login with OpenBao unreachable", func(t *testing.T) {
		// A kit staged, no token yet, and the laptop off the mesh: the bootstrap login is the
		// first call, and its failure is the same offline laptop.
		h := newHarness(t, "laptop_mode: true")
		h.bao.FailNext("auth/jwt-tenancy/login", http.StatusServiceUnavailable, 1)
		quiet(t, h)
		if _, err := os.Stat(h.cfg.BootstrapFile); err != nil {
			t.Errorf("the grant is gone after a failed login: %v", err)
		}
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK) // back on the mesh
	})
	t.Run("bundle 502 is not offline", func(t *testing.T) {
		h := newHarness(t, "laptop_mode: true")
		h.desire(bundleSpec{})
		h.ten.FailNext(tenancytest.Bundle, http.StatusBadGateway, "", 1)
		h.expectExit(tick.ExitTemporary)
	})
	t.Run("OpenBao down is not offline", func(t *testing.T) {
		h := newHarness(t, "laptop_mode: true")
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK)
		h.bao.FailNext("auth/token/lookup-self", http.StatusServiceUnavailable, 1)
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		h.expectExit(tick.ExitTemporary)
		if strings.Contains(h.logs.String(), "laptop mode") {
			t.Error("an OpenBao failure was taken for tenancy being unreachable")
		}
	})
}

func TestConcurrentTickDoesNothing(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	os.MkdirAll(h.cfg.StateDir, 0o700)
	f, err := os.OpenFile(h.cfg.LockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	holdLock(t, f)
	h.expectExit(tick.ExitOK)
	if len(h.ten.Checkins(env)) != 0 || len(h.docker.Calls()) != 0 {
		t.Error("a tick ran while another held the lock")
	}
	h.expectLog("another tick is running")
}

func TestUpgradedFromOnTheFirstCheckinAfterAVersionChange(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	st := h.state()
	st.AgentVersion = "0.1.9"
	saveState(t, h, st)
	h.expectExit(tick.ExitOK)
	h.expectExit(tick.ExitOK)
	cs := h.ten.Checkins(env)
	if got := cs[len(cs)-2].Request.UpgradedFrom; got != "0.1.9" {
		t.Errorf("upgraded_from = %q on the first check-in after the change", got)
	}
	if got := cs[len(cs)-1].Request.UpgradedFrom; got != "" {
		t.Errorf("upgraded_from = %q on a later check-in", got)
	}
}

// The Python agent's state.json records no version: the package's postinst names it instead,
// and a file that cannot be a version is not sent on.
func TestUpgradedFromThePythonAgent(t *testing.T) {
	for _, tc := range []struct {
		name, file, want, log string
	}{
		{"the package names it", "0.1.9\n", "0.1.9", ""},
		{"no file", "", state.PriorVersionUnknown, ""},
		{"garbage in the file", "0.1.9; rm -rf /\n", state.PriorVersionUnknown, "upgraded-from file is unusable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.desire(bundleSpec{})
			h.expectExit(tick.ExitOK)
			st := h.state()
			st.AgentVersion, st.PendingUpgradeFrom = "", "" // as the Python agent left it
			saveState(t, h, st)
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(h.cfg.StateDir, state.UpgradedFromFile), []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			h.expectExit(tick.ExitOK)
			cs := h.ten.Checkins(env)
			if got := cs[len(cs)-1].Request.UpgradedFrom; got != tc.want {
				t.Errorf("upgraded_from = %q, want %q", got, tc.want)
			}
			if tc.log != "" {
				h.expectLog(tc.log)
			}
			h.expectExit(tick.ExitOK)
			cs = h.ten.Checkins(env)
			if got := cs[len(cs)-1].Request.UpgradedFrom; got != "" {
				t.Errorf("upgraded_from = %q on the next check-in: the file is read only for an unknown prior version", got)
			}
		})
	}
}

func TestCheckinCarriesTelemetry(t *testing.T) {
	h := newHarness(t)
	yes := true
	next := "2026-12-02T10:01:00Z"
	h.timer = &protocol.Timer{Unit: "monky-deployd.timer", Enabled: &yes, Active: &yes, NextElapse: &next}
	sha := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.clock.Advance(time.Minute)
	h.expectExit(tick.ExitOK)
	cs := h.ten.Checkins(env)
	req := cs[len(cs)-1].Request
	if req.AppliedSha == nil || *req.AppliedSha != sha || req.Hostname != "qa-02" || req.Transport != "system" ||
		req.LastResult != "applied" || req.Timer == nil || req.Timer.Enabled == nil || !*req.Timer.Enabled ||
		req.TokenTTLSec == nil || *req.TokenTTLSec <= 0 || req.DiskFreeBytes == nil || req.DockerVersion != "29.0.1" || req.AgentVersion == "" {
		b, _ := json.Marshal(req)
		t.Errorf("check-in request = %s", b)
	}
	if first := cs[0].Request; first.AppliedSha != nil {
		t.Error("applied_sha not null before the first apply")
	}
}

// The check-in's vault block names another OpenBao, KV mount and prefix than the config; the
// secrets exist only there, so the apply works only if all three are adopted.
func TestVaultSettingsFromTheCheckinAreAdopted(t *testing.T) {
	h := newHarnessOpts(t, harnessOptions{secondBao: &baotest.Options{KVMount: "tenant-kv"}})
	const prefix = env + "/see/relocated"
	h.ten.SetVault(env, protocol.Vault{Addr: h.bao2.URL, Mount: "tenant-kv", Prefix: prefix, AuthMount: "jwt-tenancy", AuthRole: "see-env"})
	h.bao2.PutData(prefix+"/gemini_api_key", map[string]any{"value": "adopted-gemini"})
	h.bao2.PutData(prefix+"/db_password", map[string]any{"value": "adopted-db"})
	h.bao2.PutData(prefix+"/registry", map[string]any{"value": "robot:" + registryPwd})
	sha := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	for _, p := range []string{"gemini_api_key", "db_password", "registry"} {
		if n := h.bao2.ReadsOf(prefix + "/" + p); n != 1 {
			t.Errorf("%s read %d times at the adopted OpenBao, mount and prefix, want 1", p, n)
		}
	}
	if h.bao.Reads() != 0 {
		t.Errorf("%d reads at the config's OpenBao", h.bao.Reads())
	}
	envText, _ := os.ReadFile(filepath.Join(h.cfg.EnvDir(), "releases", sha, ".env"))
	if !strings.Contains(string(envText), "GEMINI_API_KEY=adopted-gemini\n") || !strings.Contains(string(envText), "DB_PASSWORD=adopted-db\n") {
		t.Errorf(".env does not carry the adopted values:\n%s", envText)
	}
	for _, setting := range []string{"setting=addr", "setting=mount value=tenant-kv", "setting=prefix value=" + prefix} {
		h.expectLog(setting)
	}
}

func TestValuesSurviveOrAreRefusedByName(t *testing.T) {
	h := newHarness(t)
	h.bao.Put(env, "cert", "value", "-----BEGIN CERT-----\nline two\n-----END CERT-----")
	h.desire(bundleSpec{
		template: "CERT=${CERT}\nGEMINI_API_KEY=${GEMINI_API_KEY}\n",
		manifest: `{"entries": [{"var": "CERT", "path": "cert"}, {"var": "GEMINI_API_KEY", "path": "gemini_api_key"}]}`,
	})
	// A multi-line value is written double-quoted with \n escapes, one with quotes, `$` and `#`
	// single-quoted: docker compose reads both back byte-for-byte (checked against real compose
	// in the integration tests).
	h.expectExit(tick.ExitOK)
	envText, err := os.ReadFile(filepath.Join(h.cfg.EnvDir(), "current", ".env"))
	if err != nil {
		t.Fatal(err)
	}
	want := `CERT="-----BEGIN CERT-----\nline two\n-----END CERT-----"` + "\n" +
		`GEMINI_API_KEY='` + geminiKey + `'` + "\n"
	if string(envText) != want {
		t.Errorf(".env =\n%s\nwant\n%s", envText, want)
	}
}

// Every successful apply keeps the running release and the one before it and removes the
// rest: each .env holds the secrets of its day. Image prune stays opt-in.
func TestAppliesKeepOnlyTheCurrentAndPreviousRelease(t *testing.T) {
	for _, prune := range []bool{false, true} {
		t.Run(fmt.Sprintf("prune=%v", prune), func(t *testing.T) {
			h := newHarness(t)
			h.prune = prune
			var shas []string
			for i := 0; i < 7; i++ {
				shas = append(shas, h.desire(bundleSpec{template: defaultTemplate + "N=" + string(rune('a'+i)) + "\n"}))
				h.expectExit(tick.ExitOK)
				h.clock.Advance(time.Minute)
			}
			var left []string
			entries, _ := os.ReadDir(filepath.Join(h.cfg.EnvDir(), "releases"))
			for _, e := range entries {
				left = append(left, e.Name())
			}
			want := []string{shas[5], shas[6]}
			sort.Strings(want)
			if !slices.Equal(left, want) {
				t.Errorf("releases left %v, want the previous and the current %v", left, want)
			}
			wantImagePrunes := 0
			if prune {
				wantImagePrunes = 7
			}
			if n := h.docker.Count("image prune"); n != wantImagePrunes {
				t.Errorf("image prune ran %d times, want %d", n, wantImagePrunes)
			}

			// A failed apply removes nothing: the previous and the current stay for a revert.
			h.desire(bundleSpec{template: defaultTemplate + "N=broken\n"})
			h.docker.PullFail = "manifest unknown"
			h.expectExit(tick.ExitFailed)
			for _, sha := range want {
				if _, err := os.Stat(filepath.Join(h.cfg.EnvDir(), "releases", sha)); err != nil {
					t.Errorf("a failed apply removed release %s: %v", sha, err)
				}
			}
		})
	}
}

// An OpenBao that cannot be reached must not cost a lease: tenancy allows 5 an hour, and the
// login with it would fail the same way. That holds for a lease token and for a bootstrap token
// due its swap (it is looked up before the swap too).
func TestOpenBaoDownDoesNotSpendALease(t *testing.T) {
	t.Run("lease token", func(t *testing.T) {
		h := newHarness(t)
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitOK)
		h.bao.FailNext("auth/token/lookup-self", http.StatusServiceUnavailable, 1)
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		h.expectExit(tick.ExitTemporary)
		if n := h.ten.LeasesGranted(env); n != 1 {
			t.Errorf("leases = %d, want 1: a lease was spent while OpenBao was down", n)
		}
		h.expectExit(tick.ExitOK)
	})
	t.Run("bootstrap token", func(t *testing.T) {
		h := newHarness(t)
		applyWithBootstrapToken(t, h)
		h.bao.FailNext("auth/token/lookup-self", http.StatusServiceUnavailable, 1)
		h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
		h.expectExit(tick.ExitTemporary)
		if n := h.ten.LeasesGranted(env); n != 0 {
			t.Errorf("leases = %d while OpenBao was down, want 0", n)
		}
		h.expectExit(tick.ExitOK)
		if n := h.ten.LeasesGranted(env); n != 1 || h.state().Token.Source != "lease" {
			t.Errorf("after recovery: leases %d, token %+v; want the one swap", n, h.state().Token)
		}
	})
}

// A login refused because the configured role does not exist is the config's fault: the box is
// told so, not sent to re-run the install kit.
func TestWrongRoleIsNotAKitProblem(t *testing.T) {
	h := newHarness(t, "")
	h.cfg.Bao.Role = "no-such-role"
	h.desire(bundleSpec{})
	err := tick.New(h.cfg, h.deps(), tick.Options{}).Tick(context.Background())
	if tick.ExitCode(err) != tick.ExitFailed || errors.Is(err, tick.ErrNeedsKit) || !strings.Contains(err.Error(), "no-such-role") {
		t.Errorf("error = %v", err)
	}
	if _, serr := os.Stat(h.cfg.BootstrapFile); serr != nil {
		t.Error("the grant was deleted although the login failed")
	}
}

// With the `current` link gone (removed by hand) the heartbeat still looks at the project.
func TestHeartbeatWithoutCurrentLink(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	os.Remove(filepath.Join(h.cfg.EnvDir(), "current"))
	h.docker.Stop("api")
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "unhealthy" || !strings.Contains(r.Detail, "api") {
		t.Errorf("report = %+v", r)
	}
	h.expectLog("no current release link")
}

// A refusal with more findings than a detail holds keeps its start: the CODE: prefix and the
// first findings, in the report and in state.last_detail alike; the journal keeps all of it.
func TestLongRefusalKeepsItsCode(t *testing.T) {
	h := newHarness(t)
	var c strings.Builder
	c.WriteString("services:\n")
	for i := range 40 {
		fmt.Fprintf(&c, "  svc%02d:\n    image: x/svc:1\n    privileged: true\n", i)
	}
	h.desire(bundleSpec{compose: c.String()})
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if !strings.HasPrefix(r.Detail, "PRIVILEGED_REFUSED: docker-compose.yml: 40 finding(s) (bundle.json agent.allow_privileged is not set): svc00: privileged") || len(r.Detail) > protocol.MaxDetail || !strings.HasSuffix(r.Detail, "…") {
		t.Errorf("detail (%d bytes) = %q", len(r.Detail), r.Detail)
	}
	if st := h.state(); st.LastDetail != r.Detail {
		t.Errorf("state.last_detail differs from the report:\n%q\n%q", st.LastDetail, r.Detail)
	}
	h.expectLog("svc39: privileged")
}

// A retire clears applied_sha; re-activating the env with the release it last ran is no
// rollback. An older release still is.
func TestRedeployAfterRetire(t *testing.T) {
	h := newHarness(t)
	first := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	second := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	h.ten.Retire(env, false)
	h.expectExit(tick.ExitOK)

	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "applied" || r.Sha != second {
		t.Errorf("re-activation with the last release: %+v", r)
	}

	h.ten.Retire(env, false)
	h.expectExit(tick.ExitOK)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitFailed)
	if r := h.lastReport(); r.Result != "refused" || !strings.HasPrefix(r.Detail, "ROLLBACK_REFUSED: "+first[:12]) {
		t.Errorf("an older release after a retire: %+v", r)
	}
}

func TestBundleHeaderShaMismatchIsAWarning(t *testing.T) {
	h := newHarness(t)
	h.ten.SetBundleHeader("X-Bundle-Sha", strings.Repeat("f", 64))
	sha := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	h.expectLog("WARN bundle header sha disagrees with its content env=env-qa-02 sha=" + sha[:12] + " header=ffffffffffff content=" + sha[:12])
}

func TestPullMissingReachesCompose(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{pull: "missing"})
	h.expectExit(tick.ExitOK)
	if h.docker.Count("compose pull --policy missing") != 1 {
		t.Errorf("docker calls = %q, want one `compose pull --policy missing`", h.docker.Subcommands())
	}
	h.expectLog("compose pull env=env-qa-02 policy=missing")
}

// PROTOCOL: a 403 on a KV read names the path (not a value) and fails the apply.
func TestForbiddenReadNamesThePath(t *testing.T) {
	h := newHarness(t)
	h.bao.FailNext("monky/data/env-qa-02/see/db_password", http.StatusForbidden, 1)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != "failed" || !strings.Contains(r.Detail, `"env-qa-02/see/db_password"`) || !strings.Contains(r.Detail, "forbidden") {
		t.Errorf("report = %+v", r)
	}
	if h.docker.Count("compose up") != 0 {
		t.Error("compose ran after a refused read")
	}
}

// A `docker info` that succeeded is kept even when the check-in after it fails: a box cut off
// from tenancy runs it once, not on every tick of the outage.
func TestDockerFactsSurviveAFailedCheckin(t *testing.T) {
	h := newHarness(t)
	applyThenForgetDockerFacts(t, h)
	h.ten.FailNext(tenancytest.Checkin, http.StatusServiceUnavailable, "", 2)
	calls := len(h.docker.Calls())
	h.expectExit(tick.ExitTemporary)
	h.expectExit(tick.ExitTemporary)
	if got := h.docker.Subcommands()[calls:]; !slices.Equal(got, []string{"info --format {{json .}}"}) {
		t.Errorf("two ticks against a failing tenancy ran %q, want one docker info", got)
	}
	if st := h.state(); st.DockerVersion != "29.0.1" || st.DockerInfoAt == nil {
		t.Errorf("state after the failed check-ins: docker_version %q docker_info_at %v", st.DockerVersion, st.DockerInfoAt)
	}
}

// A box migrated from the Python agent keeps its applied sha and may never apply again: its
// heartbeat ticks fill the empty docker cache once, and refresh it only when it grows old.
func TestHeartbeatFillsAnEmptyDockerCache(t *testing.T) {
	h := newHarness(t)
	applyThenForgetDockerFacts(t, h)
	calls := len(h.docker.Calls())

	h.expectExit(tick.ExitOK)
	if got := h.docker.Subcommands()[calls:]; !slices.Equal(got, []string{"info --format {{json .}}", "compose ps -a --format json"}) {
		t.Errorf("heartbeat with an empty cache ran %q", got)
	}
	cs := h.ten.Checkins(env)
	if req := cs[len(cs)-1].Request; req.DockerVersion != "29.0.1" || req.DiskFreeBytes == nil {
		t.Errorf("check-in: docker_version %q disk_free_bytes %v", req.DockerVersion, req.DiskFreeBytes)
	}

	calls = len(h.docker.Calls())
	h.clock.Advance(time.Hour)
	h.expectExit(tick.ExitOK)
	if got := h.docker.Subcommands()[calls:]; !slices.Equal(got, []string{"compose ps -a --format json"}) {
		t.Errorf("a converged tick with a fresh cache ran %q", got)
	}

	h.docker.ServerVersion = "29.1.0" // docker upgraded
	h.clock.Advance(6 * time.Hour)
	h.expectExit(tick.ExitOK)
	cs = h.ten.Checkins(env)
	if req := cs[len(cs)-1].Request; req.DockerVersion != "29.1.0" {
		t.Errorf("docker_version %q after the cache aged, want the upgraded 29.1.0", req.DockerVersion)
	}
}

// failingInfo is a docker whose `docker info` fails, recording each call and its deadline.
type failingInfo struct {
	tick.Docker
	calls       int
	maxDeadline time.Duration // the longest time left before a call's deadline; -1 without one
}

func (f *failingInfo) Info(ctx context.Context) (compose.Info, error) {
	f.calls++
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	f.maxDeadline = max(f.maxDeadline, left)
	return compose.Info{}, errors.New("Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
}

// The `docker info` before a check-in has a time limit of its own (a hung daemon must not hold
// up the liveness check-in), and a failing one is tried again after an hour, not on every tick;
// on a laptop its line is INFO, keeping the ticks quiet.
func TestDockerInfoBeforeTheCheckinIsBoundedAndRetriedHourly(t *testing.T) {
	for _, laptop := range []bool{false, true} {
		t.Run(fmt.Sprintf("laptop_mode %v", laptop), func(t *testing.T) {
			h := newHarness(t, fmt.Sprintf("laptop_mode: %v", laptop))
			applyThenForgetDockerFacts(t, h)
			info := &failingInfo{maxDeadline: -1}
			h.wrap = func(d *tick.Deps) { info.Docker = d.Docker; d.Docker = info }
			h.logs = &syncbuf.Buffer{}
			h.expectExit(tick.ExitOK)
			if info.calls != 1 || info.maxDeadline < 0 || info.maxDeadline > 10*time.Second {
				t.Errorf("docker info: %d calls, time left %v; want 1 call with at most 10s", info.calls, info.maxDeadline)
			}
			want := "WARN docker info failed"
			if laptop {
				want = "INFO docker info failed"
			}
			h.expectLog(want)
			h.clock.Advance(30 * time.Minute)
			h.expectExit(tick.ExitOK)
			if info.calls != 1 {
				t.Errorf("docker info retried within the hour: %d calls", info.calls)
			}
			h.clock.Advance(31 * time.Minute)
			h.expectExit(tick.ExitOK)
			if info.calls != 2 {
				t.Errorf("docker info not retried after an hour: %d calls", info.calls)
			}
		})
	}
}

// applyThenForgetDockerFacts applies a bundle, then empties the state's `docker info` cache, as a
// box migrated from the Python agent has it: the next ticks must fill it.
func applyThenForgetDockerFacts(t *testing.T, h *harness) {
	t.Helper()
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	st := h.state()
	st.DockerRootDir, st.DockerVersion, st.DockerInfoAt = "", "", nil
	saveState(t, h, st)
}

// A state.json that cannot be saved (a full disk; here a directory renamed into its place after
// the tick read it, so every write's rename fails) must not silence the box: the report goes
// out naming the write error, the tick exits 1, and the next tick, with the disk fixed, is
// whole again. The same for an apply: reported applied, then re-applied and recorded.
func TestStateThatCannotBeSavedIsReportedAndRecovered(t *testing.T) {
	h := newHarness(t)
	first := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	blockState := func(name string) error {
		if name != "token" {
			return nil
		}
		saved, err := os.ReadFile(h.cfg.StatePath())
		if err != nil {
			return err
		}
		if err := os.WriteFile(h.cfg.StatePath()+".saved", saved, 0o600); err != nil {
			return err
		}
		if err := os.Remove(h.cfg.StatePath()); err != nil {
			return err
		}
		return os.MkdirAll(filepath.Join(h.cfg.StatePath(), "full"), 0o700)
	}
	unblock := func() {
		t.Helper()
		if err := os.RemoveAll(h.cfg.StatePath()); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(h.cfg.StatePath()+".saved", h.cfg.StatePath()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name       string
		prepare    func() string // returns the sha the report should carry
		wantResult string
	}{
		{"heartbeat", func() string { return first }, protocol.ResultHealthy},
		{"apply", func() string { return h.desire(bundleSpec{template: defaultTemplate + "V=2\n"}) }, protocol.ResultApplied},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sha := tc.prepare()
			h.step = blockState
			err := h.tickErr()
			h.step = nil
			if tick.ExitCode(err) != tick.ExitFailed || err == nil || !strings.Contains(err.Error(), "state") {
				t.Errorf("tick = %v (exit %d), want exit 1 naming the state write", err, tick.ExitCode(err))
			}
			r := h.lastReport()
			if r.Sha != sha || r.Result != tc.wantResult || !strings.Contains(r.Detail, "state.json not saved") || !strings.Contains(r.Detail, "rename:") {
				t.Errorf("report = %s %s %q; want %s %s naming the write error", r.Sha, r.Result, r.Detail, sha, tc.wantResult)
			}
			h.expectLog("state.json not saved; the report went out")
			// what the running app wrote into its release through a writable bind of ./data
			appData := filepath.Join(release.Dir(h.cfg.EnvDir(), sha), "data", "db")
			if err := os.MkdirAll(filepath.Dir(appData), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(appData, []byte("rows\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			unblock()
			h.expectExit(tick.ExitOK)
			if st := h.state(); st.AppliedSha != sha || st.LastResult == "" {
				t.Errorf("after recovery: applied %s, last result %q; want %s", st.AppliedSha, st.LastResult, sha)
			}
			// the re-apply of the same sha re-staged its release in place
			if got, err := os.ReadFile(appData); err != nil || string(got) != "rows\n" {
				t.Errorf("the app's data after the re-apply: %q, %v", got, err)
			}
			if r := h.lastReport(); strings.Contains(r.Detail, "not saved") {
				t.Errorf("the recovered tick still reports %q", r.Detail)
			}
		})
	}
}

// A box whose docker cannot be used — the agent's account not (yet) in group docker, or a daemon
// that is down — still checks in, and its report says docker is unusable and why, even with
// nothing deployed yet: "healthy, nothing deployed" would hide it until the first apply.
func TestNothingDeployedReportsAnUnusableDocker(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		hint string
	}{
		{"no docker group", errors.New("docker info failed (rc=1): permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock"), "usermod -a -G docker monky-deployd"},
		{"daemon down", errors.New("docker info failed (rc=1): Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"), "systemctl start docker"},
		{"no docker CLI", fmt.Errorf("runner: start docker: %w: exec: \"docker\": executable file not found in $PATH", runner.ErrNotFound), "install docker, or set docker_bin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			info := &brokenDocker{err: tc.err}
			h.wrap = func(d *tick.Deps) { info.Docker = d.Docker; d.Docker = info }
			checkins := len(h.ten.Checkins(env))
			h.expectExit(tick.ExitOK)
			if n := len(h.ten.Checkins(env)); n != checkins+1 {
				t.Errorf("check-ins %d → %d", checkins, n)
			}
			r := h.lastReport()
			if r.Result != protocol.ResultUnhealthy || !strings.Contains(r.Detail, "docker is not usable") || !strings.Contains(r.Detail, tc.hint) {
				t.Errorf("report = %s %q; want unhealthy naming docker and %q", r.Result, r.Detail, tc.hint)
			}
			h.expectLog("WARN unhealthy: nothing deployed; docker is not usable")
			info.err = nil
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); r.Result != protocol.ResultHealthy || r.Detail != "nothing deployed" {
				t.Errorf("with docker back: report = %s %q", r.Result, r.Detail)
			}
		})
	}
}

// brokenDocker is a docker whose `docker info` fails with err while err is set.
type brokenDocker struct {
	tick.Docker
	err error
}

func (b *brokenDocker) Info(ctx context.Context) (compose.Info, error) {
	if b.err != nil {
		return compose.Info{}, b.err
	}
	return b.Docker.Info(ctx)
}

// A tick that finds files under state_dir it does not own (what a root tick of an older agent
// left) changes nothing and takes no lock, but checks in and reports failed, naming each file
// and the chown.
func TestForeignFilesAreReportedAndLeftAlone(t *testing.T) {
	h := newHarness(t)
	sha := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)
	before, err := os.ReadFile(h.cfg.StatePath())
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(h.cfg.LockPath(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	checkins := len(h.ten.Checkins(env))
	f := tick.Foreign{User: "monky-deployd", Files: []state.ForeignFile{
		{Path: h.cfg.StatePath(), UID: 0},
		{Path: filepath.Join(h.cfg.DockerConfigDir(), "config.json"), UID: 0},
	}}
	err = tick.New(h.cfg, h.deps(), tick.Options{}).RunForeign(context.Background(), f)
	if tick.ExitCode(err) != tick.ExitFailed {
		t.Errorf("RunForeign = %v, want exit 1", err)
	}
	if n := len(h.ten.Checkins(env)); n != checkins+1 {
		t.Errorf("check-ins %d → %d: the tick must check in although another holds the lock", checkins, n)
	}
	r := h.lastReport()
	wantDetail := "state_dir " + h.cfg.StateDir + " holds files monky-deployd does not own, left by a tick run as another user: state.json (uid 0), docker/config.json (uid 0); fix: sudo chown -hR monky-deployd:monky-deployd " + h.cfg.StateDir
	if r.Result != protocol.ResultFailed || r.Sha != sha || r.Detail != wantDetail {
		t.Errorf("report = %s %s %q\nwant failed %s %q", r.Result, r.Sha, r.Detail, sha, wantDetail)
	}
	if after, _ := os.ReadFile(h.cfg.StatePath()); !bytes.Equal(before, after) {
		t.Error("the tick wrote state.json")
	}
}
