package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type stack struct {
	clk    *clock
	signer *grant.Signer
	bao    *baotest.Server
	baoc   *bao.Client
	ten    *tenancytest.Server
	c      *tenancy.Client
	// secrets collects every token and grant handed out, for leak checks.
	secrets []string
}

func setup(t *testing.T) *stack {
	t.Helper()
	clk := &clock{t: time.Date(2026, 9, 7, 10, 0, 0, 0, time.UTC)}
	signer, err := grant.NewSigner("tenancy-test")
	if err != nil {
		t.Fatal(err)
	}
	signer.Clock = clk.Now
	b := baotest.Start(baotest.Options{PublicKey: signer.PublicKey(), Clock: clk.Now})
	t.Cleanup(b.Close)
	ten := tenancytest.Start(tenancytest.Options{Verifier: b, Signer: signer, Clock: clk.Now, BaoAddr: b.URL})
	t.Cleanup(ten.Close)
	baoc, err := bao.New(bao.Options{Addr: b.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := tenancy.New(ten.URL, nil)
	c.Clock = clk.Now
	return &stack{clk: clk, signer: signer, bao: b, baoc: baoc, ten: ten, c: c}
}

// token runs the install-kit flow for env: reveal a kit, log in to OpenBao with its grant.
func (s *stack) token(t *testing.T, env string) secret.Value {
	t.Helper()
	g := s.ten.RevealKit(env)
	tok, err := s.baoc.Login(context.Background(), "jwt-tenancy", "see-env", secret.New(g))
	if err != nil {
		t.Fatal(err)
	}
	s.secrets = append(s.secrets, g, tok.Value.Reveal())
	return tok.Value
}

func (s *stack) noLeak(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for _, x := range s.secrets {
		if strings.Contains(err.Error(), x) || strings.Contains(fmt.Sprintf("%+v %#v", err, err), x) {
			t.Fatalf("error leaks a token or grant: %v", err)
		}
	}
}

func sp(s string) *string { return &s }

var files = map[string]string{
	"bundle.json":        `{"secrets_provider": "openbao"}`,
	"docker-compose.yml": "services: {}\n",
}

func TestCheckinActions(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	tok := s.token(t, "env-qa-02")

	r, err := s.c.Checkin(ctx, tok, protocol.CheckinRequest{EnvID: "env-qa-02", AgentVersion: "0.2.0"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Action != protocol.ActionNone || r.DesiredSha != "" || r.CheckinIntervalS != 60 {
		t.Fatalf("no desired bundle: %+v", r)
	}
	want := protocol.Vault{Addr: s.bao.URL, Mount: "monky", Prefix: "env-qa-02/see", AuthMount: "jwt-tenancy", AuthRole: "see-env"}
	if r.Vault != want {
		t.Fatalf("vault = %+v, want %+v", r.Vault, want)
	}

	sha := s.ten.SetDesired("env-qa-02", files)
	if sha != tenancytest.BundleSha(files) || len(sha) != 64 {
		t.Fatalf("sha %q", sha)
	}
	for _, tc := range []struct {
		name    string
		applied *string
		setup   func()
		action  string
		purge   bool
	}{
		{"first apply", nil, nil, protocol.ActionApply, false},
		{"older sha applied", sp(strings.Repeat("a", 64)), nil, protocol.ActionApply, false},
		{"converged", sp(sha), nil, protocol.ActionNone, false},
		{"retired, keep volumes", sp(sha), func() { s.ten.Retire("env-qa-02", false) }, protocol.ActionDown, false},
		{"retired, purge volumes", sp(sha), func() { s.ten.Retire("env-qa-02", true) }, protocol.ActionDown, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			r, err := s.c.Checkin(ctx, tok, protocol.CheckinRequest{EnvID: "env-qa-02", AppliedSha: tc.applied})
			if err != nil {
				t.Fatal(err)
			}
			if r.Action != tc.action || r.PurgeVolumes != tc.purge || r.DesiredSha != sha ||
				r.BundleURL != "/v1/agent/bundle/env-qa-02/"+sha || r.EnvID != "env-qa-02" {
				t.Fatalf("answer = %+v", r)
			}
		})
	}
	recs := s.ten.Checkins("env-qa-02")
	if len(recs) != 6 || recs[1].Request.AppliedSha != nil || *recs[2].Request.AppliedSha != strings.Repeat("a", 64) {
		t.Fatalf("records = %+v", recs)
	}
}

func TestBundle(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	tok := s.token(t, "env-a")
	sha := s.ten.SetDesired("env-a", files)
	url := "/v1/agent/bundle/env-a/" + sha

	for _, tc := range []struct {
		name      string
		hdr, val  string
		url       string
		wantSha   string
		wantFetch int
	}{
		{"X-Bundle-Sha", "X-Bundle-Sha", "", url, sha, 1},
		{"X-Bundle-Sha256", "X-Bundle-Sha256", "", url, sha, 2},
		{"no header", "", "", url, "", 3},
		{"header disagrees (returned as sent, uppercase folded)", "X-Bundle-Sha", strings.Repeat("B", 64), url, strings.Repeat("b", 64), 4},
		{"relative without slash", "X-Bundle-Sha", "", strings.TrimPrefix(url, "/"), sha, 5},
		{"absolute URL of another host: only its path is used", "X-Bundle-Sha", "", "http://evil.example:9/" + strings.TrimPrefix(url, "/"), sha, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ten.SetBundleHeader(tc.hdr, tc.val)
			got, hs, err := s.c.Bundle(ctx, tok, tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if hs != tc.wantSha || len(got) != len(files) || got["docker-compose.yml"] != files["docker-compose.yml"] {
				t.Fatalf("files=%v sha=%q", got, hs)
			}
			if n := len(s.ten.BundleFetches("env-a")); n != tc.wantFetch {
				t.Fatalf("fetches = %d", n)
			}
		})
	}

	t.Run("unknown sha", func(t *testing.T) {
		_, _, err := s.c.Bundle(ctx, tok, "/v1/agent/bundle/env-a/"+strings.Repeat("0", 64))
		var ae *tenancy.APIError
		if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "BUNDLE_UNKNOWN" || errors.Is(err, tenancy.ErrTemporary) {
			t.Fatalf("err = %v", err)
		}
	})

	for _, tc := range []struct{ name, body string }{
		{"not JSON", "<html>"},
		{"files missing", `{}`},
		{"files not an object", `{"files": ["a"]}`},
		{"file not a string", `{"files": {"a": 1}}`},
		{"a file given twice", `{"files": {"a": "x", "a": "y"}}`},
		{"files given twice", `{"files": {"a": "x"}, "files": {"b": "y"}}`},
		{"files in capitals only", `{"FILES": {"a": "x"}}`},
	} {
		t.Run("malformed: "+tc.name, func(t *testing.T) {
			s.ten.MalformNext(tenancytest.Bundle, tc.body, 1)
			_, _, err := s.c.Bundle(ctx, tok, url)
			var ref *protocol.Refusal
			if !errors.As(err, &ref) || ref.Code != protocol.CodeBundleInvalid {
				t.Fatalf("err = %v, want BUNDLE_INVALID refusal", err)
			}
		})
	}

	t.Run("body over the cap", func(t *testing.T) {
		small := tenancy.New(s.ten.URL, nil)
		small.MaxBundleBytes = 64
		_, _, err := small.Bundle(ctx, tok, url)
		var ref *protocol.Refusal
		if !errors.As(err, &ref) || ref.Code != protocol.CodeBundleInvalid || !strings.Contains(ref.Detail, "exceeds") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestLeaseShapes(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	tok := s.token(t, "env-a")
	for _, tc := range []struct {
		name   string
		shape  tenancytest.LeaseShape
		refuse string
	}{
		{"normal", tenancytest.LeaseNormal, ""},
		{"legacy nested vault", tenancytest.LeaseLegacyVault, ""},
		{"AppRole", tenancytest.LeaseAppRole, "AppRole is gone"},
		{"missing login_jwt", tenancytest.LeaseMissingJWT, "no login_jwt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ten.SetLeaseShape("env-a", tc.shape)
			l, err := s.c.Lease(ctx, tok, "env-a", "apply")
			if tc.refuse != "" {
				var ref *protocol.Refusal
				if !errors.As(err, &ref) || ref.Code != protocol.CodeLeaseShape || !strings.Contains(ref.Detail, tc.refuse) {
					t.Fatalf("err = %v, want LEASE_SHAPE saying %q", err, tc.refuse)
				}
				s.noLeak(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.Addr != s.bao.URL || l.Mount != "jwt-tenancy" || l.Role != "see-env" || l.TTLSec != 3600 || l.EnvID != "env-a" {
				t.Fatalf("lease = %+v", l)
			}
			// The grant logs in to OpenBao, and the token it yields is accepted by tenancy.
			bt, err := s.baoc.Login(ctx, l.Mount, l.Role, secret.New(l.LoginJWT))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.c.Checkin(ctx, bt.Value, protocol.CheckinRequest{EnvID: "env-a"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if got := s.ten.Leases("env-a"); len(got) != 4 || got[0].Request.Reason != "apply" || got[0].GrantJTI == "" {
		t.Fatalf("lease records = %+v", got)
	}
}

func TestLeaseBodies(t *testing.T) {
	// Bodies the fake's shapes do not cover, straight from MalformNext.
	s := setup(t)
	tok := s.token(t, "env-a")
	for _, tc := range []struct {
		name, body string
		addr       string
		refuse     bool
		field      string
	}{
		{"top-level addr wins over vault.addr", `{"login_jwt":"x.y.z","addr":"https://top:8200","vault":{"addr":"https://nested:8200"}}`, "https://top:8200", false, ""},
		{"nested addr as fallback", `{"login_jwt":"x.y.z","vault":{"addr":"https://nested:8200"}}`, "https://nested:8200", false, ""},
		{"no addr at all", `{"login_jwt":"x.y.z"}`, "", false, ""},
		{"unknown fields ignored", `{"login_jwt":"x.y.z","addr":"https://a:1","future":{"x":1}}`, "https://a:1", false, ""},
		{"wrapping_token alone", `{"wrapping_token":"s.abc"}`, "", true, ""},
		{"role_id next to login_jwt", `{"login_jwt":"x.y.z","role_id":"r"}`, "", true, ""},
		{"null role_id is no AppRole", `{"login_jwt":"x.y.z","role_id":null}`, "", false, ""},
		{"empty login_jwt", `{"login_jwt":""}`, "", true, ""},
		{"login_jwt of the wrong type", `{"login_jwt": 12}`, "", false, "login_jwt"},
		{"ttl_s of the wrong type", `{"login_jwt":"x.y.z","ttl_s":"1h"}`, "", false, "ttl_s"},
		{"negative ttl_s", `{"login_jwt":"x.y.z","ttl_s":-1}`, "", false, "ttl_s"},
		{"addr not a URL", `{"login_jwt":"x.y.z","addr":"bao:8200"}`, "", false, "addr"},
		{"lease for another env", `{"login_jwt":"x.y.z","env_id":"env-b"}`, "", false, "env_id"},
		{"addr given twice", `{"login_jwt":"x.y.z","addr":"https://a:1","addr":"https://evil:1"}`, "", false, "addr"},
		{"login_jwt given twice", `{"login_jwt":"x.y.z","login_jwt":"a.b.c"}`, "", false, "login_jwt"},
		{"login_jwt in capitals only", `{"LOGIN_JWT":"x.y.z"}`, "", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ten.MalformNext(tenancytest.Lease, tc.body, 1)
			l, err := s.c.Lease(context.Background(), tok, "env-a", "renew")
			switch {
			case tc.refuse:
				var ref *protocol.Refusal
				if !errors.As(err, &ref) || ref.Code != protocol.CodeLeaseShape {
					t.Fatalf("err = %v, want LEASE_SHAPE", err)
				}
				if strings.Contains(err.Error(), "s.abc") {
					t.Fatal("refusal quotes the wrapping token")
				}
			case tc.field != "":
				var pe *tenancy.ProtocolError
				if !errors.As(err, &pe) || pe.Field != tc.field || !errors.Is(err, tenancy.ErrProtocol) || errors.Is(err, tenancy.ErrTemporary) {
					t.Fatalf("err = %v, want a protocol error naming %q", err, tc.field)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if l.Addr != tc.addr || l.LoginJWT != "x.y.z" {
					t.Fatalf("lease = %+v", l)
				}
			}
		})
	}
}

func TestLeaseRateLimit(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	tok := s.token(t, "env-a")
	other := s.token(t, "env-b")
	for i := range 5 {
		if _, err := s.c.Lease(ctx, tok, "env-a", "apply"); err != nil {
			t.Fatalf("lease %d: %v", i+1, err)
		}
		s.clk.Advance(10 * time.Minute)
	}
	// 50 min after the first lease, the sixth is refused until the first leaves the hour.
	_, err := s.c.Lease(ctx, tok, "env-a", "apply")
	var ae *tenancy.APIError
	if !errors.Is(err, tenancy.ErrRateLimited) || !errors.As(err, &ae) || ae.Code != protocol.CodeLeaseRateLimited || ae.RetryAfter != 10*time.Minute {
		t.Fatalf("err = %v (%+v), want LEASE_RATE_LIMITED retry after 10m", err, ae)
	}
	if errors.Is(err, tenancy.ErrTemporary) {
		t.Fatal("rate limit is not a temporary failure of its own; the caller decides")
	}
	// Another env has its own budget.
	if _, err := s.c.Lease(ctx, other, "env-b", "apply"); err != nil {
		t.Fatalf("env-b: %v", err)
	}
	s.clk.Advance(10 * time.Minute)
	if _, err := s.c.Lease(ctx, tok, "env-a", "apply"); err != nil {
		t.Fatalf("after the window moved: %v", err)
	}
	if n := s.ten.LeasesGranted("env-a"); n != 6 {
		t.Fatalf("granted = %d", n)
	}
	s.ten.SetLeaseLimit(0)
	if _, err := s.c.Lease(ctx, other, "env-b", "apply"); !errors.Is(err, tenancy.ErrRateLimited) {
		t.Fatalf("limit 0: %v", err)
	}
}

func TestErrorMapping(t *testing.T) {
	shapes := []struct {
		name  string
		shape tenancytest.ErrorShape
	}{{"top-level", tenancytest.ErrorTopLevel}, {"FastAPI detail", tenancytest.ErrorFastAPI}, {"plain detail", tenancytest.ErrorPlainDetail}}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			s := setup(t)
			ctx := context.Background()
			s.ten.SetErrorShape(sh.shape)
			a := s.token(t, "env-a")
			s.ten.AddEnv("env-b")
			stale := s.token(t, "env-c")
			s.ten.RevealKit("env-c") // supersedes the grant stale was minted from
			revoked := s.token(t, "env-d")
			s.bao.Revoke(revoked.Reveal())
			unknown := secret.New("s.not-a-token-anyone-issued")
			s.secrets = append(s.secrets, unknown.Reveal())

			checkin := func(tok secret.Value, env string) error {
				_, err := s.c.Checkin(ctx, tok, protocol.CheckinRequest{EnvID: env})
				return err
			}
			for _, tc := range []struct {
				name   string
				call   func() error
				status int
				code   string
				is     error
			}{
				{"unknown token", func() error { return checkin(unknown, "env-a") }, 401, protocol.CodeUnauthenticated, tenancy.ErrUnauthenticated},
				{"revoked token", func() error { return checkin(revoked, "env-d") }, 401, protocol.CodeUnauthenticated, tenancy.ErrUnauthenticated},
				{"superseded grant", func() error { return checkin(stale, "env-c") }, 401, protocol.CodeUnauthenticated, tenancy.ErrUnauthenticated},
				{"superseded grant on lease", func() error { _, err := s.c.Lease(ctx, stale, "env-c", "apply"); return err }, 401, protocol.CodeUnauthenticated, tenancy.ErrUnauthenticated},
				{"env mismatch on checkin", func() error { return checkin(a, "env-b") }, 403, protocol.CodeEnvMismatch, tenancy.ErrEnvMismatch},
				{"env mismatch on lease", func() error { _, err := s.c.Lease(ctx, a, "env-b", "apply"); return err }, 403, protocol.CodeEnvMismatch, tenancy.ErrEnvMismatch},
				{"env mismatch on report", func() error {
					return s.c.Report(ctx, a, protocol.Report{EnvID: "env-b", Result: protocol.ResultHealthy})
				}, 403, protocol.CodeEnvMismatch, tenancy.ErrEnvMismatch},
				{"env mismatch on bundle", func() error {
					_, _, err := s.c.Bundle(ctx, a, "/v1/agent/bundle/env-b/"+strings.Repeat("0", 64))
					return err
				}, 403, protocol.CodeEnvMismatch, tenancy.ErrEnvMismatch},
				{"500", func() error { s.ten.FailNext(tenancytest.Checkin, 500, "", 1); return checkin(a, "env-a") }, 500, "", tenancy.ErrTemporary},
				{"502 with a code", func() error {
					s.ten.FailNext(tenancytest.Report, 502, "UPSTREAM", 1)
					return s.c.Report(ctx, a, protocol.Report{EnvID: "env-a", Result: "healthy"})
				}, 502, "UPSTREAM", tenancy.ErrTemporary},
				{"503 on bundle", func() error {
					s.ten.FailNext(tenancytest.Bundle, 503, "", 1)
					_, _, err := s.c.Bundle(ctx, a, "/v1/agent/bundle/env-a/x")
					return err
				}, 503, "", tenancy.ErrTemporary},
				{"429 injected", func() error {
					s.ten.FailNext(tenancytest.Lease, 429, protocol.CodeLeaseRateLimited, 1)
					_, err := s.c.Lease(ctx, a, "env-a", "apply")
					return err
				}, 429, protocol.CodeLeaseRateLimited, tenancy.ErrRateLimited},
				{"403 with another code is no env mismatch", func() error { s.ten.FailNext(tenancytest.Checkin, 403, "FORBIDDEN", 1); return checkin(a, "env-a") }, 403, "FORBIDDEN", tenancy.ErrTemporary},
				{"401 with another code is not superseded", func() error { s.ten.FailNext(tenancytest.Checkin, 401, "SSO_REQUIRED", 1); return checkin(a, "env-a") }, 401, "SSO_REQUIRED", tenancy.ErrTemporary},
				{"unknown backend", func() error {
					// A token OpenBao knows for an env tenancy has no backend for.
					return checkin(secret.New(s.bao.IssueToken("env-z", "jti-z")), "env-z")
				}, 404, protocol.CodeBackendUnknown, nil},
			} {
				t.Run(tc.name, func(t *testing.T) {
					err := tc.call()
					if err == nil {
						t.Fatal("no error")
					}
					var ae *tenancy.APIError
					if !errors.As(err, &ae) {
						t.Fatalf("err = %T %v", err, err)
					}
					if ae.Status != tc.status || ae.Code != tc.code {
						t.Fatalf("status/code = %d/%q, want %d/%q (%v)", ae.Status, ae.Code, tc.status, tc.code, err)
					}
					for _, sentinel := range []error{tenancy.ErrUnauthenticated, tenancy.ErrEnvMismatch, tenancy.ErrRateLimited, tenancy.ErrTemporary, tenancy.ErrProtocol} {
						if got := errors.Is(err, sentinel); got != (sentinel == tc.is) {
							t.Fatalf("errors.Is(%v, %v) = %v", err, sentinel, got)
						}
					}
					if sh.shape != tenancytest.ErrorPlainDetail || tc.code != "" {
						if ae.Message == "" {
							t.Fatalf("no message in %v", err)
						}
					}
					s.noLeak(t, err)
				})
			}
		})
	}
}

func TestStatusErrorBodies(t *testing.T) {
	// Bodies written by something other than the fake: FastAPI's own errors, proxies, a server
	// that echoes the bearer.
	const tok = "s.bearer-echoed-by-a-careless-server"
	for _, tc := range []struct {
		name   string
		status int
		body   string
		retry  string
		code   string
		msg    string
		is     error
	}{
		// Only tenancy's code says the token was superseded: anything else in the path that
		// answers 401 or 403 is a temporary fault, and the token is kept.
		{"plain detail without a code", 401, `{"detail": "Not authenticated"}`, "", "", "Not authenticated", tenancy.ErrTemporary},
		{"plain detail with the code", 401, `{"detail": "AGENT_UNAUTHENTICATED: grant superseded"}`, "", protocol.CodeUnauthenticated, "grant superseded", tenancy.ErrUnauthenticated},
		{"FastAPI detail with the code", 401, `{"detail": {"code": "AGENT_UNAUTHENTICATED", "message": "grant superseded"}}`, "", protocol.CodeUnauthenticated, "grant superseded", tenancy.ErrUnauthenticated},
		{"the code in another case", 401, `{"CODE": "AGENT_UNAUTHENTICATED"}`, "", "", "", tenancy.ErrTemporary},
		{"nginx 401 page", 401, "<html>\r\n<head><title>401 Authorization Required</title></head>\r\n<body></body></html>", "", "", "", tenancy.ErrTemporary},
		{"empty 401", 401, ``, "", "", "", tenancy.ErrTemporary},
		{"plain detail with a code", 403, `{"detail": "AGENT_ENV_MISMATCH: token belongs to env-b"}`, "", protocol.CodeEnvMismatch, "token belongs to env-b", tenancy.ErrEnvMismatch},
		{"bare 403 is no env mismatch", 403, `{"detail": "Forbidden"}`, "", "", "Forbidden", tenancy.ErrTemporary},
		{"HTML 403 from a WAF", 403, `<!DOCTYPE html><title>Access denied</title>`, "", "", "", tenancy.ErrTemporary},
		{"HTML from a proxy", 502, `<html>bad gateway</html>`, "", "", "", tenancy.ErrTemporary},
		{"empty body", 504, ``, "", "", "", tenancy.ErrTemporary},
		{"echoed bearer", 401, `{"code":"AGENT_UNAUTHENTICATED","message":"token ` + tok + ` refused"}`, "", protocol.CodeUnauthenticated, "token *** refused", tenancy.ErrUnauthenticated},
		{"retry-after seconds", 429, `{"detail":{"code":"LEASE_RATE_LIMITED","message":"slow down"}}`, "120", protocol.CodeLeaseRateLimited, "slow down", tenancy.ErrRateLimited},
		{"retry-after date", 429, `{}`, "Mon, 07 Sep 2026 10:05:00 GMT", "", "", tenancy.ErrRateLimited},
		{"retry-after garbage", 429, `{}`, "soon", "", "", tenancy.ErrRateLimited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.retry != "" {
					w.Header().Set("Retry-After", tc.retry)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			c := tenancy.New(srv.URL, nil)
			c.Clock = func() time.Time { return time.Date(2026, 9, 7, 10, 0, 0, 0, time.UTC) }
			_, err := c.Checkin(context.Background(), secret.New(tok), protocol.CheckinRequest{EnvID: "env-a"})
			var ae *tenancy.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || ae.Code != tc.code || ae.Message != tc.msg {
				t.Fatalf("err = %#v", ae)
			}
			for _, sentinel := range []error{tenancy.ErrUnauthenticated, tenancy.ErrEnvMismatch, tenancy.ErrRateLimited, tenancy.ErrTemporary} {
				if got := errors.Is(err, sentinel); got != (sentinel == tc.is) {
					t.Fatalf("errors.Is(%v, %v) = %v", err, sentinel, got)
				}
			}
			notTenancy := (tc.status == 401 || tc.status == 403) && tc.is == tenancy.ErrTemporary
			if errors.Is(err, tenancy.ErrNotTenancy) != notTenancy {
				t.Fatalf("errors.Is(%v, ErrNotTenancy) = %v", err, !notTenancy)
			}
			first, _, _ := strings.Cut(strings.TrimSpace(tc.body), "\r\n")
			if first == "<html>" { // a line of markup alone says nothing: the next line is shown
				first = "<head><title>401 Authorization Required</title></head>"
			}
			if notTenancy && first != "" && tc.code == "" {
				if ae.FirstLine != first || !strings.Contains(err.Error(), fmt.Sprintf("HTTP %d", tc.status)) || !strings.Contains(err.Error(), strconv.Quote(first)) {
					t.Fatalf("err = %v (first line %q), want the status and the body's first line %q", err, ae.FirstLine, first)
				}
			}
			switch tc.retry {
			case "120":
				if ae.RetryAfter != 2*time.Minute {
					t.Fatalf("RetryAfter = %s", ae.RetryAfter)
				}
			case "soon":
				if ae.RetryAfter != 0 {
					t.Fatalf("RetryAfter = %s", ae.RetryAfter)
				}
			case "":
			default:
				if ae.RetryAfter != 5*time.Minute {
					t.Fatalf("RetryAfter = %s", ae.RetryAfter)
				}
			}
			if strings.Contains(err.Error(), tok) {
				t.Fatalf("error leaks the bearer: %v", err)
			}
		})
	}
}

func TestTransportFailures(t *testing.T) {
	s := setup(t)
	tok := s.token(t, "env-a")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer reset.Close()
	truncated := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "500")
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"action": "none"`))
	}))
	defer truncated.Close()
	dns := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "monky.tenancy.deploy", IsNotFound: true}}
	}}}

	for _, tc := range []struct {
		name string
		c    *tenancy.Client
	}{
		{"connection refused", tenancy.New(refused, nil)},
		{"connection reset", tenancy.New(reset.URL, nil)},
		{"body cut short", tenancy.New(truncated.URL, nil)},
		{"DNS failure", tenancy.New("http://monky.tenancy.deploy:443", dns)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
			var ae *tenancy.APIError
			if !errors.Is(err, tenancy.ErrTemporary) || !errors.As(err, &ae) || ae.Status != 0 {
				t.Fatalf("err = %v, want a temporary transport failure", err)
			}
			s.noLeak(t, err)
		})
	}

	t.Run("timeout against a stalled tenancy", func(t *testing.T) {
		arrived, release := s.ten.Stall(tenancytest.Checkin)
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		_, err := s.c.Checkin(ctx, tok, protocol.CheckinRequest{EnvID: "env-a"})
		if !errors.Is(err, tenancy.ErrTemporary) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		<-arrived
	})

	t.Run("caller cancels: not temporary", func(t *testing.T) {
		arrived, release := s.ten.Stall(tenancytest.Report)
		defer release()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.c.Report(ctx, tok, protocol.Report{EnvID: "env-a", Result: "healthy"}) }()
		<-arrived
		cancel()
		err := <-done
		if !errors.Is(err, context.Canceled) || errors.Is(err, tenancy.ErrTemporary) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a stalled call completes once released", func(t *testing.T) {
		arrived, release := s.ten.Stall(tenancytest.Checkin)
		done := make(chan error, 1)
		go func() {
			_, err := s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
			done <- err
		}()
		<-arrived
		release()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestMalformedCheckinIsAProtocolError(t *testing.T) {
	s := setup(t)
	tok := s.token(t, "env-a")
	for _, tc := range []struct{ name, body, field string }{
		{"not JSON", `<html>oops</html>`, ""},
		{"truncated JSON", `{"action": "apply", "desired_sha": "`, ""},
		{"empty", ``, ""},
		{"array", `[]`, ""},
		{"action of the wrong type", `{"action": 5}`, "action"},
		{"unknown action", `{"action": "explode"}`, "action"},
		{"missing action", `{"desired_sha": ""}`, "action"},
		{"vault.addr of the wrong type", `{"action": "none", "vault": {"addr": 7}}`, "vault.addr"},
		{"vault.addr not a URL", `{"action": "none", "vault": {"addr": "bao"}}`, "vault.addr"},
		{"purge_volumes of the wrong type", `{"action": "down", "purge_volumes": "yes"}`, "purge_volumes"},
		{"desired_sha not hex", `{"action": "apply", "desired_sha": "../../etc", "bundle_url": "/x"}`, "desired_sha"},
		{"apply without bundle_url", `{"action": "apply", "desired_sha": "` + strings.Repeat("a", 64) + `"}`, "bundle_url"},
		{"apply without desired_sha", `{"action": "apply", "bundle_url": "/x"}`, "desired_sha"},
		{"answer for another env", `{"action": "none", "env_id": "env-b"}`, "env_id"},
		{"negative interval", `{"action": "none", "checkin_interval_s": -5}`, "checkin_interval_s"},
		{"interval of -1", `{"action": "none", "checkin_interval_s": -1}`, "checkin_interval_s"},
		// encoding/json would keep the last of two keys, and fold case: tenancy writes neither.
		{"action given twice", `{"action": "none", "action": "down"}`, "action"},
		{"vault.addr given twice", `{"action": "none", "vault": {"addr": "https://a:1", "addr": "https://b:1"}}`, "vault.addr"},
		{"action in capitals only", `{"ACTION": "none"}`, "action"},
		{"apply_windows not a list", `{"action": "none", "apply_windows": "Mon-Fri 02:00-05:00"}`, "apply_windows"},
		{"apply_windows unknown day", `{"action": "none", "apply_windows": ["Sat 00:00-24:00", "Mox 02:00-05:00"]}`, "apply_windows[1]"},
		{"apply_windows 25:00", `{"action": "none", "apply_windows": ["Mon 25:00-26:00"]}`, "apply_windows[0]"},
		{"apply_windows empty window", `{"action": "none", "apply_windows": [""]}`, "apply_windows[0]"},
		{"apply_windows_tz unknown", `{"action": "none", "apply_windows": ["Mon 02:00-05:00"], "apply_windows_tz": "Mars/Base"}`, "apply_windows_tz"},
		{"apply_windows_tz alone, unknown", `{"action": "none", "apply_windows_tz": "Local"}`, "apply_windows_tz"},
		{"ignore_window not a boolean", `{"action": "none", "ignore_window": "yes"}`, "ignore_window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.ten.MalformNext(tenancytest.Checkin, tc.body, 1)
			_, err := s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
			var pe *tenancy.ProtocolError
			if !errors.As(err, &pe) || pe.Field != tc.field || errors.Is(err, tenancy.ErrTemporary) {
				t.Fatalf("err = %v, want a protocol error naming %q", err, tc.field)
			}
			if tc.field != "" && !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v does not name the field", err)
			}
		})
	}
	t.Run("a key in another case is not the field", func(t *testing.T) {
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none", "PURGE_VOLUMES": true, "Desired_Sha": "x"}`, 1)
		r, err := s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
		if err != nil || r.PurgeVolumes || r.DesiredSha != "" {
			t.Fatalf("%+v, %v", r, err)
		}
	})
	t.Run("an interval of 0 is no interval, not an error", func(t *testing.T) {
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none", "checkin_interval_s": 0}`, 1)
		if r, err := s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"}); err != nil || r.CheckinIntervalS != 0 {
			t.Fatalf("%+v, %v", r, err)
		}
	})
	t.Run("apply windows and ignore_window", func(t *testing.T) {
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none", "apply_windows": ["Mon-Fri 02:00-05:00"], "apply_windows_tz": "Europe/Berlin", "ignore_window": true}`, 1)
		r, err := s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
		if err != nil || !r.IgnoreWindow {
			t.Fatalf("%+v, %v", r, err)
		}
		sched, err := tenancy.Windows(r, []string{"Sat 00:00-24:00"}, "UTC")
		if err != nil || sched.String() != "Mon-Fri 02:00-05:00 (Europe/Berlin)" {
			t.Fatalf("windows %v, %v", sched, err)
		}
		// An empty list replaces the config's windows with none; no field at all keeps them.
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none", "apply_windows": []}`, 1)
		r, _ = s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
		if sched, err := tenancy.Windows(r, []string{"Sat 00:00-24:00"}, "UTC"); err != nil || !sched.Empty() {
			t.Fatalf("an empty list: %v, %v", sched, err)
		}
		// A zone alone moves the config's windows into it; no field at all keeps both.
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none", "apply_windows_tz": "Asia/Tokyo"}`, 1)
		r, _ = s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
		if sched, err := tenancy.Windows(r, []string{"Sat 00:00-24:00"}, "UTC"); err != nil || sched.String() != "Sat 00:00-24:00 (Asia/Tokyo)" {
			t.Fatalf("a zone alone: %v, %v", sched, err)
		}
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none"}`, 1)
		r, _ = s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
		if sched, err := tenancy.Windows(r, []string{"Sat 00:00-24:00"}, "UTC"); err != nil || sched.String() != "Sat 00:00-24:00 (UTC)" {
			t.Fatalf("no field: %v, %v", sched, err)
		}
	})
	t.Run("unknown fields are ignored", func(t *testing.T) {
		s.ten.MalformNext(tenancytest.Checkin, `{"action": "none", "brand_new": {"x": [1]}, "vault": {"addr": "https://b:1", "future": true}}`, 1)
		r, err := s.c.Checkin(context.Background(), tok, protocol.CheckinRequest{EnvID: "env-a"})
		if err != nil || r.Vault.Addr != "https://b:1" {
			t.Fatalf("%+v, %v", r, err)
		}
	})
}

func TestReport(t *testing.T) {
	s := setup(t)
	tok := s.token(t, "env-a")
	rep := protocol.Report{EnvID: "env-a", Sha: strings.Repeat("c", 64), Result: protocol.ResultApplied, Detail: "applied",
		AgentVersion: "0.2.0", Containers: []protocol.Container{{Service: "api", Name: "monky-env-a-api-1", State: "running", Health: "healthy"}}}
	if err := s.c.Report(context.Background(), tok, rep); err != nil {
		t.Fatal(err)
	}
	got, ok := s.ten.LastReport("env-a")
	if !ok || got.Sha != rep.Sha || got.Result != rep.Result || len(got.Containers) != 1 || got.Containers[0] != rep.Containers[0] {
		t.Fatalf("report = %+v", got)
	}
}

func TestRequestsCarryTheBearerAndNothingElse(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization")+" "+r.Header.Get("User-Agent"))
		mu.Unlock()
		_, _ = w.Write([]byte(`{"action":"none"}`))
	}))
	defer srv.Close()
	c := tenancy.New(srv.URL+"/prefix", nil)
	c.UserAgent = "monky-deployd/0.2.0"
	if _, err := c.Checkin(context.Background(), secret.New("s.tok"), protocol.CheckinRequest{EnvID: "env-a"}); err != nil {
		t.Fatal(err)
	}
	if want := "POST /prefix/v1/agent/checkin Bearer s.tok monky-deployd/0.2.0"; len(seen) != 1 || seen[0] != want {
		t.Fatalf("seen %q, want %q", seen, want)
	}
	if _, err := c.Checkin(context.Background(), secret.Value{}, protocol.CheckinRequest{EnvID: "env-a"}); err == nil || len(seen) != 1 {
		t.Fatalf("empty token: err=%v, requests=%d", err, len(seen))
	}
	for _, bad := range []string{"", "monky.tenancy.deploy:443", "ftp://x", "http://", "http://a b"} {
		if _, err := tenancy.New(bad, nil).Checkin(context.Background(), secret.New("s.tok"), protocol.CheckinRequest{EnvID: "env-a"}); err == nil {
			t.Fatalf("base URL %q accepted", bad)
		}
	}
}

func TestManyAgentsAtOnce(t *testing.T) {
	s := setup(t)
	const n = 8
	toks := make([]secret.Value, n)
	for i := range n {
		env := fmt.Sprintf("env-%02d", i)
		toks[i] = s.token(t, env)
		s.ten.SetDesired(env, map[string]string{"bundle.json": env})
	}
	var wg sync.WaitGroup
	errs := make(chan error, n*3)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := fmt.Sprintf("env-%02d", i)
			ctx := context.Background()
			r, err := s.c.Checkin(ctx, toks[i], protocol.CheckinRequest{EnvID: env})
			if err != nil {
				errs <- err
				return
			}
			f, _, err := s.c.Bundle(ctx, toks[i], r.BundleURL)
			if err != nil || f["bundle.json"] != env {
				errs <- fmt.Errorf("%s: bundle %v %v", env, f, err)
				return
			}
			if _, err := s.c.Lease(ctx, toks[i], env, "apply"); err != nil {
				errs <- err
			}
			errs <- s.c.Report(ctx, toks[i], protocol.Report{EnvID: env, Sha: r.DesiredSha, Result: protocol.ResultApplied})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(s.ten.Checkins("")) != n || len(s.ten.Reports("")) != n || len(s.ten.Leases("env-03")) != 1 {
		t.Fatal("records missing")
	}
}

// A redirect to the same host on another port would get the token resent by Go's client: no
// call follows one, and the error names where it pointed (not the query it carried).
func TestNoCallFollowsARedirect(t *testing.T) {
	var stolen sync.Map
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Store(r.URL.Path, r.Header.Get("Authorization"))
	}))
	defer target.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/login?next="+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer origin.Close()
	c := tenancy.New(origin.URL, nil)
	tok := secret.New("s.agent-token-value")
	ctx := context.Background()
	calls := map[string]func() error{
		"checkin": func() error { _, err := c.Checkin(ctx, tok, protocol.CheckinRequest{EnvID: "env-a"}); return err },
		"bundle":  func() error { _, _, err := c.Bundle(ctx, tok, "/v1/agent/bundle/x"); return err },
		"lease":   func() error { _, err := c.Lease(ctx, tok, "env-a", "apply"); return err },
		"report":  func() error { return c.Report(ctx, tok, protocol.Report{EnvID: "env-a"}) },
	}
	for name, call := range calls {
		err := call()
		want := "refusing to send the token to " + target.URL + "/login"
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "next=") {
			t.Errorf("%s: err = %v, want it to say %q", name, err, want)
		}
		if errors.Is(err, tenancy.ErrTemporary) || errors.Is(err, tenancy.ErrUnauthenticated) {
			t.Errorf("%s: a redirect is neither temporary nor unauthenticated: %v", name, err)
		}
	}
	stolen.Range(func(k, v any) bool {
		t.Errorf("the redirect target got %v with Authorization %q", k, v)
		return true
	})
}
