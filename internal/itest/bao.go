//go:build integration

package itest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/openbao/openbao/api/v2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
)

// Production's names on the OpenBao side (PROTOCOL.md; openbao terraform `jwt-tenancy.tf`).
const (
	BaoAuthMount = "jwt-tenancy"     // JWT auth mount the grants log in at
	BaoRole      = "see-env"         // its role, and the policy of the tokens it mints
	BaoKVMount   = "monky"           // KV v2 mount; an env's secrets live under <env>/see/
	BaoAudience  = "openbao-see-env" // bound_audiences of the role
)

// GrantKey is what StartBao needs from a grant signer (*grant.Signer): the PKIX PEM of the
// public key whose ES256 signatures the jwt-tenancy mount accepts.
type GrantKey interface {
	PublicKeyPEM() string
}

// Bao is a real OpenBao server in dev mode (in-memory, unsealed), configured like production:
// the jwt-tenancy mount trusting one signer's key, the see-env role and templated policy, and
// the KV v2 mount monky. A file audit device records every request, so tests can count logins.
type Bao struct {
	Addr      string       // http://127.0.0.1:PORT
	RootToken secret.Value // Reveal() only to build a client; never log it
	// Accessor is the jwt-tenancy mount's accessor, the key of the entity alias whose env_id
	// metadata the see-env policy is templated on.
	Accessor string

	root      *api.Client
	auditPath string
}

// ErrBadToken is wrapped by Verify when OpenBao does not know the token (never issued, revoked,
// expired): what tenancy answers with 401 AGENT_UNAUTHENTICATED.
var ErrBadToken = errors.New("bao: token not valid")

// StartBao runs the bao binary (MONKY_BAO_BIN, else the path scripts/build-bao.sh prints) as
// `bao server -dev -dev-listen-address=127.0.0.1:<free port> -dev-no-store-token`, with the
// random root token passed in BAO_DEV_ROOT_TOKEN_ID (its environment, not argv, where any `ps`
// would show it), waits until it is active, configures it as production, and stops it when the
// test ends.
func StartBao(t testing.TB, key GrantKey) *Bao {
	t.Helper()
	bin, err := probe(PartBao)
	if err != nil {
		missing(t, PartBao, err)
	}
	dir := t.TempDir()
	b := &Bao{RootToken: secret.New("root-" + randomHex(16)), auditPath: filepath.Join(dir, "audit.log")}
	redact := &secret.Redactor{}
	redact.Add(b.RootToken.Reveal())

	// Declared in a config file because 2.4 refuses to create audit devices through the API.
	// Accessors in clear, so a test can match an audit entry to a token it holds.
	cfgPath := filepath.Join(dir, "audit.hcl")
	cfg := fmt.Sprintf("audit \"file\" \"itest/\" {\n  options = {\n    file_path = %q\n    hmac_accessor = \"false\"\n  }\n}\n", b.auditPath)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatalf("itest: bao: %v", err)
	}

	var p *process
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("itest: bao: %v", err)
		}
		b.Addr = fmt.Sprintf("http://127.0.0.1:%d", port)
		p, err = startProcess("bao", filepath.Join(dir, "bao.log"),
			[]string{"BAO_DEV_ROOT_TOKEN_ID=" + b.RootToken.Reveal()}, redact,
			bin, "server", "-dev", fmt.Sprintf("-dev-listen-address=127.0.0.1:%d", port),
			"-dev-no-store-token", "-config="+cfgPath)
		if err != nil {
			t.Fatalf("itest: bao: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = p.waitReady(ctx, func(ctx context.Context) (bool, error) {
			code, err := httpStatus(ctx, b.Addr+"/v1/sys/health")
			return err == nil && code == http.StatusOK, err
		})
		cancel()
		if err == nil {
			break
		}
		_ = p.stop()
		if !errors.Is(err, errExited) || attempt == 2 {
			t.Fatalf("itest: bao: %v\n%s", err, p.logTail())
		}
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("itest: bao: %v\n%s", err, p.logTail())
		}
	})

	b.root = b.newClient(t)
	b.root.SetToken(b.RootToken.Reveal())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.configure(ctx, key.PublicKeyPEM()); err != nil {
		t.Fatalf("itest: bao: configure: %v\n%s", err, p.logTail())
	}
	return b
}

// Client returns an OpenBao client for b.Addr holding no token.
func (b *Bao) Client(t testing.TB) *api.Client { t.Helper(); return b.newClient(t) }

// Root returns the client holding the root token, for set-up a test needs beyond the helpers.
func (b *Bao) Root() *api.Client { return b.root }

func (b *Bao) newClient(t testing.TB) *api.Client {
	cfg := api.DefaultConfig()
	cfg.Address = b.Addr
	cfg.Timeout = 30 * time.Second
	cfg.MaxRetries = 0
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatalf("itest: bao: client: %v", err)
	}
	c.ClearToken() // NewClient picks up BAO_TOKEN from the environment
	return c
}

