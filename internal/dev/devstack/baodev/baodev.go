// Package baodev runs a REAL OpenBao server in dev mode (in memory, unsealed) and configures it
// exactly as production's jwt-tenancy set-up is: the JWT auth mount trusting one grant signer's
// ES256 key, the see-env role and its templated policy, and the KV v2 mount monky. The dev stack
// and the integration tests share it; a file audit device records every request, so tests can
// count logins.
package baodev

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/openbao/openbao/api/v2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Production's names on the OpenBao side (PROTOCOL.md; openbao terraform `jwt-tenancy.tf`).
const (
	AuthMount = "jwt-tenancy"     // JWT auth mount the grants log in at
	Role      = "see-env"         // its role, and the policy of the tokens it mints
	KVMount   = "monky"           // KV v2 mount; an env's secrets live under <env>/see/
	Audience  = "openbao-see-env" // bound_audiences of the role
)

// ErrBadToken is wrapped by Verify when OpenBao does not know the token (never issued, revoked,
// expired): what tenancy answers with 401 AGENT_UNAUTHENTICATED.
var ErrBadToken = errors.New("bao: token not valid")

// Options configure Start.
type Options struct {
	// Bin is the bao server binary (scripts/build-bao.sh prints its path). Required.
	Bin string
	// Dir holds the audit log, the server log and its config file. Required; it must exist.
	Dir string
	// PublicKeyPEM is the PKIX PEM of the key whose ES256 grants the jwt-tenancy mount accepts
	// ((*grant.Signer).PublicKeyPEM). Required.
	PublicKeyPEM string
	// StartTimeout bounds the wait for the server to become active (1 min when zero).
	StartTimeout time.Duration
}

// Server is a running, configured OpenBao dev server.
type Server struct {
	Addr      string       // http://127.0.0.1:PORT
	RootToken secret.Value // Reveal() only to build a client; never log it
	// Accessor is the jwt-tenancy mount's accessor, the key of the entity alias whose env_id
	// metadata the see-env policy is templated on.
	Accessor string

	root      *api.Client
	auditPath string
	proc      *process.Process
}

// Start runs `bao server -dev -dev-listen-address=127.0.0.1:<free port> -dev-no-store-token`,
// with a random root token passed in BAO_DEV_ROOT_TOKEN_ID (its environment, not argv, where any
// `ps` would show it), waits until it is active, and configures it as production. A port taken
// between choosing and binding is retried twice. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Bin == "" || opts.Dir == "" || opts.PublicKeyPEM == "" {
		return nil, errors.New("baodev: Bin, Dir and PublicKeyPEM are required")
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	s := &Server{RootToken: secret.New("root-" + randomHex(16)), auditPath: filepath.Join(opts.Dir, "bao-audit.log")}
	redact := &secret.Redactor{}
	redact.Add(s.RootToken.Reveal())

	// Declared in a config file because 2.4 refuses to create audit devices through the API.
	// Accessors in clear, so a test can match an audit entry to a token it holds.
	cfgPath := filepath.Join(opts.Dir, "bao-audit.hcl")
	cfg := fmt.Sprintf("audit \"file\" \"itest/\" {\n  options = {\n    file_path = %q\n    hmac_accessor = \"false\"\n  }\n}\n", s.auditPath)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, fmt.Errorf("baodev: %w", err)
	}

	for attempt := 0; ; attempt++ {
		port, err := process.FreePort()
		if err != nil {
			return nil, fmt.Errorf("baodev: %w", err)
		}
		s.Addr = fmt.Sprintf("http://127.0.0.1:%d", port)
		p, err := process.Start("bao", filepath.Join(opts.Dir, "bao.log"),
			[]string{"BAO_DEV_ROOT_TOKEN_ID=" + s.RootToken.Reveal()}, redact,
			opts.Bin, "server", "-dev", fmt.Sprintf("-dev-listen-address=127.0.0.1:%d", port),
			"-dev-no-store-token", "-config="+cfgPath)
		if err != nil {
			return nil, fmt.Errorf("baodev: %w", err)
		}
		wctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
		err = p.WaitReady(wctx, func(ctx context.Context) (bool, error) {
			code, err := process.HTTPStatus(ctx, s.Addr+"/v1/sys/health")
			return err == nil && code == http.StatusOK, err
		})
		cancel()
		if err == nil {
			s.proc = p
			break
		}
		_ = p.Stop()
		if !errors.Is(err, process.ErrExited) || attempt == 2 {
			return nil, fmt.Errorf("baodev: %w\n%s", err, p.LogTail())
		}
	}

	root, err := s.Client()
	if err != nil {
		_ = s.Stop()
		return nil, err
	}
	root.SetToken(s.RootToken.Reveal())
	s.root = root
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := s.configure(cctx, opts.PublicKeyPEM); err != nil {
		tail := s.LogTail()
		_ = s.Stop()
		return nil, fmt.Errorf("baodev: configure: %w\n%s", err, tail)
	}
	return s, nil
}

