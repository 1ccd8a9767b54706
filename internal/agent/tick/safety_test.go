package tick_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// The steps of a tick, in order; Deps.Step is called after each.
var steps = []string{"lock", "token", "checkin", "bundle", "checks", "lease", "secrets", "stage", "judged", "promote", "pull", "applying", "up", "healthy", "state"}

// The steps after which an apply is under way (state.json "applying"): a tick killed there is a
// failed apply for the next one.
var killedApply = map[string]bool{"applying": true, "up": true, "healthy": true}

var errCrash = errors.New("injected crash")

// A tick that dies after any step leaves the previous release running, state.json readable,
// no temp file behind, and the next tick converges.
func TestATickKilledAtAnyStepIsRecoveredByTheNext(t *testing.T) {
	for _, at := range steps {
		t.Run(at, func(t *testing.T) {
			h := newHarness(t)
			first := h.desire(bundleSpec{})
			h.expectExit(tick.ExitOK)

			second := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
			reached := false
			h.step = func(name string) error {
				if name == at {
					reached = true
					return errCrash
				}
				return nil
			}
			if code := h.tick(); code == tick.ExitOK {
				t.Fatalf("the crashed tick exited 0")
			}
			if !reached {
				t.Fatalf("step %q never reached", at)
			}
			st, err := state.Load(h.cfg.StatePath())
			if err != nil {
				t.Fatalf("state.json unreadable after a crash at %s: %v", at, err)
			}
			// The previous release keeps running (nothing was stopped), and applied_sha names
			// what runs until a new one is healthy.
			if len(h.docker.Running()) != 2 {
				t.Errorf("running = %v after a crash at %s", h.docker.Running(), at)
			}
			if at != "state" && st.AppliedSha != first {
				t.Errorf("applied_sha = %.12s after a crash at %s, want the previous %.12s", st.AppliedSha, at, first)
			}
			assertNoTempFiles(t, h.cfg.StateDir)

			h.step = nil
			if killedApply[at] {
				// Killed between `compose up` and the recorded outcome: the next tick counts it
				// as a failure, brings the first release back and reports; after the backoff
				// the second is tried again.
				h.expectExit(tick.ExitFailed)
				if st := h.state(); st.Applying != nil || st.Backoff == nil || st.Backoff.Sha != second ||
					st.Backoff.Attempts != 1 || st.Backoff.RevertedTo != first || st.AppliedSha != first {
					t.Fatalf("after a crash at %s: applying %+v backoff %+v", at, st.Applying, st.Backoff)
				}
				if r := h.lastReport(); r.Result != "failed" || r.Sha != second || r.RevertedTo != first {
					t.Errorf("report after a crash at %s = %+v", at, r)
				}
				h.endBackoff()
			}
			h.expectExit(tick.ExitOK)
			if st := h.state(); st.AppliedSha != second {
				t.Errorf("the next tick did not converge: applied %.12s", st.AppliedSha)
			}
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); r.Result != "healthy" {
				t.Errorf("after recovery: %+v", r)
			}
		})
	}
}

// assertNoTempFiles fails on any leftover of an atomic write or a staging directory.
func assertNoTempFiles(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		if strings.Contains(name, ".tmp") {
			t.Errorf("temp file left behind: %s", p)
		}
		return nil
	})
}

// issued records every token the fake OpenBao handed the agent and every grant the fake tenancy
// signed for it, through wrappers around the real clients.
type issued struct {
	mu     sync.Mutex
	values map[string]string // value → what it is
}

func (i *issued) add(what, v string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if v != "" {
		i.values[v] = fmt.Sprintf("%s #%d", what, len(i.values))
	}
}

type recordingBao struct {
	tick.Bao
	rec *issued
}

func (b recordingBao) Login(ctx context.Context, mount, role string, jwt secret.Value) (bao.Token, error) {
	tok, err := b.Bao.Login(ctx, mount, role, jwt)
	b.rec.add("OpenBao token", tok.Value.Reveal())
	return tok, err
}

