package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/fleettest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

// harness runs fleetctl in-process against the fakes seeded with the demo fleet, with a fake
// clock, a fake sleep and a choice of which writers are terminals.
type harness struct {
	t      *testing.T
	f      *fakes
	work   string
	env    map[string]string
	stdout bytes.Buffer
	stderr syncbuf.Buffer

	mu        sync.Mutex
	clock     time.Time
	sleeps    []time.Duration
	afters    []time.Duration   // what After was asked to wait
	onSleep   func(n int) error // called at each sleep (1-based); a non-nil error ends it
	ttyStdout bool
	ttyStderr bool
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	f, err := startFakes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	fleettest.Seed(fleettest.Demo(fleettest.Now), f.z, f.a)
	fleettest.LinkKits(f.z, f.a)
	work := t.TempDir()
	if err := os.WriteFile(filepath.Join(work, "ziti-ca.pem"), f.z.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	// The operator's clock is deliberately far from tenancy's: nothing may depend on it.
	return &harness{t: t, f: f, work: work, env: f.env(work), clock: time.Date(2031, 5, 17, 3, 33, 0, 0, time.UTC)}
}

func (h *harness) deps() Deps {
	return Deps{
		Stdout: &h.stdout, Stderr: &h.stderr,
		Getenv:   func(k string) string { return h.env[k] },
		ReadFile: os.ReadFile,
		Now: func() time.Time {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.clock
		},
		Sleep: func(ctx context.Context, d time.Duration) error {
			h.mu.Lock()
			h.clock = h.clock.Add(d)
			h.sleeps = append(h.sleeps, d)
			n, hook := len(h.sleeps), h.onSleep
			h.mu.Unlock()
			if hook != nil {
				if err := hook(n); err != nil {
					return err
				}
			}
			return ctx.Err()
		},
		IsTerminal: func(w io.Writer) bool {
			return (w == io.Writer(&h.stdout) && h.ttyStdout) || (w == io.Writer(&h.stderr) && h.ttyStderr)
		},
		// Work "takes over a second" at once: progress is armed from the start. The delay asked
		// for is recorded for the test to check.
		After: func(d time.Duration, f func()) func() bool {
			h.mu.Lock()
			h.afters = append(h.afters, d)
			h.mu.Unlock()
			f()
			return func() bool { return false }
		},
		Listen: net.Listen,
	}
}

func (h *harness) run(ctx context.Context, args ...string) int {
	h.stdout.Reset()
	h.stderr.Reset()
	return run(ctx, args, h.deps())
}

func TestExitCode(t *testing.T) {
	src := &SourceError{Source: sourceZiti, Addr: "https://c", Err: errors.New("boom")}
	for _, tc := range []struct {
		name    string
		err     error
		started bool
		want    int
	}{
		{"nil", nil, true, 0},
		{"not ok", ErrNotOK, true, 1},
		{"other failure", errors.New("disk full"), true, 1},
		{"usage", usagef("bad"), true, 2},
		{"config", fmt.Errorf("x: %w", config.ErrInvalid), true, 2},
		{"kit exists", fmt.Errorf("x: %w", kit.ErrExists), true, 2},
		{"cobra before any command ran", errors.New("unknown flag: --x"), false, 2},
		{"source", src, true, 3},
		{"wrapped source", fmt.Errorf("gate: %w", src), true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(tc.err, tc.started); got != tc.want {
				t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// Ages come from tenancy's `now`: the operator's clock ten minutes either way (or five years)
// changes nothing in the output.
func TestClockSkewChangesNothing(t *testing.T) {
	h := newHarness(t)
	var outs []string
	for _, skew := range []time.Duration{0, 10 * time.Minute, -10 * time.Minute, 5 * 365 * 24 * time.Hour} {
		h.clock = fleettest.Now.Add(skew)
		if code := h.run(context.Background(), "status", "-o", "json"); code != 1 {
			t.Fatalf("skew %v: exit %d: %s", skew, code, h.stderr.String())
		}
		outs = append(outs, h.stdout.String())
	}
	for i := 1; i < len(outs); i++ {
		if outs[i] != outs[0] {
			t.Errorf("output with skew #%d differs from the unskewed one", i)
		}
	}
	if !strings.Contains(outs[0], `"checkin_age_s": 1740`) { // env-dev-08, 29 min on tenancy's clock
		t.Errorf("env-dev-08's age is not measured against tenancy's now")
	}
}

func TestWatchAppendsOnAPipe(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.onSleep = func(n int) error {
		if n == 1 { // between the rounds, env-dev-08's timer is re-enabled and it checks in
			now := fleettest.Now.Format(time.RFC3339)
			h.f.a.UpdateAgent("env-dev-08", func(a *protocol.AdminAgent) { a.LastCheckinAt = &now })
			return nil
		}
		cancel()
		return context.Canceled
	}
	code := h.run(ctx, "status", "--watch", "30s", "--env", "env-dev-0[18]")
	out := h.stdout.String()
	if n := strings.Count(out, "every 30s · tenancy 2026-12-02T10:00:00Z · Ctrl-C to stop"); n != 2 {
		t.Fatalf("%d snapshots, want 2:\n%s", n, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Errorf("escape sequences on a pipe")
	}
	rounds := strings.Split(out, "every 30s · ")
	if !strings.Contains(rounds[1], "2 envs: 2 SILENT") {
		t.Errorf("the first round:\n%s", rounds[1])
	}
	if second := rounds[2]; !strings.Contains(second, "2 envs: 1 OK, 1 SILENT") {
		t.Errorf("the second round does not show the change:\n%s", second)
	}
	if code != 1 {
		t.Errorf("exit %d, want 1 (env-dev-01 is still SILENT in the last round)", code)
	}
	if h.sleeps[0] != 30*time.Second {
		t.Errorf("slept %v", h.sleeps)
	}
}

func TestWatchRedrawsOnATerminal(t *testing.T) {
	h := newHarness(t)
	h.ttyStdout = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.onSleep = func(n int) error {
		if n == 1 {
			h.f.a.Fail(admintest.OpList, admintest.Failure{Status: 500}) // the second round fails
			return nil
		}
		cancel()
		return context.Canceled
	}
	code := h.run(ctx, "status", "--watch", "5s", "--env", "env-dev-02")
	out := h.stdout.String()
	if n := strings.Count(out, "\x1b[H\x1b[2J"); n != 2 {
		t.Errorf("%d redraws, want 2", n)
	}
	if !strings.Contains(out, "every 5s · tenancy no data") {
		t.Errorf("the failed round does not say it has no data:\n%q", out)
	}
	if !strings.Contains(h.stderr.String(), "cannot read the tenancy") {
		t.Errorf("stderr %q", h.stderr.String())
	}
	if code != 3 {
		t.Errorf("exit %d, want 3: the last round could not read tenancy", code)
	}
}

func TestProgressOnlyOnATerminal(t *testing.T) {
	h := newHarness(t)
	if code := h.run(context.Background(), "status"); code != 1 || h.stderr.String() != "" {
		t.Fatalf("exit %d, stderr on a pipe %q", code, h.stderr.String())
	}
	h.ttyStderr = true
	h.f.a.SetPageSize(5)
	if code := h.run(context.Background(), "status"); code != 1 {
		t.Fatalf("exit %d", code)
	}
	errOut := h.stderr.String()
	for _, want := range []string{"ziti: 1/1 pages", "tenancy: 3 pages, 13 agents", "\r\x1b[K"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("progress lacks %q: %q", want, errOut)
		}
	}
	if !strings.HasSuffix(errOut, "\r\x1b[K") {
		t.Errorf("the progress line is not erased at the end: %q", errOut)
	}
	// Progress is for work that takes over a second, and only that.
	if len(h.afters) != 1 || h.afters[0] != time.Second {
		t.Errorf("progress timers %v, want one of 1s", h.afters)
	}
}

func TestGateWaitsOnTheInjectedClock(t *testing.T) {
	h := newHarness(t)
	code := h.run(context.Background(), "gate", "--env", "env-prod-*", "--expect-version", "0.2.1", "--wait", "1m", "--poll", "15s")
	if code != 1 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	if got := fmt.Sprint(h.sleeps); got != "[15s 15s 15s 15s]" {
		t.Errorf("sleeps %s, want four polls of 15s in a 1m wait", got)
	}
	out := h.stdout.String()
	for _, want := range []string{"env-prod-01", "env-prod-02", "LAGGARD", "running 0.2.0, expected 0.2.1", "not yet on 0.2.1 when the wait ran out"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestGateRetriesAFailedReadingWhileWaiting(t *testing.T) {
	h := newHarness(t)
	a := h.f.a
	a.OnPoll(a.Polls()+2, func() { a.Fail(admintest.OpList, admintest.Failure{Status: 503}) })
	a.OnPoll(a.Polls()+3, func() {
		a.Fail(admintest.OpList, admintest.Failure{})
		now := fleettest.Now.Format(time.RFC3339)
		for _, env := range []string{"env-prod-01", "env-prod-02"} {
			a.UpdateAgent(env, func(ag *protocol.AdminAgent) { ag.AgentVersion, ag.LastCheckinAt = "0.2.1", &now })
		}
	})
	code := h.run(context.Background(), "gate", "--env", "env-prod-*", "--expect-version", "0.2.1", "--wait", "10m", "--poll", "10s")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, h.stdout.String(), h.stderr.String())
	}
	if !strings.Contains(h.stderr.String(), "gate: reading failed; retrying") {
		t.Errorf("the failed reading was not reported: %q", h.stderr.String())
	}
	if !strings.Contains(h.stdout.String(), "gate: PASS — 2 envs OK, all running 0.2.1 since 2026-12-02T10:00:00Z") {
		t.Errorf("stdout %q", h.stdout.String())
	}
}

// No secret ever reaches stdout or stderr: not the controller password, not the admin token,
// not the grant or the enrolment token of a kit — not even with -v.
func TestSecretsAreNeverPrinted(t *testing.T) {
	h := newHarness(t)
	h.env["DEBUG"], h.env["SWAGGER_DEBUG"] = "1", "1"
	out := h.work + "/kits"
	var all strings.Builder
	for _, args := range [][]string{
		{"-v", "status"},
		{"-v", "status", "-o", "json"},
		{"-v", "gate"},
		{"-v", "repair-attrs", "--all", "--apply"},
		{"-v", "onboard", "env-dev-02", "--site", "cbs", "--out", out},
		{"-v", "onboard", "env-dev-02", "--site", "cbs", "--out", out, "--reissue", "-o", "json"},
	} {
		h.run(context.Background(), args...)
		all.WriteString(h.stdout.String())
		all.WriteString(h.stderr.String())
	}
	h.f.a.AddBackend("env-new-09", "cbs")
	h.run(context.Background(), "-v", "onboard", "env-new-09", "--site", "cbs", "--out", out)
	all.WriteString(h.stdout.String() + h.stderr.String())

	secrets := []string{zitiPassword, adminToken}
	for _, k := range h.f.a.Kits() {
		secrets = append(secrets, k.Response.BootstrapGrant)
	}
	id, ok := h.f.z.Identity("monky-host.env-new-09")
	if !ok || id.EnrollmentJWT == "" {
		t.Fatal("the kit's identity has no enrolment token")
	}
	secrets = append(secrets, id.EnrollmentJWT)
	for _, s := range secrets {
		if strings.Contains(all.String(), s) {
			t.Errorf("a secret was printed: %.12s…", s)
		}
	}
	// …while the kit holds them where they belong.
	b, err := os.ReadFile(filepath.Join(out, "env-new-09", "monky-host.env-new-09.jwt"))
	if err != nil || strings.TrimSpace(string(b)) != id.EnrollmentJWT {
		t.Errorf("enrolment token file: %v", err)
	}
	if !strings.Contains(all.String(), "level=DEBUG") {
		t.Errorf("-v said nothing")
	}
}

// A failure after the reveal says the grant is superseded already, so the operator knows to
// finish with --reissue.
func TestOnboardFailureAfterTheReveal(t *testing.T) {
	h := newHarness(t)
	h.f.a.SetOnKit(nil)
	h.f.a.AddBackend("env-new-05", "cbs")
	h.f.z.Fail(zititest.OpCreate, zititest.Failure{Status: 500})
	code := h.run(context.Background(), "onboard", "env-new-05", "--site", "cbs", "--out", h.work+"/kits")
	if code != 3 {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	for _, want := range []string{"create identity \"monky-host.env-new-05\"", "earlier grants are superseded", "--reissue"} {
		if !strings.Contains(h.stderr.String(), want) {
			t.Errorf("stderr lacks %q: %s", want, h.stderr.String())
		}
	}
	if _, err := os.Stat(filepath.Join(h.work, "kits", "env-new-05")); !os.IsNotExist(err) {
		t.Errorf("a kit was written after the failure")
	}
}

// The controller drops an idle API session (and every session when it restarts). The next
// --watch round or gate poll logs in again and still gets its answer.
func TestExpiredZitiSessionLogsInAgain(t *testing.T) {
	logins := func(h *harness) int {
		n := 0
		for _, r := range h.f.z.Requests() {
			if r.Path == "/edge/management/v1/authenticate" {
				n++
			}
		}
		return n
	}
	t.Run("watch", func(t *testing.T) {
		h := newHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		h.onSleep = func(n int) error {
			if n == 1 {
				h.f.z.ExpireSessions()
				return nil
			}
			cancel()
			return context.Canceled
		}
		code := h.run(ctx, "status", "--watch", "30s", "--env", "env-dev-0[18]")
		if n := strings.Count(h.stdout.String(), "2 envs: 2 SILENT"); n != 2 {
			t.Errorf("%d good rounds, want 2:\n%s", n, h.stdout.String())
		}
		if strings.Contains(h.stdout.String(), "no data") || h.stderr.String() != "" {
			t.Errorf("a round failed: stderr %q", h.stderr.String())
		}
		if code != 1 {
			t.Errorf("exit %d, want 1 (both envs SILENT)", code)
		}
		if n := logins(h); n != 2 {
			t.Errorf("%d logins, want 2 (one per session)", n)
		}
	})
	t.Run("gate", func(t *testing.T) {
		h := newHarness(t)
		h.onSleep = func(n int) error {
			h.f.z.ExpireSessions()
			if n == 2 {
				now := fleettest.Now.Format(time.RFC3339)
				for _, env := range []string{"env-prod-01", "env-prod-02"} {
					h.f.a.UpdateAgent(env, func(ag *protocol.AdminAgent) { ag.AgentVersion, ag.LastCheckinAt = "0.2.1", &now })
				}
			}
			return nil
		}
		code := h.run(context.Background(), "gate", "--env", "env-prod-*", "--expect-version", "0.2.1", "--wait", "10m", "--poll", "15s")
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, h.stdout.String(), h.stderr.String())
		}
		if strings.Contains(h.stderr.String(), "retrying") {
			t.Errorf("a poll failed: %q", h.stderr.String())
		}
		if n := logins(h); n != 3 {
			t.Errorf("%d logins, want 3 (the first, and one after each expiry)", n)
		}
	})
	t.Run("a fresh session refused is a source error", func(t *testing.T) {
		h := newHarness(t)
		h.f.z.Fail(zititest.OpList, zititest.Failure{Status: 401})
		h.f.z.Fail(zititest.OpAuthenticators, zititest.Failure{Status: 401})
		if code := h.run(context.Background(), "status"); code != 3 {
			t.Fatalf("exit %d: %s", code, h.stderr.String())
		}
		// One login: the identities and certificates listings run at once over it, and neither
		// takes the refusal of a session that never answered for a dropped one, whichever
		// logged in.
		if !strings.Contains(h.stderr.String(), "HTTP 401") || logins(h) != 1 {
			t.Errorf("%d logins; stderr %q", logins(h), h.stderr.String())
		}
	})
}

// Under certificate auth, ziti.url may be left out: the identity file names its controller.
func TestZitiURLFromTheIdentityFile(t *testing.T) {
	for _, tc := range []struct {
		name     string
		edit     func(doc map[string]any, ctrl string)
		url      string // FLEETCTL_ZITI_URL; "" leaves it unset
		field    string // where the controller was found
		wantCode int
		wantErr  string
	}{
		{name: "ztAPI", edit: func(map[string]any, string) {}, field: "ztAPI", wantCode: 1},
		{name: "ztAPIs only", edit: func(doc map[string]any, ctrl string) {
			delete(doc, "ztAPI")
			doc["ztAPIs"] = []string{ctrl + "/edge/client/v1"}
		}, field: "ztAPIs[0]", wantCode: 1},
		{name: "explicit ziti.url wins", edit: func(map[string]any, string) {}, url: "https://127.0.0.1:1",
			wantCode: 3, wantErr: "cannot read the ziti controller at https://127.0.0.1:1:"},
		{name: "no controller named", edit: func(doc map[string]any, _ string) { delete(doc, "ztAPI") },
			wantCode: 2, wantErr: "ziti.url is not set, and the identity file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			raw, err := h.f.z.ClientIdentityFile("ops-admin")
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			tc.edit(doc, h.f.z.URL)
			raw, _ = json.Marshal(doc)
			idPath := filepath.Join(h.work, "ops.json")
			if err := os.WriteFile(idPath, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"FLEETCTL_ZITI_URL", "FLEETCTL_ZITI_USERNAME", "FLEETCTL_ZITI_PASSWORD", "FLEETCTL_ZITI_CA_FILE"} {
				delete(h.env, k)
			}
			h.env["FLEETCTL_ZITI_IDENTITY"] = idPath
			if tc.url != "" {
				h.env["FLEETCTL_ZITI_URL"] = tc.url
			}
			code := h.run(context.Background(), "-v", "status", "--env", "env-dev-0*")
			if code != tc.wantCode || !strings.Contains(h.stderr.String(), tc.wantErr) {
				t.Fatalf("exit %d, want %d with %q:\n%s", code, tc.wantCode, tc.wantErr, h.stderr.String())
			}
			if tc.wantCode != 1 {
				return
			}
			for _, want := range []string{
				`setting key=ziti.url from="identity file ` + idPath + ` (` + tc.field + `)"`,
				`"ziti: authenticated" url=` + h.f.z.URL + ` method=cert`,
			} {
				if !strings.Contains(h.stderr.String(), want) {
					t.Errorf("-v lacks %q:\n%s", want, h.stderr.String())
				}
			}
			if !strings.Contains(h.stdout.String(), "5 envs: 2 OK, 3 SILENT") {
				t.Errorf("stdout:\n%s", h.stdout.String())
			}
		})
	}
}

// A held box and a deferred one block the gate, named as such and counted apart from failures;
// the wait says no wait clears them.
func TestGateNamesHeldAndDeferredBoxes(t *testing.T) {
	h := newHarness(t)
	a := h.f.a
	until := fleettest.Now.Add(2 * time.Hour).Format(time.RFC3339)
	since := fleettest.Now.Add(-26 * time.Hour).Format(time.RFC3339)
	a.UpdateAgent("env-prod-01", func(ag *protocol.AdminAgent) {
		ag.Hold = &protocol.Hold{Reason: "db migration by hand", By: "alice", Since: since, Until: until}
		ag.DesiredSha = strings.Repeat("9", 64)
	})
	window := fleettest.Now.Add(15 * time.Hour).Format(time.RFC3339)
	a.UpdateAgent("env-qa-03", func(ag *protocol.AdminAgent) { ag.DeferredUntil = &window })
	code := h.run(context.Background(), "-v", "gate", "--env", "env-[qp][ar]*-0[13]", "--expect-version", "0.2.1", "--wait", "30s", "--poll", "10s", "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, h.stdout.String(), h.stderr.String())
	}
	var g struct {
		Blockers []struct {
			EnvID         string         `json:"env_id"`
			Verdict       string         `json:"verdict"`
			Held          bool           `json:"held"`
			Hold          *protocol.Hold `json:"hold"`
			Deferred      bool           `json:"deferred"`
			DeferredUntil *string        `json:"deferred_until"`
		} `json:"blockers"`
	}
	if err := json.Unmarshal(h.stdout.Bytes(), &g); err != nil {
		t.Fatalf("%v: %s", err, h.stdout.String())
	}
	got := map[string]string{}
	for _, b := range g.Blockers {
		switch {
		case b.Held && b.Hold != nil && b.Hold.By == "alice" && !b.Deferred:
			got[b.EnvID] = b.Verdict + " held"
		case b.Deferred && b.DeferredUntil != nil && *b.DeferredUntil == window && !b.Held:
			got[b.EnvID] = b.Verdict + " deferred"
		default:
			got[b.EnvID] = b.Verdict
		}
	}
	if got["env-prod-01"] != "HELD held" || got["env-qa-03"] != "DEFERRED deferred" || got["env-qa-01"] != "FAILING" {
		t.Errorf("blockers %v", got)
	}
	if !strings.Contains(h.stderr.String(), "held=1") || !strings.Contains(h.stderr.String(), "deferred=1") {
		t.Errorf("the wait did not count them: %q", h.stderr.String())
	}
	// Piped (a CI log), the wait line names them too, and whom it waits for.
	if !strings.Contains(h.stderr.String(), "(1 more held by a human, 1 more deferred to an apply window: they block whatever the wait): waiting for ") {
		t.Errorf("the piped wait line did not name them: %q", h.stderr.String())
	}
}

// A box backing off a failed release is no laggard, and no wait clears it: the gate says so while
// it waits and when it closes.
func TestGateSaysWhenABoxIsBackingOff(t *testing.T) {
	h := newHarness(t)
	a := h.f.a
	backOff := func(ag *protocol.AdminAgent) {
		failed := ag.DesiredSha
		next := fleettest.Now.Add(8 * time.Minute).Format(time.RFC3339)
		ag.FailedSha, ag.Attempts, ag.NextAttemptAt = &failed, 3, &next
		applied := ag.AppliedSha
		ag.RevertedTo, ag.RevertHealthy = &applied, &[]bool{true}[0]
		ag.LastResult = "healthy"
	}
	a.UpdateAgent("env-qa-03", backOff)
	a.OnPoll(a.Polls()+2, func() {
		now := fleettest.Now.Format(time.RFC3339)
		for _, env := range []string{"env-qa-01", "env-qa-03", "env-prod-01"} {
			a.UpdateAgent(env, func(ag *protocol.AdminAgent) { ag.AgentVersion, ag.LastCheckinAt = "0.2.1", &now })
		}
	})
	code := h.run(context.Background(), "-v", "gate", "--env", "env-[qp][ar]*-0[13]", "--expect-version", "0.2.1", "--wait", "10m", "--poll", "10s", "-o", "wide")
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, h.stdout.String(), h.stderr.String())
	}
	if !strings.Contains(h.stderr.String(), "backing_off=1") {
		t.Errorf("the wait did not say a box is backing off: %q", h.stderr.String())
	}
	out := h.stdout.String()
	for _, want := range []string{"env-qa-03", "BACKOFF", "failed 3×, reverted to", "next try in 8m", "1 backing off a failed release"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if len(h.sleeps) > 2 {
		t.Errorf("the gate waited on after the laggards caught up: sleeps %v", h.sleeps)
	}
}

// Colour on a terminal only, and never when NO_COLOR is set (to anything) or the terminal is
// dumb; JSON is never painted.
func TestColourOnlyOnATerminal(t *testing.T) {
	h := newHarness(t)
	painted := func(args ...string) bool {
		t.Helper()
		if code := h.run(context.Background(), args...); code != 1 {
			t.Fatalf("%v: exit %d\n%s", args, code, h.stderr.String())
		}
		return strings.Contains(h.stdout.String(), "\x1b[")
	}
	if painted("status") {
		t.Error("colour on a pipe")
	}
	h.ttyStdout = true
	if !painted("status") || !strings.Contains(h.stdout.String(), "\x1b[31mSILENT\x1b[0m") {
		t.Errorf("no colour on a terminal:\n%s", h.stdout.String())
	}
	if !painted("gate") {
		t.Error("gate not coloured on a terminal")
	}
	if painted("status", "-o", "json") {
		t.Error("colour in JSON")
	}
	h.env["NO_COLOR"] = "1"
	if painted("status") {
		t.Error("colour with NO_COLOR set")
	}
	delete(h.env, "NO_COLOR")
	h.env["TERM"] = "dumb"
	if painted("status") {
		t.Error("colour on a dumb terminal")
	}
}