// Stop stops the server (SIGTERM, then a kill after 15 s).
func (s *Server) Stop() error {
	if err := s.proc.Stop(); err != nil {
		return fmt.Errorf("baodev: %w", err)
	}
	return nil
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.proc.Pid() }

// LogTail is the end of the server's output, the root token masked.
func (s *Server) LogTail() string { return s.proc.LogTail() }

// Client returns an OpenBao client for s.Addr holding no token.
func (s *Server) Client() (*api.Client, error) {
	cfg := api.DefaultConfig()
	cfg.Address = s.Addr
	cfg.Timeout = 30 * time.Second
	cfg.MaxRetries = 0
	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("baodev: client: %w", err)
	}
	c.ClearToken() // NewClient picks up BAO_TOKEN from the environment
	return c, nil
}

// Root returns the client holding the root token, for set-up beyond the helpers.
func (s *Server) Root() *api.Client { return s.root }

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

func (s *Server) configure(ctx context.Context, pubPEM string) error {
	sys := s.root.Sys()
	if err := sys.EnableAuthWithOptionsWithContext(ctx, AuthMount, &api.EnableAuthOptions{Type: "jwt"}); err != nil {
		return fmt.Errorf("enable auth %s: %w", AuthMount, err)
	}
	auths, err := sys.ListAuthWithContext(ctx)
	if err != nil {
		return fmt.Errorf("list auth: %w", err)
	}
	m, ok := auths[AuthMount+"/"]
	if !ok || m.Accessor == "" {
		return fmt.Errorf("auth mount %s/ has no accessor", AuthMount)
	}
	s.Accessor = m.Accessor
	lw := s.root.Logical()
	if _, err := lw.WriteWithContext(ctx, "auth/"+AuthMount+"/config", map[string]any{
		"jwt_validation_pubkeys": []string{pubPEM},
		"jwt_supported_algs":     []string{"ES256"},
	}); err != nil {
		return fmt.Errorf("write auth/%s/config: %w", AuthMount, err)
	}
	var role map[string]any
	if err := json.Unmarshal([]byte(`{"role_type":"jwt","user_claim":"sub",
		"bound_audiences":["`+Audience+`"],"bound_claims":{"kind":"deploy-grant"},
		"claim_mappings":{"env_id":"env_id","jti":"grant_jti"},"token_policies":["`+Role+`"],
		"token_ttl":"24h","token_max_ttl":"720h"}`), &role); err != nil {
		return err
	}
	if _, err := lw.WriteWithContext(ctx, "auth/"+AuthMount+"/role/"+Role, role); err != nil {
		return fmt.Errorf("write role %s: %w", Role, err)
	}
	if err := sys.PutPolicyWithContext(ctx, Role, strings.ReplaceAll(seeEnvPolicy, "ACCESSOR", s.Accessor)); err != nil {
		return fmt.Errorf("put policy %s: %w", Role, err)
	}
	if err := sys.MountWithContext(ctx, KVMount, &api.MountInput{Type: "kv", Options: map[string]string{"version": "2"}}); err != nil {
		return fmt.Errorf("mount %s: %w", KVMount, err)
	}
	return nil
}

