//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/openbao/openbao/api/v2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// Bao is the tenancy fake's bearer verifier in integration tests.
var _ tenancytest.Verifier = (*Bao)(nil)

func newSigner(t *testing.T) *grant.Signer {
	t.Helper()
	s, err := grant.NewSigner("https://tenancy.itest")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sign(t *testing.T, s *grant.Signer, env string) (jwt, jti string) {
	t.Helper()
	tok, jti, err := s.Sign(env, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok, jti
}

func statusOf(err error) int {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// TestBaoSeeEnvPolicy: a grant for env A logs in through the production mount and role; its
// token reads and lists A's secrets and nothing of B's, and carries env_id/grant_jti metadata.
func TestBaoSeeEnvPolicy(t *testing.T) {
	signer := newSigner(t)
	b := StartBao(t, signer)
	ctx := context.Background()

	if v := b.Put(t, "env-a", "x", "value", "secret-of-a-1"); v != 1 {
		t.Fatalf("first Put version = %d, want 1", v)
	}
	if v := b.Put(t, "env-a", "x", "value", "secret-of-a-2"); v != 2 {
		t.Fatalf("second Put version = %d, want 2", v)
	}
	b.Put(t, "env-b", "x", "value", "secret-of-b")
	b.Put(t, "env-a", "nested/y", "other", "z")

	grantA, jtiA := sign(t, signer, "env-a")
	token, accessor, err := b.Login(ctx, grantA)
	if err != nil {
		t.Fatal(err)
	}
	c := b.Client(t)
	c.SetToken(token.Reveal())

	t.Run("reads its own env", func(t *testing.T) {
		for _, tc := range []struct {
			version int
			want    string
		}{{0, "secret-of-a-2"}, {1, "secret-of-a-1"}, {2, "secret-of-a-2"}} {
			s, err := c.KVv2(BaoKVMount).GetVersion(ctx, "env-a/see/x", tc.version)
			if err != nil {
				t.Fatalf("read env-a/see/x version %d: %v", tc.version, err)
			}
			if got := s.Data["value"]; got != tc.want {
				t.Fatalf("env-a/see/x version %d = %v, want %s", tc.version, got, tc.want)
			}
		}
		keys, err := c.Logical().ListWithContext(ctx, BaoKVMount+"/metadata/env-a/see/")
		if err != nil || keys == nil {
			t.Fatalf("list env-a/see/: %v", err)
		}
		got := fmt.Sprint(keys.Data["keys"])
		if got != "[nested/ x]" {
			t.Fatalf("list env-a/see/ = %s, want [nested/ x]", got)
		}
	})

	t.Run("is refused everything else", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			do   func() error
		}{
			{"read other env", func() error { _, err := c.KVv2(BaoKVMount).Get(ctx, "env-b/see/x"); return err }},
			{"read outside see", func() error { _, err := c.Logical().ReadWithContext(ctx, BaoKVMount+"/data/env-a/x"); return err }},
			{"list other env", func() error {
				_, err := c.Logical().ListWithContext(ctx, BaoKVMount+"/metadata/env-b/see/")
				return err
			}},
			{"write own env", func() error {
				_, err := c.KVv2(BaoKVMount).Put(ctx, "env-a/see/x", map[string]any{"value": "overwritten"})
				return err
			}},
			{"read metadata", func() error { _, err := c.KVv2(BaoKVMount).GetMetadata(ctx, "env-a/see/x"); return err }},
			{"sys", func() error { _, err := c.Sys().ListMountsWithContext(ctx); return err }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if err := tc.do(); statusOf(err) != http.StatusForbidden {
					t.Fatalf("err = %v, want 403", err)
				}
			})
		}
	})

	t.Run("token carries the grant", func(t *testing.T) {
		env, jti, err := b.Verify(ctx, token.Reveal())
		if err != nil || env != "env-a" || jti != jtiA {
			t.Fatalf("Verify = %q, %q, %v; want env-a, %s", env, jti, err, jtiA)
		}
		for name, tok := range map[string]string{"never issued": "s.itestnotatoken", "root": b.RootToken.Reveal(), "empty": ""} {
			if _, _, err := b.Verify(ctx, tok); !errors.Is(err, ErrBadToken) {
				t.Fatalf("Verify(%s) = %v, want ErrBadToken", name, err)
			}
		}
		toks := b.Tokens(t)
		if len(toks) != 1 || toks[0].Accessor != accessor || toks[0].EnvID != "env-a" || toks[0].GrantJTI != jtiA {
			t.Fatalf("Tokens = %+v", toks)
		}
		if !slices.Contains(toks[0].Policies, BaoRole) || !slices.Contains(toks[0].Policies, "default") {
			t.Fatalf("policies = %v, want default and %s", toks[0].Policies, BaoRole)
		}
		if toks[0].TTL <= 23*time.Hour || toks[0].TTL > 24*time.Hour {
			t.Fatalf("ttl = %s, want 24h (token_ttl)", toks[0].TTL)
		}
		if n := b.LoginCount(t, "env-a"); n != 1 {
			t.Fatalf("LoginCount(env-a) = %d, want 1", n)
		}
	})

	t.Run("self calls and revoke-self", func(t *testing.T) {
		self, err := c.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			t.Fatalf("lookup-self: %v", err)
		}
		if ttl, err := self.TokenTTL(); err != nil || ttl <= 0 {
			t.Fatalf("lookup-self ttl = %v, %v", ttl, err)
		}
		if n := b.RenewSelfs(t, accessor); n != 0 {
			t.Fatalf("RenewSelfs before any renewal = %d", n)
		}
		if _, err := c.Auth().Token().RenewSelfWithContext(ctx, 3600); err != nil {
			t.Fatalf("renew-self: %v", err)
		}
		if n := b.RenewSelfs(t, accessor); n != 1 {
			t.Fatalf("RenewSelfs after one renewal = %d, want 1 (audit log)", n)
		}
		if ttl := b.TokenTTL(t, accessor); ttl <= 0 || ttl > time.Hour {
			t.Fatalf("TokenTTL after renew-self 3600 = %s, want at most 1h", ttl)
		}
		if b.Revoked(t, accessor) {
			t.Fatal("Revoked before revoke-self")
		}
		if err := c.Auth().Token().RevokeSelfWithContext(ctx, ""); err != nil {
			t.Fatalf("revoke-self (default policy): %v", err)
		}
		if !b.Revoked(t, accessor) {
			t.Fatal("not Revoked after revoke-self")
		}
		_, _, err = b.Verify(ctx, token.Reveal())
		if !errors.Is(err, ErrBadToken) {
			t.Fatalf("Verify of a revoked token = %v, want ErrBadToken", err)
		}
		if strings.Contains(err.Error(), token.Reveal()) {
			t.Fatalf("Verify error carries the token: %v", err)
		}
		if len(b.Tokens(t)) != 0 {
			t.Fatalf("Tokens after revoke = %+v", b.Tokens(t))
		}
	})

	t.Run("revoke by accessor", func(t *testing.T) {
		grantB, _ := sign(t, signer, "env-b")
		tokB, accB, err := b.Login(ctx, grantB)
		if err != nil {
			t.Fatal(err)
		}
		b.RevokeAccessor(t, accB)
		if !b.Revoked(t, accB) {
			t.Fatal("not Revoked after RevokeAccessor")
		}
		if _, _, err := b.Verify(ctx, tokB.Reveal()); !errors.Is(err, ErrBadToken) {
			t.Fatalf("Verify = %v, want ErrBadToken", err)
		}
	})
}

