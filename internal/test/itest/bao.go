//go:build integration

package itest

import (
	"context"
	"testing"
	"time"

	"github.com/openbao/openbao/api/v2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/baodev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Production's names on the OpenBao side (PROTOCOL.md; openbao terraform `jwt-tenancy.tf`).
const (
	BaoAuthMount = baodev.AuthMount // JWT auth mount the grants log in at
	BaoRole      = baodev.Role      // its role, and the policy of the tokens it mints
	BaoKVMount   = baodev.KVMount   // KV v2 mount; an env's secrets live under <env>/see/
	BaoAudience  = baodev.Audience  // bound_audiences of the role
)

// GrantKey is what StartBao needs from a grant signer (*grant.Signer): the PKIX PEM of the
// public key whose ES256 signatures the jwt-tenancy mount accepts.
type GrantKey interface {
	PublicKeyPEM() string
}

// Bao is a real OpenBao server in dev mode (in-memory, unsealed), configured like production
// by internal/dev/devstack/baodev (which the dev stack shares), with test-failing helpers.
type Bao struct {
	Addr      string       // http://127.0.0.1:PORT
	RootToken secret.Value // Reveal() only to build a client; never log it
	// Accessor is the jwt-tenancy mount's accessor, the key of the entity alias whose env_id
	// metadata the see-env policy is templated on.
	Accessor string

	srv *baodev.Server
}

// ErrBadToken is wrapped by Verify when OpenBao does not know the token (never issued, revoked,
// expired): what tenancy answers with 401 AGENT_UNAUTHENTICATED.
var ErrBadToken = baodev.ErrBadToken

// TokenInfo is one live token minted by the jwt-tenancy login.
type TokenInfo = baodev.TokenInfo

// LoginEvent is one jwt-tenancy login seen in the audit log.
type LoginEvent = baodev.LoginEvent

// StartBao runs the bao binary (MONKY_BAO_BIN, else the path scripts/build-bao.sh prints) with
// baodev.Start — dev mode on a free loopback port, the root token in its environment, configured
// as production — and stops it when the test ends.
func StartBao(t testing.TB, key GrantKey) *Bao {
	t.Helper()
	bin, err := probe(PartBao)
	if err != nil {
		missing(t, PartBao, err)
	}
	dir := t.TempDir()
	srv, err := baodev.Start(context.Background(), baodev.Options{Bin: bin, Dir: dir, PublicKeyPEM: key.PublicKeyPEM()})
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("itest: %v\n%s", err, srv.LogTail())
		}
	})
	return &Bao{Addr: srv.Addr, RootToken: srv.RootToken, Accessor: srv.Accessor, srv: srv}
}

// Server is the baodev server behind b.
func (b *Bao) Server() *baodev.Server { return b.srv }

// Client returns an OpenBao client for b.Addr holding no token.
func (b *Bao) Client(t testing.TB) *api.Client {
	t.Helper()
	c, err := b.srv.Client()
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return c
}

// Root returns the client holding the root token, for set-up a test needs beyond the helpers.
func (b *Bao) Root() *api.Client { return b.srv.Root() }

// Put writes {key: value} as a new version of the secret <env>/see/<path> in the monky mount
// (replacing the keys of the previous version) and returns the version number.
func (b *Bao) Put(t testing.TB, env, path, key, value string) int {
	t.Helper()
	return b.PutData(t, env, path, map[string]any{key: value})
}

// PutData is Put with several keys.
func (b *Bao) PutData(t testing.TB, env, path string, data map[string]any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := b.srv.Put(ctx, env, path, data)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return v
}

// Login logs a grant in at jwt-tenancy/see-env exactly as the agent does and returns the token
// and its accessor.
func (b *Bao) Login(ctx context.Context, grantJWT string) (token secret.Value, accessor string, err error) {
	return b.srv.Login(ctx, grantJWT)
}

// Verify resolves a bearer as tenancy does (tenancytest.Verifier); see baodev.Server.Verify.
func (b *Bao) Verify(ctx context.Context, token string) (envID, grantJTI string, err error) {
	return b.srv.Verify(ctx, token)
}

// Tokens lists the live tokens minted by jwt-tenancy logins, sorted by accessor (root's and
// other set-up tokens are left out).
func (b *Bao) Tokens(t testing.TB) []TokenInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := b.srv.Tokens(ctx)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return out
}

// Revoked reports whether the token with this accessor is gone (revoked or expired).
func (b *Bao) Revoked(t testing.TB, accessor string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, ok, err := b.srv.LookupAccessor(ctx, accessor)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return !ok
}

// RevokeAccessor revokes a token by accessor, as tenancy does on a kit re-reveal or a retire.
func (b *Bao) RevokeAccessor(t testing.TB, accessor string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.srv.RevokeAccessor(ctx, accessor); err != nil {
		t.Fatalf("itest: %v", err)
	}
}

// Logins returns every login attempt at jwt-tenancy, in order, read from the audit log.
func (b *Bao) Logins(t testing.TB) []LoginEvent {
	t.Helper()
	out, err := b.srv.Logins()
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return out
}

// LoginCount is the number of successful jwt-tenancy logins for env.
func (b *Bao) LoginCount(t testing.TB, env string) int {
	t.Helper()
	n := 0
	for _, e := range b.Logins(t) {
		if !e.Refused && e.EnvID == env {
			n++
		}
	}
	return n
}

// TokenTTL is the time the token with this accessor has left, as OpenBao says (lookup by
// accessor with the root token); the test fails when the token is gone.
func (b *Bao) TokenTTL(t testing.TB, accessor string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, ok, err := b.srv.LookupAccessor(ctx, accessor)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	if !ok {
		t.Fatalf("itest: token %s is gone (revoked or expired)", accessor)
	}
	return info.TTL
}

// RenewSelfs counts the successful `auth/token/renew-self` calls made with the token of this
// accessor, from OpenBao's audit log (baodev.Server.RenewSelfs).
func (b *Bao) RenewSelfs(t testing.TB, accessor string) int {
	t.Helper()
	n, err := b.srv.RenewSelfs(accessor)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return n
}