func (b recordingBao) RenewSelf(ctx context.Context, token secret.Value) (bao.Token, error) {
	tok, err := b.Bao.RenewSelf(ctx, token)
	b.rec.add("renewed OpenBao token", tok.Value.Reveal())
	return tok, err
}

type recordingTenancy struct {
	tick.Tenancy
	rec *issued
}

func (t recordingTenancy) Lease(ctx context.Context, token secret.Value, envID, reason string) (*protocol.LeaseResponse, error) {
	resp, err := t.Tenancy.Lease(ctx, token, envID, reason)
	if resp != nil {
		t.rec.add("lease login_jwt", resp.LoginJWT)
	}
	return resp, err
}

// No secret value, token or grant appears in anything the tick wrote that is not meant to hold
// it: the journal, the reports, state.json, the errors a tick returns (the CLI prints them), and
// the argv and env of docker calls. Every token OpenBao issued is looked for, the revoked
// bootstrap-era one and those dropped on a 401 included, and every grant tenancy signed.
func TestSecretsNeverLeak(t *testing.T) {
	h := newHarness(t)
	rec := &issued{values: map[string]string{}}
	h.wrap = func(d *tick.Deps) {
		newBao := d.NewBao
		d.NewBao = func(addr string) (tick.Bao, error) {
			c, err := newBao(addr)
			return recordingBao{Bao: c, rec: rec}, err
		}
		d.Tenancy = recordingTenancy{Tenancy: d.Tenancy, rec: rec}
	}
	var errs []string
	runTick := func(want int) {
		t.Helper()
		err := h.tickErr()
		if got := tick.ExitCode(err); got != want {
			t.Fatalf("tick exit %d, want %d: %v", got, want, err)
		}
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	grant, _ := os.ReadFile(h.cfg.BootstrapFile)
	rec.add("bootstrap grant", strings.TrimSpace(string(grant)))
	h.docker.Logs = "api-1 | GEMINI=" + geminiKey + "\napi-1 | pw " + dbPassword + " " + registryPwd + "\n"
	h.desire(bundleSpec{})
	runTick(tick.ExitOK)
	runTick(tick.ExitOK)
	// A failing apply whose logs and pull output echo secrets.
	h.docker.PullFail = "pull failed for robot$pull:" + registryPwd + " with " + dbPassword
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	runTick(tick.ExitFailed)
	h.docker.PullFail = ""
	h.docker.Health["api"] = "unhealthy"
	h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
	runTick(tick.ExitFailed)
	// A kit re-reveal: the token is refused, a new grant logs in, and the next apply leases.
	h.docker.Health["api"] = ""
	h.writeBootstrap()
	grant, _ = os.ReadFile(h.cfg.BootstrapFile)
	rec.add("second bootstrap grant", strings.TrimSpace(string(grant)))
	h.desire(bundleSpec{template: defaultTemplate + "V=4\n"})
	runTick(tick.ExitOK)
	// A KV read refused: the error names the path.
	h.bao.FailNext("monky/data/env-qa-02/see/db_password", http.StatusForbidden, 1)
	h.desire(bundleSpec{template: defaultTemplate + "V=5\n"})
	runTick(tick.ExitFailed)
	if len(errs) != 3 {
		t.Fatalf("tick errors = %q, want three", errs)
	}
	if n := len(rec.values); n < 7 { // 2 grants, 2 lease grants, 2 bootstrap tokens, 2 lease tokens
		t.Fatalf("only %d tokens and grants recorded: %v", n, rec.values)
	}

	secrets := map[string]string{
		"gemini key": geminiKey, "db password": dbPassword, "registry password": registryPwd,
	}
	for v, what := range rec.values {
		secrets[what] = v
	}
	var haystacks = map[string]string{"journal": h.logs.String(), "tick errors": strings.Join(errs, "\n")}
	for i, r := range h.ten.Reports(env) {
		haystacks["report "+string(rune('0'+i))] = r.Report.Detail + "\n" + r.Report.LogTail
	}
	st, _ := os.ReadFile(h.cfg.StatePath())
	haystacks["state.json"] = string(st)
	for _, c := range h.ten.Checkins(env) {
		b, _ := json.Marshal(c.Request)
		haystacks["check-in"] += string(b)
	}
	for _, c := range h.docker.Calls() {
		haystacks["docker call "+c.String()] = c.String() + "\n" + strings.Join(c.Env, "\n")
	}
	for where, text := range haystacks {
		for what, value := range secrets {
			if value != "" && strings.Contains(text, value) {
				t.Errorf("%s leaked into %s", what, where)
			}
		}
	}
	// And the failing reports still say what failed, masked.
	if !strings.Contains(h.ten.Reports(env)[2].Report.Detail, "***") {
		t.Errorf("pull failure detail not redacted: %q", h.ten.Reports(env)[2].Report.Detail)
	}
}

// crashed is the panic a test's injected kill raises; killedTick recovers it.
type crashed struct{ at string }

// killedTick runs a tick that dies, mid-write sequence, at the first point kill panics.
func killedTick(t *testing.T, h *harness) (died bool) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crashed); !ok {
				panic(r)
			}
			died = true
		}
	}()
	h.tick()
	return false
}