// TestBaoRefusesForeignGrants: the role's bindings hold — wrong key, audience, kind, or an
// expired grant do not log in, and the refusals are in the audit log.
func TestBaoRefusesForeignGrants(t *testing.T) {
	signer := newSigner(t)
	b := StartBao(t, signer)
	now := time.Now()
	custom := func(mutate func(c jwt.MapClaims)) string {
		c := jwt.MapClaims{"iss": signer.Issuer, "aud": []string{grant.Audience}, "sub": "agent:env-a",
			"env_id": "env-a", "kind": grant.Kind, "jti": "j-" + randomHex(4),
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		mutate(c)
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, c).SignedString(signer.Key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	other := newSigner(t)
	foreign, _ := sign(t, other, "env-a")
	tests := []struct {
		name string
		jwt  string
	}{
		{"another key", foreign},
		{"wrong audience", custom(func(c jwt.MapClaims) { c["aud"] = []string{"someone-else"} })},
		{"wrong kind", custom(func(c jwt.MapClaims) { c["kind"] = "install-kit" })},
		{"expired", custom(func(c jwt.MapClaims) { c["iat"], c["exp"] = now.Add(-3*time.Hour).Unix(), now.Add(-2*time.Hour).Unix() })},
		{"not a jwt", "not-a-jwt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := b.Login(context.Background(), tt.jwt)
			if err == nil {
				t.Fatal("login succeeded")
			}
			if statusOf(err) != http.StatusBadRequest || strings.Contains(err.Error(), tt.jwt) {
				t.Fatalf("err = %v, want a 400 that does not echo the grant", err)
			}
		})
	}
	// The control: the same construction, unmutated, does log in.
	if _, _, err := b.Login(context.Background(), custom(func(jwt.MapClaims) {})); err != nil {
		t.Fatalf("control grant refused: %v", err)
	}
	logins := b.Logins(t)
	var refused int
	for _, l := range logins {
		if l.Refused {
			refused++
		}
	}
	if refused != len(tests) || b.LoginCount(t, "env-a") != 1 {
		t.Fatalf("audit: %d refused, %d ok for env-a; want %d and 1 (%+v)", refused, b.LoginCount(t, "env-a"), len(tests), logins)
	}
}

// TestBaoRootTokenStaysHidden: the root token is in no process's argv and prints as ***.
func TestBaoRootTokenStaysHidden(t *testing.T) {
	b := StartBao(t, newSigner(t))
	root := b.RootToken.Reveal()
	if s := fmt.Sprintf("%v %+v %s", b.RootToken, *b, b.RootToken); strings.Contains(s, root) {
		t.Fatalf("root token printed: %s", s)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var sawBao bool
	for _, p := range procs {
		c, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(string(c), strings.TrimPrefix(b.Addr, "http://")) {
			sawBao = true
		}
		if strings.Contains(string(c), root) {
			t.Fatalf("root token in the argv of %s", p)
		}
	}
	if !sawBao {
		t.Fatal("did not find the bao process, so the argv check proved nothing")
	}
}
