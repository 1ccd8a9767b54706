package bao_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"

	"github.com/golang-jwt/jwt/v5"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 9, 7, 10, 0, 0, 0, time.UTC)} }

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

type env struct {
	clk    *clock
	signer *grant.Signer
	fake   *baotest.Server
	client *bao.Client
}

func setup(t *testing.T, opts ...func(*baotest.Options)) *env {
	t.Helper()
	clk := newClock()
	signer, err := grant.NewSigner("tenancy-test")
	if err != nil {
		t.Fatal(err)
	}
	signer.Clock = clk.Now
	o := baotest.Options{PublicKey: signer.PublicKey(), Clock: clk.Now}
	for _, f := range opts {
		f(&o)
	}
	fake := baotest.Start(o)
	t.Cleanup(fake.Close)
	c, err := bao.New(bao.Options{Addr: fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	return &env{clk: clk, signer: signer, fake: fake, client: c}
}

func (e *env) grant(t *testing.T, envID string) secret.Value {
	t.Helper()
	g, _, err := e.signer.Sign(envID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return secret.New(g)
}

// noLeak fails when err's text contains any of the secrets.
func noLeak(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range secrets {
		if s != "" && strings.Contains(err.Error(), s) {
			t.Fatalf("error leaks a secret: %v", err)
		}
	}
}

func TestLoginAndTokenLifecycle(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	g := e.grant(t, "env-qa-02")
	tok, err := e.client.Login(ctx, "jwt-tenancy", "see-env", g)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Value.Empty() || tok.Accessor == "" || tok.TTL != 24*time.Hour || !tok.Renewable {
		t.Fatalf("token = %+v", tok)
	}
	if tok.Value.String() != "***" {
		t.Fatal("token value prints")
	}

	info, err := e.client.LookupSelf(ctx, tok.Value)
	if err != nil {
		t.Fatal(err)
	}
	if info.TTL != 24*time.Hour || !info.Renewable || info.Meta["env_id"] != "env-qa-02" || info.Meta["grant_jti"] == "" || info.Meta["role"] != "see-env" {
		t.Fatalf("info = %+v", info)
	}
	if _, ok := info.Meta["id"]; ok {
		t.Fatal("lookup-self's token id leaked into Meta")
	}

	e.fake.SetTTL(tok.Value.Reveal(), 10*time.Minute)
	info, err = e.client.LookupSelf(ctx, tok.Value)
	if err != nil || info.TTL != 10*time.Minute {
		t.Fatalf("after SetTTL: %+v, %v", info, err)
	}

	e.clk.Advance(time.Minute)
	ren, err := e.client.RenewSelf(ctx, tok.Value)
	if err != nil {
		t.Fatal(err)
	}
	if ren.TTL != 24*time.Hour || ren.Value.Reveal() != tok.Value.Reveal() || e.fake.Renews() != 1 {
		t.Fatalf("renewed = %+v, renews=%d", ren, e.fake.Renews())
	}

	if err := e.client.RevokeSelf(ctx, tok.Value); err != nil {
		t.Fatal(err)
	}
	if e.fake.Revokes() != 1 {
		t.Fatalf("revokes = %d", e.fake.Revokes())
	}
	for name, call := range map[string]func() error{
		"lookup": func() error { _, err := e.client.LookupSelf(ctx, tok.Value); return err },
		"renew":  func() error { _, err := e.client.RenewSelf(ctx, tok.Value); return err },
		"revoke": func() error { return e.client.RevokeSelf(ctx, tok.Value) },
		"read": func() error {
			_, err := e.client.ReadKV(ctx, tok.Value, "monky", "env-qa-02/see/x", 0, "value")
			return err
		},
	} {
		t.Run("revoked token: "+name, func(t *testing.T) {
			err := call()
			if !errors.Is(err, bao.ErrForbidden) {
				t.Fatalf("err = %v, want ErrForbidden", err)
			}
			noLeak(t, err, tok.Value.Reveal(), g.Reveal())
		})
	}
}

func TestGrantLogsInUntilExpiry(t *testing.T) {
	// The jwt mount keeps no replay state: one grant logs in twice (tenancy, not OpenBao,
	// refuses a superseded grant's token).
	e := setup(t)
	g := e.grant(t, "env-a")
	a, err := e.client.Login(context.Background(), "jwt-tenancy", "see-env", g)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.client.Login(context.Background(), "jwt-tenancy", "see-env", g)
	if err != nil {
		t.Fatal(err)
	}
	if a.Value.Reveal() == b.Value.Reveal() || e.fake.Logins() != 2 {
		t.Fatalf("two logins gave one token or logins=%d", e.fake.Logins())
	}
	e.clk.Advance(time.Hour)
	_, err = e.client.Login(context.Background(), "jwt-tenancy", "see-env", g)
	if !errors.Is(err, bao.ErrLoginRefused) {
		t.Fatalf("expired grant: %v", err)
	}
}

func TestLoginRefused(t *testing.T) {
	e := setup(t)
	other, err := grant.NewSigner("impostor")
	if err != nil {
		t.Fatal(err)
	}
	other.Clock = e.clk.Now
	foreign, _, _ := other.Sign("env-a", time.Hour)
	expired, _, _ := e.signer.Sign("env-a", time.Second)
	raw := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, c).SignedString(e.signer.Key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	now := e.clk.Now()
	base := jwt.MapClaims{"aud": grant.Audience, "sub": "agent:env-a", "env_id": "env-a", "kind": grant.Kind,
		"jti": "j", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	wrongAud := jwt.MapClaims{}
	wrongKind := jwt.MapClaims{}
	for k, v := range base {
		wrongAud[k], wrongKind[k] = v, v
	}
	wrongAud["aud"] = "vault"
	wrongKind["kind"] = "bootstrap"
	e.clk.Advance(2 * time.Second)

	for _, tc := range []struct {
		name, role, jwt, want string
	}{
		{"foreign signature", "see-env", foreign, "signature"},
		{"expired", "see-env", expired, "expired"},
		{"wrong audience", "see-env", raw(wrongAud), "audience"},
		{"wrong kind", "see-env", raw(wrongKind), "bound claim"},
		{"wrong role", "deployer", e.grant(t, "env-a").Reveal(), `role "deployer" could not be found`},
		{"garbage", "see-env", "not-a-jwt-but-long-enough", "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.client.Login(context.Background(), "jwt-tenancy", tc.role, secret.New(tc.jwt))
			if !errors.Is(err, bao.ErrLoginRefused) || errors.Is(err, bao.ErrTemporary) {
				t.Fatalf("err = %v, want ErrLoginRefused only", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want OpenBao's message containing %q", err, tc.want)
			}
			noLeak(t, err, tc.jwt)
		})
	}
	if e.fake.Logins() != 0 {
		t.Fatalf("logins = %d", e.fake.Logins())
	}
}

func TestLoginErrorNeverEchoesTheGrant(t *testing.T) {
	// A server (or a proxy in front of it) that quotes the request back must not carry the
	// grant into the agent's journal.
	g := "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhZ2VudDplbnYtYSJ9.c2lnbmF0dXJl"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"errors":["error validating token: cannot parse ` + g + `"]}`))
	}))
	defer srv.Close()
	c, err := bao.New(bao.Options{Addr: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Login(context.Background(), "jwt-tenancy", "see-env", secret.New(g))
	if !errors.Is(err, bao.ErrLoginRefused) || !strings.Contains(err.Error(), "cannot parse ***") {
		t.Fatalf("err = %v", err)
	}
	noLeak(t, err, g)
}

func TestReadKV(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	tok := secret.New(e.fake.IssueToken("env-a", "jti-1"))
	v1 := e.fake.Put("env-a", "gemini", "value", "gemini-secret-v1")
	v2 := e.fake.Put("env-a", "gemini", "value", "gemini-secret-v2")
	e.fake.Put("env-a", "gemini", "other", "gemini-other")
	e.fake.PutData("env-a/see/weird", map[string]any{"n": 42.5, "obj": map[string]any{"p": "hidden-in-object"}})
	e.fake.Put("env-b", "gemini", "value", "env-b-secret")
	e.fake.Put("env-a", "gone", "value", "deleted-secret")
	e.fake.DeleteVersion("env-a/see/gone", 1)
	allSecrets := []string{tok.Reveal(), "gemini-secret-v1", "gemini-secret-v2", "gemini-other", "hidden-in-object", "42.5", "env-b-secret", "deleted-secret"}

	for _, tc := range []struct {
		name    string
		path    string
		version int
		key     string
		want    string
		wantErr error
		inErr   []string
	}{
		{"latest", "env-a/see/gemini", 0, "value", "gemini-secret-v2", nil, nil},
		{"version 1", "env-a/see/gemini", v1, "value", "gemini-secret-v1", nil, nil},
		{"version 2", "env-a/see/gemini", v2, "value", "gemini-secret-v2", nil, nil},
		{"other key", "env-a/see/gemini", 0, "other", "gemini-other", nil, nil},
		{"missing version", "env-a/see/gemini", 9, "value", "", bao.ErrNotFound, []string{`"env-a/see/gemini"`, "version 9"}},
		{"missing path", "env-a/see/nope", 0, "value", "", bao.ErrNotFound, []string{`"env-a/see/nope"`}},
		{"missing key", "env-a/see/gemini", 1, "password", "", bao.ErrNotFound, []string{`"env-a/see/gemini"`, `"password"`}},
		{"deleted version", "env-a/see/gone", 1, "value", "", bao.ErrNotFound, []string{`"env-a/see/gone"`, "version 1"}},
		{"number value", "env-a/see/weird", 0, "n", "", nil, []string{`"env-a/see/weird"`, `"n"`, "number"}},
		{"object value", "env-a/see/weird", 0, "obj", "", nil, []string{`"env-a/see/weird"`, `"obj"`, "object"}},
		{"another env's path", "env-b/see/gemini", 0, "value", "", bao.ErrForbidden, []string{`"env-b/see/gemini"`}},
		{"outside see/", "env-a/gemini", 0, "value", "", bao.ErrForbidden, []string{`"env-a/gemini"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := e.client.ReadKV(ctx, tok, "monky", tc.path, tc.version, tc.key)
			if tc.want != "" {
				if err != nil || v.Reveal() != tc.want {
					t.Fatalf("ReadKV = %q, %v; want %q", v.Reveal(), err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ReadKV succeeded with %d bytes", len(v.Reveal()))
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if errors.Is(err, bao.ErrTemporary) {
				t.Fatalf("err = %v is not temporary", err)
			}
			for _, s := range tc.inErr {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("err = %v, want it to name %s", err, s)
				}
			}
			noLeak(t, err, allSecrets...)
		})
	}
}

func TestReadKVRefusesUncleanPathsWithoutAsking(t *testing.T) {
	e := setup(t)
	tok := secret.New(e.fake.IssueToken("env-a", "j"))
	for _, tc := range []struct{ mount, path string }{
		{"monky", "env-a/see/../../other"},
		{"monky", "/env-a/see/x"},
		{"monky", "env-a/see//x"},
		{"monky", "env-a/see/x?version=1"},
		{"monky", ""},
		{"", "env-a/see/x"},
		{"../sys", "env-a/see/x"},
	} {
		t.Run(tc.mount+":"+tc.path, func(t *testing.T) {
			if _, err := e.client.ReadKV(context.Background(), tok, tc.mount, tc.path, 0, "value"); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := e.client.ReadKV(context.Background(), tok, "monky", "env-a/see/x", -1, "value"); err == nil {
		t.Fatal("negative version accepted")
	}
	if _, err := e.client.ReadKV(context.Background(), tok, "monky", "env-a/see/x", 0, ""); err == nil {
		t.Fatal("empty key accepted")
	}
	if _, err := e.client.ReadMany(context.Background(), tok, "monky", []bao.KVRequest{{Name: "A", Path: "env-a/see/x"}}, 1); err == nil {
		t.Fatal("empty key accepted by ReadMany")
	}
	if e.fake.Reads() != 0 {
		t.Fatalf("reads = %d", e.fake.Reads())
	}
}

func TestTemporaryFailures(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	tok := secret.New(e.fake.IssueToken("env-a", "j"))
	e.fake.Put("env-a", "db", "value", "db-secret")
	for _, tc := range []struct {
		name   string
		path   string
		status int
		call   func() error
		want   error
	}{
		{"read 500", "/v1/monky/data/env-a/see/db", 500, func() error { _, err := e.client.ReadKV(ctx, tok, "monky", "env-a/see/db", 0, "value"); return err }, bao.ErrTemporary},
		{"read 503", "/v1/monky/data/env-a/see/db", 503, func() error { _, err := e.client.ReadKV(ctx, tok, "monky", "env-a/see/db", 0, "value"); return err }, bao.ErrTemporary},
		{"read 429", "/v1/monky/data/env-a/see/db", 429, func() error { _, err := e.client.ReadKV(ctx, tok, "monky", "env-a/see/db", 0, "value"); return err }, bao.ErrTemporary},
		{"read 403", "/v1/monky/data/env-a/see/db", 403, func() error { _, err := e.client.ReadKV(ctx, tok, "monky", "env-a/see/db", 0, "value"); return err }, bao.ErrForbidden},
		{"lookup 502", "/v1/auth/token/lookup-self", 502, func() error { _, err := e.client.LookupSelf(ctx, tok); return err }, bao.ErrTemporary},
		{"renew 500", "/v1/auth/token/renew-self", 500, func() error { _, err := e.client.RenewSelf(ctx, tok); return err }, bao.ErrTemporary},
		{"revoke 500", "/v1/auth/token/revoke-self", 500, func() error { return e.client.RevokeSelf(ctx, tok) }, bao.ErrTemporary},
		{"login 500", "/v1/auth/jwt-tenancy/login", 500, func() error {
			_, err := e.client.Login(ctx, "jwt-tenancy", "see-env", e.grant(t, "env-a"))
			return err
		}, bao.ErrTemporary},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.fake.FailNext(tc.path, tc.status, 1)
			err := tc.call()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			noLeak(t, err, tok.Reveal(), "db-secret")
			if err := tc.call(); err != nil {
				t.Fatalf("second call (failure injected once): %v", err)
			}
		})
	}
}

func TestNetworkFailuresAreTemporary(t *testing.T) {
	tok := secret.New("s.network-test-token")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()

	reset := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	defer reset.Close()

	stall := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(stall)

	dnsFail := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no such host", Name: "bao.invalid", IsNotFound: true}}
	}}}

	for _, tc := range []struct {
		name    string
		opts    bao.Options
		timeout time.Duration
	}{
		{"connection refused", bao.Options{Addr: refused}, 0},
		{"connection reset", bao.Options{Addr: reset.URL}, 0},
		{"DNS failure", bao.Options{Addr: "http://bao.invalid:8200", HTTPClient: dnsFail}, 0},
		{"timeout", bao.Options{Addr: slow.URL, Timeout: 20 * time.Millisecond}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := bao.New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.ReadKV(context.Background(), tok, "monky", "env-a/see/db", 2, "value")
			if !errors.Is(err, bao.ErrTemporary) {
				t.Fatalf("err = %v, want ErrTemporary", err)
			}
			if !strings.Contains(err.Error(), `"env-a/see/db" version 2`) {
				t.Fatalf("err = %v does not name the path", err)
			}
			noLeak(t, err, tok.Reveal())
		})
	}

	t.Run("caller cancelled", func(t *testing.T) {
		c, err := bao.New(bao.Options{Addr: slow.URL})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = c.LookupSelf(ctx, tok)
		if !errors.Is(err, context.Canceled) || errors.Is(err, bao.ErrTemporary) {
			t.Fatalf("err = %v, want context.Canceled and not temporary", err)
		}
	})
}