// Put writes data as a new version of the secret <env>/see/<path> in the monky mount (replacing
// the keys of the previous version) and returns the version number.
func (s *Server) Put(ctx context.Context, env, path string, data map[string]any) (int, error) {
	full := env + "/see/" + path
	v, err := s.root.KVv2(KVMount).Put(ctx, full, data)
	if err != nil {
		return 0, fmt.Errorf("bao: put %s/data/%s: %w", KVMount, full, err)
	}
	return v.VersionMetadata.Version, nil
}

// Login logs a grant in at jwt-tenancy/see-env exactly as the agent does and returns the token
// and its accessor.
func (s *Server) Login(ctx context.Context, grantJWT string) (token secret.Value, accessor string, err error) {
	c, err := api.NewClient(s.root.CloneConfig())
	if err != nil {
		return secret.Value{}, "", err
	}
	c.ClearToken()
	r, err := c.Logical().WriteWithContext(ctx, "auth/"+AuthMount+"/login", map[string]any{"role": Role, "jwt": grantJWT})
	if err != nil {
		return secret.Value{}, "", fmt.Errorf("bao: login %s: %w", AuthMount, err)
	}
	if r == nil || r.Auth == nil || r.Auth.ClientToken == "" {
		return secret.Value{}, "", fmt.Errorf("bao: login %s: no auth in the response", AuthMount)
	}
	return secret.New(r.Auth.ClientToken), r.Auth.Accessor, nil
}

// Verify looks token up with the root token (`auth/token/lookup`) and returns the env_id and
// grant_jti the login copied from the grant into its metadata — what tenancy does with the
// bearer of every agent call (tenancytest.Verifier). An unknown, revoked or expired token wraps
// ErrBadToken; no error carries the token.
func (s *Server) Verify(ctx context.Context, token string) (envID, grantJTI string, err error) {
	if token == "" {
		return "", "", fmt.Errorf("%w: empty", ErrBadToken)
	}
	r, err := s.root.Logical().WriteWithContext(ctx, "auth/token/lookup", map[string]any{"token": token})
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && (re.StatusCode == http.StatusForbidden || re.StatusCode == http.StatusBadRequest) {
			return "", "", fmt.Errorf("%w: lookup answered %d", ErrBadToken, re.StatusCode)
		}
		return "", "", fmt.Errorf("bao: token lookup: %w", err)
	}
	if r == nil || r.Data == nil {
		return "", "", fmt.Errorf("%w: lookup returned nothing", ErrBadToken)
	}
	meta, _ := r.Data["meta"].(map[string]any)
	envID, _ = meta["env_id"].(string)
	grantJTI, _ = meta["grant_jti"].(string)
	if envID == "" {
		return "", "", fmt.Errorf("%w: token has no env_id metadata (not minted by %s)", ErrBadToken, AuthMount)
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
func (s *Server) Tokens(ctx context.Context) ([]TokenInfo, error) {
	r, err := s.root.Logical().ListWithContext(ctx, "auth/token/accessors")
	if err != nil {
		return nil, fmt.Errorf("bao: list accessors: %w", err)
	}
	if r == nil {
		return nil, errors.New("bao: list accessors: empty answer")
	}
	keys, _ := r.Data["keys"].([]any)
	var out []TokenInfo
	for _, k := range keys {
		acc, _ := k.(string)
		info, ok, err := s.LookupAccessor(ctx, acc)
		if err != nil {
			return nil, err
		}
		if ok && info.EnvID != "" {
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Accessor < out[j].Accessor })
	return out, nil
}

// LookupAccessor describes the token with this accessor; false when it is gone (revoked or
// expired). EnvID is empty for a token not minted by a jwt-tenancy login.
func (s *Server) LookupAccessor(ctx context.Context, accessor string) (TokenInfo, bool, error) {
	r, err := s.root.Logical().WriteWithContext(ctx, "auth/token/lookup-accessor", map[string]any{"accessor": accessor})
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusBadRequest {
			return TokenInfo{}, false, nil // "invalid accessor": gone
		}
		return TokenInfo{}, false, fmt.Errorf("bao: lookup accessor: %w", err)
	}
	if r == nil || r.Data == nil {
		return TokenInfo{}, false, nil
	}
	info := TokenInfo{Accessor: accessor}
	if path, _ := r.Data["path"].(string); path != "auth/"+AuthMount+"/login" {
		return info, true, nil
	}
	meta, _ := r.Data["meta"].(map[string]any)
	info.EnvID, _ = meta["env_id"].(string)
	info.GrantJTI, _ = meta["grant_jti"].(string)
	if ps, ok := r.Data["policies"].([]any); ok {
		for _, p := range ps {
			if p, ok := p.(string); ok {
				info.Policies = append(info.Policies, p)
			}
		}
	}
	if ttl, err := r.TokenTTL(); err == nil {
		info.TTL = ttl
	}
	return info, true, nil
}