// seeEnvPolicy is production's see-env policy: an env's token reads and lists only its own
// `<env>/see/` subtree, keyed by the env_id the login copied from the grant into the entity
// alias; plus lookup-self and renew-self (revoke-self comes with the default policy).
const seeEnvPolicy = `
path "monky/data/{{identity.entity.aliases.ACCESSOR.metadata.env_id}}/see/*" {
  capabilities = ["read"]
}
path "monky/metadata/{{identity.entity.aliases.ACCESSOR.metadata.env_id}}/see/*" {
  capabilities = ["list"]
}
path "auth/token/lookup-self" {
  capabilities = ["read"]
}
path "auth/token/renew-self" {
  capabilities = ["update"]
}
`

func (b *Bao) configure(ctx context.Context, pubPEM string) error {
	sys := b.root.Sys()
	if err := sys.EnableAuthWithOptionsWithContext(ctx, BaoAuthMount, &api.EnableAuthOptions{Type: "jwt"}); err != nil {
		return fmt.Errorf("enable auth %s: %w", BaoAuthMount, err)
	}
	auths, err := sys.ListAuthWithContext(ctx)
	if err != nil {
		return fmt.Errorf("list auth: %w", err)
	}
	m, ok := auths[BaoAuthMount+"/"]
	if !ok || m.Accessor == "" {
		return fmt.Errorf("auth mount %s/ has no accessor", BaoAuthMount)
	}
	b.Accessor = m.Accessor
	lw := b.root.Logical()
	if _, err := lw.WriteWithContext(ctx, "auth/"+BaoAuthMount+"/config", map[string]any{
		"jwt_validation_pubkeys": []string{pubPEM},
		"jwt_supported_algs":     []string{"ES256"},
	}); err != nil {
		return fmt.Errorf("write auth/%s/config: %w", BaoAuthMount, err)
	}
	var role map[string]any
	if err := json.Unmarshal([]byte(`{"role_type":"jwt","user_claim":"sub",
		"bound_audiences":["`+BaoAudience+`"],"bound_claims":{"kind":"deploy-grant"},
		"claim_mappings":{"env_id":"env_id","jti":"grant_jti"},"token_policies":["`+BaoRole+`"],
		"token_ttl":"24h","token_max_ttl":"720h"}`), &role); err != nil {
		return err
	}
	if _, err := lw.WriteWithContext(ctx, "auth/"+BaoAuthMount+"/role/"+BaoRole, role); err != nil {
		return fmt.Errorf("write role %s: %w", BaoRole, err)
	}
	if err := sys.PutPolicyWithContext(ctx, BaoRole, strings.ReplaceAll(seeEnvPolicy, "ACCESSOR", b.Accessor)); err != nil {
		return fmt.Errorf("put policy %s: %w", BaoRole, err)
	}
	if err := sys.MountWithContext(ctx, BaoKVMount, &api.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
		return fmt.Errorf("mount %s: %w", BaoKVMount, err)
	}
	return nil
}

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
	full := env + "/see/" + path
	s, err := b.root.KVv2(BaoKVMount).Put(ctx, full, data)
	if err != nil {
		t.Fatalf("itest: bao: put %s/data/%s: %v", BaoKVMount, full, err)
	}
	return s.VersionMetadata.Version
}

// Login logs a grant in at jwt-tenancy/see-env exactly as the agent does and returns the token
// and its accessor.
func (b *Bao) Login(ctx context.Context, grantJWT string) (token secret.Value, accessor string, err error) {
	c, err := api.NewClient(b.root.CloneConfig())
	if err != nil {
		return secret.Value{}, "", err
	}
	c.ClearToken()
	s, err := c.Logical().WriteWithContext(ctx, "auth/"+BaoAuthMount+"/login", map[string]any{"role": BaoRole, "jwt": grantJWT})
	if err != nil {
		return secret.Value{}, "", fmt.Errorf("bao: login %s: %w", BaoAuthMount, err)
	}
	if s == nil || s.Auth == nil || s.Auth.ClientToken == "" {
		return secret.Value{}, "", fmt.Errorf("bao: login %s: no auth in the response", BaoAuthMount)
	}
	return secret.New(s.Auth.ClientToken), s.Auth.Accessor, nil
}

// Verify looks token up with the root token (`auth/token/lookup`) and returns the env_id and
// grant_jti the login copied from the grant into its metadata — what tenancy does with the
// bearer of every agent call (tenancytest's Verifier). An unknown, revoked or expired token
// wraps ErrBadToken; no error carries the token.
func (b *Bao) Verify(ctx context.Context, token string) (envID, grantJTI string, err error) {
	if token == "" {
		return "", "", fmt.Errorf("%w: empty", ErrBadToken)
	}
	s, err := b.root.Logical().WriteWithContext(ctx, "auth/token/lookup", map[string]any{"token": token})
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && (re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusBadRequest) {
			return "", "", fmt.Errorf("%w: lookup answered %d", ErrBadToken, re.StatusCode)
		}
		return "", "", fmt.Errorf("bao: token lookup: %w", err)
	}
	if s == nil || s.Data == nil {
		return "", "", fmt.Errorf("%w: lookup returned nothing", ErrBadToken)
	}
	meta, _ := s.Data["meta"].(map[string]any)
	envID, _ = meta["env_id"].(string)
	grantJTI, _ = meta["grant_jti"].(string)
	if envID == "" {
		return "", "", fmt.Errorf("%w: token has no env_id metadata (not minted by %s)", ErrBadToken, BaoAuthMount)
	}
	return envID, grantJTI, nil
}