func TestMalformedAnswerIsNotTemporary(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"data": {"data": nope}}`))
	}))
	defer srv.Close()
	c, err := bao.New(bao.Options{Addr: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.ReadKV(context.Background(), secret.New("s.tok-malformed"), "monky", "env-a/see/db", 0, "value")
	if err == nil || errors.Is(err, bao.ErrTemporary) {
		t.Fatalf("err = %v, want a non-temporary error", err)
	}
}

func TestReadMany(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	tok := secret.New(e.fake.IssueToken("env-a", "j"))
	var reqs []bao.KVRequest
	want := map[string]string{}
	for i := range 12 {
		name := "VAR_" + string(rune('A'+i))
		val := "secret-value-" + name
		e.fake.Put("env-a", strings.ToLower(name), "value", val)
		reqs = append(reqs, bao.KVRequest{Name: name, Path: "env-a/see/" + strings.ToLower(name), Key: "value"})
		want[name] = val
	}
	e.fake.Put("env-a", "registry", "username", "robot")
	e.fake.Put("env-a", "registry", "password", "registry-password")
	reqs = append(reqs,
		bao.KVRequest{Name: "REG_USER", Path: "env-a/see/registry", Key: "username"},
		bao.KVRequest{Name: "REG_PASS", Path: "env-a/see/registry", Key: "password"})
	want["REG_USER"], want["REG_PASS"] = "robot", "registry-password"

	got, err := e.client.ReadMany(ctx, tok, "monky", reqs, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d values, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k].Reveal() != v {
			t.Fatalf("%s = %q, want %q", k, got[k].Reveal(), v)
		}
	}
	if n := e.fake.ReadsOf("env-a/see/registry"); n != 1 {
		t.Fatalf("registry read %d times, want once for both keys", n)
	}
	if e.fake.MaxInFlight() > 4 {
		t.Fatalf("max in flight %d > limit 4", e.fake.MaxInFlight())
	}

	t.Run("duplicate names", func(t *testing.T) {
		_, err := e.client.ReadMany(ctx, tok, "monky", []bao.KVRequest{reqs[0], reqs[0]}, 2)
		if err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("empty", func(t *testing.T) {
		got, err := e.client.ReadMany(ctx, tok, "monky", nil, 2)
		if err != nil || len(got) != 0 {
			t.Fatalf("%v, %v", got, err)
		}
	})
}

func TestReadManyIsBoundedByLimit(t *testing.T) {
	e := setup(t)
	tok := secret.New(e.fake.IssueToken("env-a", "j"))
	var reqs []bao.KVRequest
	for i := range 20 {
		p := "k" + string(rune('a'+i))
		e.fake.Put("env-a", p, "value", "v")
		reqs = append(reqs, bao.KVRequest{Name: p, Path: "env-a/see/" + p, Key: "value"})
	}
	const limit = 3
	arrived, release := e.fake.HoldReads()
	defer release()
	done := make(chan error, 1)
	go func() {
		_, err := e.client.ReadMany(context.Background(), tok, "monky", reqs, limit)
		done <- err
	}()
	// limit reads are held in flight at once; only then are they let go.
	for range limit {
		<-arrived
	}
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := e.fake.MaxInFlight(); got != limit {
		t.Fatalf("max in flight = %d, want exactly %d", got, limit)
	}
	if e.fake.Reads() != 20 {
		t.Fatalf("reads = %d", e.fake.Reads())
	}
}

func TestReadManyFirstErrorCancelsTheRest(t *testing.T) {
	e := setup(t)
	tok := secret.New(e.fake.IssueToken("env-a", "j"))
	e.fake.Put("env-a", "slow1", "value", "v")
	e.fake.Put("env-a", "slow2", "value", "v")
	e.fake.Put("env-b", "theirs", "value", "not-yours")
	_, release := e.fake.HoldReads()
	defer release()
	reqs := []bao.KVRequest{
		{Name: "A", Path: "env-a/see/slow1", Key: "value"},
		{Name: "B", Path: "env-a/see/slow2", Key: "value"},
		{Name: "C", Path: "env-b/see/theirs", Key: "value"},
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.client.ReadMany(context.Background(), tok, "monky", reqs, 3)
		done <- err
	}()
	// The held reads are never released: ReadMany can only return because the 403 on C
	// cancelled them (before or after they reached the hold: waiting here for both to arrive
	// hung when C's 403 came first and cancelled them on the way).
	err := <-done
	if !errors.Is(err, bao.ErrForbidden) || !strings.Contains(err.Error(), "env-b/see/theirs") {
		t.Fatalf("err = %v", err)
	}
	noLeak(t, err, "not-yours", tok.Reveal())
}

func TestConcurrentReadsWithOneToken(t *testing.T) {
	// Run with -race: one token, many goroutines, one Client.
	e := setup(t)
	a := secret.New(e.fake.IssueToken("env-a", "j1"))
	b := secret.New(e.fake.IssueToken("env-b", "j2"))
	e.fake.Put("env-a", "x", "value", "va")
	e.fake.Put("env-b", "x", "value", "vb")
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, env, want := a, "env-a", "va"
			if i%2 == 1 {
				tok, env, want = b, "env-b", "vb"
			}
			v, err := e.client.ReadKV(context.Background(), tok, "monky", env+"/see/x", 0, "value")
			if err != nil || v.Reveal() != want {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d reads went out with the wrong token", bad.Load())
	}
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// selfSignedPEM is a CA certificate that signed nothing the fake serves (httptest's servers all
// share one certificate, so another fake is no "other CA").
func selfSignedPEM(t *testing.T) []byte {
	t.Helper()
	return testpki.NewCA(t, "other CA").PEM
}

func TestTLS(t *testing.T) {
	clk := newClock()
	fake := baotest.StartTLS(baotest.Options{Clock: clk.Now})
	defer fake.Close()
	tok := fake.IssueToken("env-a", "j")

	goodCA := writeFile(t, "ca.pem", fake.CAPEM())
	wrongCA := writeFile(t, "wrong.pem", selfSignedPEM(t))
	garbage := writeFile(t, "garbage.pem", []byte("not a certificate"))
	missing := filepath.Join(t.TempDir(), "absent.pem")
	fifo := filepath.Join(t.TempDir(), "fifo.pem") // a plain open would wait for a writer
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}

	for _, tc := range []struct {
		name    string
		opts    bao.Options
		newErr  bool
		wantTLS bool
	}{
		{"right CA", bao.Options{Addr: fake.URL, CAFile: goodCA}, false, false},
		{"right CA, server name of the certificate", bao.Options{Addr: fake.URL, CAFile: goodCA, ServerName: "example.com"}, false, false},
		{"right CA, wrong server name", bao.Options{Addr: fake.URL, CAFile: goodCA, ServerName: "bao.cbs.tikali.net"}, false, true},
		{"CA of another server", bao.Options{Addr: fake.URL, CAFile: wrongCA}, false, true},
		{"absent CA file: system roots", bao.Options{Addr: fake.URL, CAFile: missing}, false, true},
		{"no CA file: system roots", bao.Options{Addr: fake.URL}, false, true},
		{"caller asks for InsecureSkipVerify", bao.Options{Addr: fake.URL, HTTPClient: insecure}, false, true},
		{"CA file that holds no certificate", bao.Options{Addr: fake.URL, CAFile: garbage}, true, false},
		{"a FIFO in the CA file's place", bao.Options{Addr: fake.URL, CAFile: fifo}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := bao.New(tc.opts)
			if tc.newErr {
				if err == nil {
					t.Fatal("New accepted it")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.LookupSelf(context.Background(), secret.New(tok))
			switch {
			case tc.wantTLS && (!errors.Is(err, bao.ErrTLS) || errors.Is(err, bao.ErrTemporary)):
				t.Fatalf("err = %v, want ErrTLS (not temporary)", err)
			case !tc.wantTLS && err != nil:
				t.Fatalf("err = %v", err)
			}
			noLeak(t, err, tok)
		})
	}
	if tr := insecure.Transport.(*http.Transport); !tr.TLSClientConfig.InsecureSkipVerify {
		t.Fatal("New modified the caller's transport")
	}
}

func TestCustomDialerIsUsed(t *testing.T) {
	// The transport package hands over an *http.Transport whose DialContext goes through ziti;
	// the client must keep it (the address stays the intercept name).
	e := setup(t)
	var dials atomic.Int32
	target := strings.TrimPrefix(e.fake.URL, "http://")
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != "bao.cbs.tikali.net:8200" {
			t.Errorf("dialled %s", addr)
		}
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, target)
	}}}
	c, err := bao.New(bao.Options{Addr: "http://bao.cbs.tikali.net:8200", HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	tok := secret.New(e.fake.IssueToken("env-a", "j"))
	if _, err := c.LookupSelf(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	if dials.Load() == 0 {
		t.Fatal("custom DialContext not used")
	}

	type rt struct{ http.RoundTripper }
	if _, err := bao.New(bao.Options{Addr: "http://x:1", HTTPClient: &http.Client{Transport: rt{}}}); err == nil {
		t.Fatal("a non-*http.Transport was accepted")
	}
	for _, addr := range []string{"", "bao.cbs.tikali.net:8200", "ftp://x", "http://"} {
		if _, err := bao.New(bao.Options{Addr: addr}); err == nil {
			t.Fatalf("address %q accepted", addr)
		}
	}
}

func TestEnvironmentIsIgnored(t *testing.T) {
	e := setup(t)
	decoy := baotest.Start(baotest.Options{})
	defer decoy.Close()
	envTok := e.fake.IssueToken("env-a", "env-token")
	e.fake.Put("env-a", "x", "value", "v")
	tlsFake := baotest.StartTLS(baotest.Options{})
	defer tlsFake.Close()
	ca := writeFile(t, "ca.pem", tlsFake.CAPEM())

	for _, prefix := range []string{"BAO_", "VAULT_"} {
		t.Setenv(prefix+"ADDR", decoy.URL)
		t.Setenv(prefix+"TOKEN", envTok)
		t.Setenv(prefix+"NAMESPACE", "decoy-ns")
		t.Setenv(prefix+"WRAP_TTL", "5m")
		t.Setenv(prefix+"SKIP_VERIFY", "true")
		t.Setenv(prefix+"CACERT", ca)
		t.Setenv(prefix+"TLS_SERVER_NAME", "example.com")
	}
	c, err := bao.New(bao.Options{Addr: e.fake.URL})
	if err != nil {
		t.Fatal(err)
	}
	// No token given: the env token must not be sent.
	if _, err := c.LookupSelf(context.Background(), secret.Value{}); !errors.Is(err, bao.ErrForbidden) {
		t.Fatalf("empty token: err = %v, want ErrForbidden (BAO_TOKEN must not be used)", err)
	}
	// A given token goes to Options.Addr, unwrapped, without a namespace.
	v, err := c.ReadKV(context.Background(), secret.New(envTok), "monky", "env-a/see/x", 0, "value")
	if err != nil || v.Reveal() != "v" {
		t.Fatalf("read = %q, %v", v.Reveal(), err)
	}
	if decoy.Lookups() != 0 || decoy.Reads() != 0 {
		t.Fatal("BAO_ADDR was used")
	}

	// BAO_SKIP_VERIFY and BAO_CACERT do not reach the TLS config.
	tc, err := bao.New(bao.Options{Addr: tlsFake.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.LookupSelf(context.Background(), secret.New(envTok)); !errors.Is(err, bao.ErrTLS) {
		t.Fatalf("TLS with BAO_SKIP_VERIFY/BAO_CACERT set: err = %v, want ErrTLS", err)
	}
}

func TestMalformedEnvironmentIsNamed(t *testing.T) {
	// The api library cannot be kept from parsing these; a bad one must at least be named.
	t.Setenv("BAO_MAX_RETRIES", "abc")
	_, err := bao.New(bao.Options{Addr: "http://127.0.0.1:8200"})
	if err == nil || !strings.Contains(err.Error(), "BAO_*/VAULT_*") {
		t.Fatalf("err = %v", err)
	}
}

func BenchmarkReadMany(b *testing.B) {
	signer, err := grant.NewSigner("bench")
	if err != nil {
		b.Fatal(err)
	}
	fake := baotest.Start(baotest.Options{PublicKey: signer.PublicKey(), ReadLatency: 2 * time.Millisecond})
	defer fake.Close()
	c, err := bao.New(bao.Options{Addr: fake.URL})
	if err != nil {
		b.Fatal(err)
	}
	tok := secret.New(fake.IssueToken("env-a", "j"))
	var reqs []bao.KVRequest
	for i := range 24 {
		p := "k" + string(rune('a'+i))
		fake.Put("env-a", p, "value", "v")
		reqs = append(reqs, bao.KVRequest{Name: p, Path: "env-a/see/" + p, Key: "value"})
	}
	for _, limit := range []int{1, 8} {
		b.Run("limit="+string(rune('0'+limit)), func(b *testing.B) {
			for b.Loop() {
				if _, err := c.ReadMany(context.Background(), tok, "monky", reqs, limit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// serviceDialer routes ziti service names to loopback addresses, as the SDK context would to
// their terminators.
type serviceDialer map[string]string

func (d serviceDialer) DialService(ctx context.Context, service string) (net.Conn, error) {
	addr, ok := d[service]
	if !ok {
		return nil, errors.New("service '" + service + "' not found")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

func (serviceDialer) Close() error { return nil }

// TestTLSOverTheSDKTransport is OpenBao as the box reaches it in sdk mode, composed as the
// command wires it: https://bao.cbs.tikali.net:8200 dialled as ziti service openbao, the
// certificate checked against bao.ca_file and the given server name.
func TestTLSOverTheSDKTransport(t *testing.T) {
	fake := baotest.StartTLS(baotest.Options{})
	defer fake.Close()
	tok := fake.IssueToken("env-a", "j")
	goodCA := writeFile(t, "ca.pem", fake.CAPEM())
	wrongCA := writeFile(t, "wrong.pem", selfSignedPEM(t))
	tr, err := transport.New(transport.Options{Mode: transport.ModeSDK, TenancyService: "monky.tenancy.deploy",
		TenancyHostPort: "monky.tenancy.deploy:443", BaoService: "openbao", BaoHostPort: "bao.cbs.tikali.net:8200",
		Dialer: serviceDialer{"openbao": strings.TrimPrefix(fake.URL, "https://")}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, tc := range []struct {
		name, caFile, serverName string
		ok                       bool
	}{
		{"right CA and name", goodCA, "example.com", true},
		{"right CA, the intercept name the certificate lacks", goodCA, "bao.cbs.tikali.net", false},
		{"another CA", wrongCA, "example.com", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := bao.New(bao.Options{Addr: "https://bao.cbs.tikali.net:8200", HTTPClient: &http.Client{Transport: tr.HTTPTransport()},
				CAFile: tc.caFile, ServerName: tc.serverName})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.LookupSelf(context.Background(), secret.New(tok))
			if tc.ok && err != nil {
				t.Fatalf("lookup-self: %v", err)
			}
			if !tc.ok && !errors.Is(err, bao.ErrTLS) {
				t.Fatalf("err = %v, want ErrTLS", err)
			}
			noLeak(t, err, tok)
		})
	}
}

// OpenBao's api library resends the request, token header and login body included, to wherever
// a 301/302/307 points: a redirect to the same host on another port gets nothing, and the
// error names the target without its query.
func TestNoCallFollowsARedirect(t *testing.T) {
	var stolen atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"auth": {"client_token": "s.fake", "lease_duration": 3600}, "data": {"data": {"value": "x"}}}`))
	}))
	defer target.Close()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+r.URL.Path+"?via=standby", code)
		}))
		c, err := bao.New(bao.Options{Addr: origin.URL})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		tok := secret.New("s.agent-token-value")
		grant := secret.New("eyJ.grant.sig")
		for name, call := range map[string]func() error{
			"login":  func() error { _, err := c.Login(ctx, "jwt-tenancy", "see-env", grant); return err },
			"lookup": func() error { _, err := c.LookupSelf(ctx, tok); return err },
			"read":   func() error { _, err := c.ReadKV(ctx, tok, "monky", "env-a/see/db", 0, "value"); return err },
			"revoke": func() error { return c.RevokeSelf(ctx, tok) },
		} {
			err := call()
			want := "refusing to send the token to " + target.URL + "/v1/"
			if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "via=") {
				t.Errorf("%d %s: err = %v, want it to say %q", code, name, err, want)
			}
			if errors.Is(err, bao.ErrTemporary) {
				t.Errorf("%d %s: a redirect is not temporary: %v", code, name, err)
			}
			noLeak(t, err, tok.Reveal(), grant.Reveal())
		}
		origin.Close()
	}
	if n := stolen.Load(); n != 0 {
		t.Fatalf("the redirect target was called %d times", n)
	}
}