// revokedTokens wraps every OpenBao client of h's ticks and records the tokens revoked.
func revokedTokens(h *harness) *issued {
	rec := &issued{values: map[string]string{}}
	h.wrap = func(d *tick.Deps) {
		newBao := d.NewBao
		d.NewBao = func(addr string) (tick.Bao, error) {
			c, err := newBao(addr)
			return revokeRecorder{Bao: c, rec: rec}, err
		}
	}
	return rec
}

type revokeRecorder struct {
	tick.Bao
	rec *issued
}

func (b revokeRecorder) RevokeSelf(ctx context.Context, token secret.Value) error {
	b.rec.add("revoked", token.Reveal())
	return b.Bao.RevokeSelf(ctx, token)
}

// assertRecovered checks the box after the tick that followed a kill: one lease spent in all,
// the token in bao.token is a lease token OpenBao and tenancy accept and was never revoked, and
// nothing of the swap is left behind.
func assertRecovered(t *testing.T, h *harness, revoked *issued, wantSha string) {
	t.Helper()
	st := h.state()
	if st.AppliedSha != wantSha || st.Token == nil || st.Token.Source != "lease" {
		t.Errorf("after recovery: applied %.12s, token %+v", st.AppliedSha, st.Token)
	}
	if n := h.ten.LeasesGranted(env); n != 1 {
		t.Errorf("leases = %d, want 1: the kill cost a lease", n)
	}
	if st.PendingLease != nil || st.PreviousToken != nil {
		t.Errorf("pending %+v, previous token %+v left in state", st.PendingLease, st.PreviousToken)
	}
	for _, name := range []string{"lease.jwt", "bao.token.new"} {
		if _, err := os.Stat(filepath.Join(h.cfg.StateDir, name)); err == nil {
			t.Errorf("%s left behind", name)
		}
	}
	assertNoTempFiles(t, h.cfg.StateDir)
	tok, _ := os.ReadFile(h.cfg.TokenPath())
	revoked.mu.Lock()
	_, wrong := revoked.values[strings.TrimSpace(string(tok))]
	revoked.mu.Unlock()
	if wrong {
		t.Error("the token in use was revoked")
	}
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != "healthy" {
		t.Errorf("heartbeat after recovery: %+v", r)
	}
}

// A tick killed between any two writes of a token swap — the grant kept before its login, the
// new token staged, state recording it, the rename, the revocation — is recovered by the next
// tick without a second lease and without revoking the token in use. Both a fresh grant and one
// kept from an earlier tick are swapped in.
func TestATickKilledDuringTheTokenSwapIsRecovered(t *testing.T) {
	for _, grant := range []string{"fresh", "kept"} {
		points := []string{"token-staged", "token-recorded", "token-swapped", "token-revoked"}
		if grant == "fresh" {
			points = append([]string{"grant-kept"}, points...)
		}
		for _, at := range points {
			t.Run(grant+"/"+at, func(t *testing.T) {
				h := newHarness(t)
				if grant == "kept" {
					keepAGrant(t, h)
				} else {
					applyWithBootstrapToken(t, h)
				}
				sha := h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
				revoked := revokedTokens(h)
				h.step = func(name string) error {
					if name == at {
						panic(crashed{at: at})
					}
					return nil
				}
				if !killedTick(t, h) {
					t.Fatalf("the tick never reached %s", at)
				}
				if _, err := state.Load(h.cfg.StatePath()); err != nil {
					t.Fatalf("state unreadable after a kill at %s: %v", at, err)
				}
				h.step = nil
				h.expectExit(tick.ExitOK)
				assertRecovered(t, h, revoked, sha)
			})
		}
	}
}