// RevokeAccessor revokes a token by accessor, as tenancy does on a kit re-reveal or a retire.
func (s *Server) RevokeAccessor(ctx context.Context, accessor string) error {
	if _, err := s.root.Logical().WriteWithContext(ctx, "auth/token/revoke-accessor", map[string]any{"accessor": accessor}); err != nil {
		return fmt.Errorf("bao: revoke accessor: %w", err)
	}
	return nil
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

// auditResponse is what the dev stack reads of one response entry of the audit log.
type auditResponse struct {
	Error   string `json:"error"`
	Request struct {
		Path string `json:"path"`
	} `json:"request"`
	Auth struct {
		Accessor string            `json:"accessor"`
		Metadata map[string]string `json:"metadata"`
	} `json:"auth"`
}

// responses reads the audit log's response entries, in order (OpenBao writes the entry before
// it answers, so a call the caller saw returned is in it).
func (s *Server) responses() ([]auditResponse, error) {
	f, err := os.Open(s.auditPath)
	if err != nil {
		return nil, fmt.Errorf("bao: audit log: %w", err)
	}
	defer f.Close()
	var out []auditResponse
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		var e struct {
			Type string `json:"type"`
			auditResponse
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("bao: audit log: %w", err)
		}
		if e.Type == "response" {
			out = append(out, e.auditResponse)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("bao: audit log: %w", err)
	}
	return out, nil
}

// Logins returns every login attempt at jwt-tenancy, in order, read from the audit log.
func (s *Server) Logins() ([]LoginEvent, error) {
	rs, err := s.responses()
	if err != nil {
		return nil, err
	}
	var out []LoginEvent
	for _, e := range rs {
		if e.Request.Path != "auth/"+AuthMount+"/login" {
			continue
		}
		if e.Error != "" || e.Auth.Accessor == "" {
			out = append(out, LoginEvent{Refused: true})
			continue
		}
		out = append(out, LoginEvent{EnvID: e.Auth.Metadata["env_id"], GrantJTI: e.Auth.Metadata["grant_jti"], Accessor: e.Auth.Accessor})
	}
	return out, nil
}

// RenewSelfs counts the successful `auth/token/renew-self` calls made with the token of this
// accessor: OpenBao's own record of a renewal, independent of what the caller says it did.
func (s *Server) RenewSelfs(accessor string) (int, error) {
	rs, err := s.responses()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range rs {
		if e.Error == "" && e.Request.Path == "auth/token/renew-self" && e.Auth.Accessor == accessor {
			n++
		}
	}
	return n, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return hex.EncodeToString(b)
}