// TokenInfo is one live token minted by the jwt-tenancy login.
type TokenInfo struct {
	Accessor string
	EnvID    string
	GrantJTI string
	Policies []string
	TTL      time.Duration
}

// Tokens lists the live tokens minted by jwt-tenancy logins, sorted by accessor (root's and
// other set-up tokens are left out).
func (b *Bao) Tokens(t testing.TB) []TokenInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := b.root.Logical().ListWithContext(ctx, "auth/token/accessors")
	if err != nil || s == nil {
		t.Fatalf("itest: bao: list accessors: %v", err)
	}
	keys, _ := s.Data["keys"].([]any)
	var out []TokenInfo
	for _, k := range keys {
		acc, _ := k.(string)
		info, ok, err := b.lookupAccessor(ctx, acc)
		if err != nil {
			t.Fatalf("itest: bao: %v", err)
		}
		if ok && info.EnvID != "" {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Accessor < out[j].Accessor })
	return out
}

// Revoked reports whether the token with this accessor is gone (revoked or expired).
func (b *Bao) Revoked(t testing.TB, accessor string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, ok, err := b.lookupAccessor(ctx, accessor)
	if err != nil {
		t.Fatalf("itest: bao: %v", err)
	}
	return !ok
}

// RevokeAccessor revokes a token by accessor, as tenancy does on a kit re-reveal or a retire.
func (b *Bao) RevokeAccessor(t testing.TB, accessor string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.root.Logical().WriteWithContext(ctx, "auth/token/revoke-accessor", map[string]any{"accessor": accessor}); err != nil {
		t.Fatalf("itest: bao: revoke accessor: %v", err)
	}
}

func (b *Bao) lookupAccessor(ctx context.Context, accessor string) (TokenInfo, bool, error) {
	s, err := b.root.Logical().WriteWithContext(ctx, "auth/token/lookup-accessor", map[string]any{"accessor": accessor})
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusBadRequest {
			return TokenInfo{}, false, nil // "invalid accessor": gone
		}
		return TokenInfo{}, false, fmt.Errorf("lookup accessor: %w", err)
	}
	if s == nil || s.Data == nil {
		return TokenInfo{}, false, nil
	}
	info := TokenInfo{Accessor: accessor}
	if path, _ := s.Data["path"].(string); path != "auth/"+BaoAuthMount+"/login" {
		return info, true, nil
	}
	meta, _ := s.Data["meta"].(map[string]any)
	info.EnvID, _ = meta["env_id"].(string)
	info.GrantJTI, _ = meta["grant_jti"].(string)
	if ps, ok := s.Data["policies"].([]any); ok {
		for _, p := range ps {
			if p, ok := p.(string); ok {
				info.Policies = append(info.Policies, p)
			}
		}
	}
	if ttl, err := s.TokenTTL(); err == nil {
		info.TTL = ttl
	}
	return info, true, nil
}

// LoginEvent is one jwt-tenancy login seen in the audit log.
type LoginEvent struct {
	EnvID    string // from the minted token's metadata; "" for a refused login
	GrantJTI string
	Accessor string
	// Refused: no token came out (bad signature, audience, kind, expiry…). The audit log
	// keeps only an HMAC of OpenBao's message, so the reason is not available here.
	Refused bool
}

// Logins returns every login attempt at jwt-tenancy, in order, read from the audit log (OpenBao
// writes the audit entry before it answers, so a login the caller saw returned is in it).
func (b *Bao) Logins(t testing.TB) []LoginEvent {
	t.Helper()
	f, err := os.Open(b.auditPath)
	if err != nil {
		t.Fatalf("itest: bao: audit log: %v", err)
	}
	defer f.Close()
	var out []LoginEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var e struct {
			Type    string `json:"type"`
			Error   string `json:"error"`
			Request struct {
				Path string `json:"path"`
			} `json:"request"`
			Auth struct {
				Accessor string            `json:"accessor"`
				Metadata map[string]string `json:"metadata"`
			} `json:"auth"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("itest: bao: audit log: %v", err)
		}
		if e.Type != "response" || e.Request.Path != "auth/"+BaoAuthMount+"/login" {
			continue
		}
		if e.Error != "" || e.Auth.Accessor == "" {
			out = append(out, LoginEvent{Refused: true})
			continue
		}
		out = append(out, LoginEvent{EnvID: e.Auth.Metadata["env_id"], GrantJTI: e.Auth.Metadata["grant_jti"], Accessor: e.Auth.Accessor})
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("itest: bao: audit log: %v", err)
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