// The reviewer's kill: right after the kept grant's login, at the first moment the tick reads
// the clock (a kill point that needs no step hook, so it holds for any order of the writes).
func TestKilledRightAfterTheKeptGrantsLogin(t *testing.T) {
	h := newHarness(t)
	keepAGrant(t, h)
	sha := h.desire(bundleSpec{template: defaultTemplate + "V=3\n"})
	revoked := revokedTokens(h)
	armed, loggedIn := true, false
	record := h.wrap
	h.wrap = func(d *tick.Deps) {
		record(d)
		newBao := d.NewBao
		d.NewBao = func(addr string) (tick.Bao, error) {
			c, err := newBao(addr)
			return loginSpy{Bao: c, done: &loggedIn}, err
		}
		now := d.Now
		d.Now = func() time.Time {
			if armed && loggedIn {
				armed = false
				panic(crashed{at: "after login"})
			}
			return now()
		}
	}
	if !killedTick(t, h) {
		t.Fatal("the tick was not killed")
	}
	h.wrap = nil
	revoked2 := revokedTokens(h)
	h.expectExit(tick.ExitOK)
	for v := range revoked2.values {
		revoked.add("revoked", v)
	}
	assertRecovered(t, h, revoked, sha)
}

type loginSpy struct {
	tick.Bao
	done *bool
}

func (b loginSpy) Login(ctx context.Context, mount, role string, jwt secret.Value) (bao.Token, error) {
	tok, err := b.Bao.Login(ctx, mount, role, jwt)
	*b.done = err == nil
	return tok, err
}

// The forms a secret takes on its way into text are masked as well as the raw value: the
// base64 `auth` the agent itself writes to DOCKER_CONFIG (docker echoes it), and the JSON-, %q-
// and URL-escaped forms of a value with quotes and spaces, in the journal, the reports, the tick's
// error and state.json.
func TestEscapedAndDerivedSecretsNeverLeak(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)

	auth := base64.StdEncoding.EncodeToString([]byte("robot$pull:" + registryPwd))
	js, _ := json.Marshal(geminiKey)
	forms := map[string]string{
		"registry auth (base64)": auth,
		"gemini key as JSON":     string(js[1 : len(js)-1]),
		"gemini key as %q":       strconv.Quote(geminiKey),
		"gemini key URL-escaped": url.QueryEscape(geminiKey),
	}
	h.docker.PullFail = `error getting credentials: {"auths":{"harbor.tikali.net":{"auth":"` + auth + `"}}} ` +
		`env {"GEMINI":` + string(js) + `} ` + fmt.Sprintf("%q", geminiKey) + " https://x/?k=" + url.QueryEscape(geminiKey)
	h.docker.Logs = "api-1 | " + h.docker.PullFail + "\n"
	h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	err := h.tickErr()
	if tick.ExitCode(err) != tick.ExitFailed {
		t.Fatalf("tick = %v, want a failed apply", err)
	}
	st, _ := os.ReadFile(h.cfg.StatePath())
	r := h.lastReport()
	haystacks := map[string]string{
		"journal": h.logs.String(), "tick error": err.Error(), "state.json": string(st),
		"report detail": r.Detail, "report log_tail": r.LogTail,
	}
	for where, text := range haystacks {
		for what, form := range forms {
			if strings.Contains(text, form) {
				t.Errorf("%s leaked into %s", what, where)
			}
		}
	}
	if !strings.Contains(r.Detail, "***") {
		t.Errorf("the failure's detail lost its masked text: %q", r.Detail)
	}
}
