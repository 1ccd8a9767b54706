// Package baotest is an in-process fake of the slice of OpenBao the agent uses, answering in
// OpenBao's own JSON shapes: JWT login with ES256 deploy grants, token lookup/renew/revoke-self,
// KV v2 reads with versions and the see-env policy. It also resolves tokens for the tenancy fake
// (tenancytest.Verifier), the way real tenancy does with auth/token/lookup.
package baotest

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// Options shape the fake. Zero values take the defaults of record (PROTOCOL: jwt-tenancy,
// see-env, KV mount monky, tokens of 24 h renewable up to 30 days).
type Options struct {
	// PublicKey verifies login grants; use (*grant.Signer).PublicKey(). Required for Login.
	PublicKey *ecdsa.PublicKey
	AuthMount string
	Role      string
	KVMount   string
	TokenTTL  time.Duration
	MaxTTL    time.Duration
	// NotRenewable makes logins mint tokens whose renewable flag is false.
	NotRenewable bool
	// Clock drives token expiry and grant verification; nil means the wall clock.
	Clock func() time.Time
	// ReadLatency delays every KV read (for benchmarks; it sleeps, or stops early when the
	// client goes away).
	ReadLatency time.Duration
}

// Server is the fake. It is an http.Handler; Start and StartTLS also serve it on loopback.
type Server struct {
	// URL is the base address when started with Start or StartTLS.
	URL string

	opts Options
	hs   *httptest.Server

	mu       sync.Mutex
	tokens   map[string]*token
	kv       map[string]*kvEntry
	fails    map[string][]int
	hold     chan struct{}
	arrived  chan string
	logins   int
	renews   int
	revokes  int
	lookups  int
	reads    int
	readsOf  map[string]int
	inFlight int
	maxIn    int
}

type token struct {
	value, accessor string
	env, jti, role  string
	created         time.Time
	expires         time.Time
	renewable       bool
	revoked         bool
}

type kvEntry struct{ versions []kvVersion }

type kvVersion struct {
	data    map[string]any
	created time.Time
	deleted time.Time
}

// New returns the fake as a handler, not listening anywhere.
func New(opts Options) *Server {
	if opts.AuthMount == "" {
		opts.AuthMount = "jwt-tenancy"
	}
	if opts.Role == "" {
		opts.Role = "see-env"
	}
	if opts.KVMount == "" {
		opts.KVMount = "monky"
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = 24 * time.Hour
	}
	if opts.MaxTTL == 0 {
		opts.MaxTTL = 30 * 24 * time.Hour
	}
	return &Server{
		opts:    opts,
		tokens:  map[string]*token{},
		kv:      map[string]*kvEntry{},
		fails:   map[string][]int{},
		readsOf: map[string]int{},
	}
}

// Start serves a new fake over plain HTTP on loopback.
func Start(opts Options) *Server {
	s := New(opts)
	s.hs = httptest.NewServer(s)
	s.URL = s.hs.URL
	return s
}

// StartTLS serves a new fake over HTTPS with httptest's self-signed certificate (valid for
// 127.0.0.1 and example.com); CAPEM gives it for a CA file.
func StartTLS(opts Options) *Server {
	s := New(opts)
	s.hs = httptest.NewUnstartedServer(s)
	// A client refusing the certificate is what TLS tests provoke; keep it out of test output.
	s.hs.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.hs.StartTLS()
	s.URL = s.hs.URL
	return s
}

// Close stops a started fake.
func (s *Server) Close() {
	if s.hs != nil {
		s.hs.Close()
	}
}

// CAPEM is the PEM of the TLS certificate of a StartTLS fake (nil otherwise).
func (s *Server) CAPEM() []byte {
	if s.hs == nil || s.hs.TLS == nil {
		return nil
	}
	c := s.hs.Certificate()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// Certificate is the TLS certificate of a StartTLS fake (nil otherwise).
func (s *Server) Certificate() *x509.Certificate {
	if s.hs == nil || s.hs.TLS == nil {
		return nil
	}
	return s.hs.Certificate()
}

func (s *Server) now() time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock()
	}
	return time.Now()
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// --- test controls ---------------------------------------------------------------------------

// IssueToken mints a token of envID as if a grant with jti grantJTI had logged in.
func (s *Server) IssueToken(envID, grantJTI string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mintLocked(envID, grantJTI).value
}

func (s *Server) mintLocked(envID, jti string) *token {
	now := s.now()
	t := &token{
		value:     "s." + randHex(12),
		accessor:  randHex(12),
		env:       envID,
		jti:       jti,
		role:      s.opts.Role,
		created:   now,
		expires:   now.Add(s.opts.TokenTTL),
		renewable: !s.opts.NotRenewable,
	}
	s.tokens[t.value] = t
	return t
}

// SetTTL makes tok expire d from now (0 or less: expired now).
func (s *Server) SetTTL(tok string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tokens[tok]; t != nil {
		t.expires = s.now().Add(d)
	}
}

// SetRenewable sets tok's renewable flag.
func (s *Server) SetRenewable(tok string, renewable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tokens[tok]; t != nil {
		t.renewable = renewable
	}
}

// Revoke revokes tok as an operator (or tenancy, on a kit re-reveal) would.
func (s *Server) Revoke(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tokens[tok]; t != nil {
		t.revoked = true
	}
}

// Put writes key=value into <env>/see/<path> as a new version that keeps the other keys of
// the latest one, and returns the version number.
func (s *Server) Put(env, path, key, value string) int {
	full := env + "/see/" + path
	s.mu.Lock()
	defer s.mu.Unlock()
	data := map[string]any{}
	if e := s.kv[full]; e != nil && len(e.versions) > 0 {
		maps.Copy(data, e.versions[len(e.versions)-1].data)
	}
	data[key] = value
	return s.putLocked(full, data)
}

// PutData writes data as a new version of the full path (under the KV mount) and returns the
// version number. Values may be of any JSON type.
func (s *Server) PutData(fullPath string, data map[string]any) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.putLocked(fullPath, maps.Clone(data))
}

func (s *Server) putLocked(full string, data map[string]any) int {
	e := s.kv[full]
	if e == nil {
		e = &kvEntry{}
		s.kv[full] = e
	}
	e.versions = append(e.versions, kvVersion{data: data, created: s.now()})
	return len(e.versions)
}

// DeleteVersion soft-deletes one version of the full path, as `kv delete -versions=N` does.
func (s *Server) DeleteVersion(fullPath string, version int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.kv[fullPath]; e != nil && version >= 1 && version <= len(e.versions) {
		e.versions[version-1].deleted = s.now()
	}
}

// FailNext makes the next n requests to path (e.g. "/v1/auth/token/lookup-self" or
// "/v1/monky/data/env-a/see/db") answer status with an OpenBao error body, before any other
// check. A path without a leading slash is taken as relative to /v1/.
func (s *Server) FailNext(path string, status, n int) {
	if !strings.HasPrefix(path, "/") {
		path = "/v1/" + path
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.fails[path] = append(s.fails[path], status)
	}
}

// HoldReads makes every KV read wait, once counted as in flight, until release is called or
// its client goes away. Each held read sends its path on arrived, so a test can wait for N
// reads to be in flight at once without sleeping.
func (s *Server) HoldReads() (arrived <-chan string, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hold := make(chan struct{})
	ch := make(chan string, 1024)
	s.hold, s.arrived = hold, ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			if s.hold == hold {
				s.hold, s.arrived = nil, nil
			}
			s.mu.Unlock()
			close(hold)
		})
	}
}

// Counters. Logins, Renews, Revokes and Lookups count successful calls; Reads counts KV reads
// answered 200, ReadsOf those of one full path; MaxInFlight is the most KV reads ever being
// served at once.
func (s *Server) Logins() int  { return s.count(&s.logins) }
func (s *Server) Renews() int  { return s.count(&s.renews) }
func (s *Server) Revokes() int { return s.count(&s.revokes) }
func (s *Server) Lookups() int { return s.count(&s.lookups) }
func (s *Server) Reads() int   { return s.count(&s.reads) }

// ReadsOf counts the successful reads of one full path under the KV mount.
func (s *Server) ReadsOf(fullPath string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readsOf[fullPath]
}

// MaxInFlight is the largest number of KV reads served concurrently so far.
func (s *Server) MaxInFlight() int { return s.count(&s.maxIn) }

func (s *Server) count(p *int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *p
}

// Verify resolves a token to its env_id and grant_jti (tenancytest.Verifier). Unknown, revoked
// and expired tokens are errors.
func (s *Server) Verify(_ context.Context, tok string) (envID, grantJTI string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, err := s.liveLocked(tok)
	if err != nil {
		return "", "", err
	}
	return t.env, t.jti, nil
}

var (
	errUnknown = errors.New("baotest: unknown token")
	errRevoked = errors.New("baotest: token revoked")
	errExpired = errors.New("baotest: token expired")
)

func (s *Server) liveLocked(tok string) (*token, error) {
	t := s.tokens[tok]
	switch {
	case t == nil:
		return nil, errUnknown
	case t.revoked:
		return nil, errRevoked
	case !s.now().Before(t.expires):
		return nil, errExpired
	}
	return t, nil
}

// --- HTTP ------------------------------------------------------------------------------------

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, msgs ...string) {
	if msgs == nil {
		msgs = []string{}
	}
	writeJSON(w, status, map[string]any{"errors": msgs})
}

func denied(w http.ResponseWriter) { writeErr(w, http.StatusForbidden, "permission denied") }

func bearer(r *http.Request) string {
	if t := r.Header.Get("X-Vault-Token"); t != "" {
		return t
	}
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return a
	}
	return ""
}

// lockToken takes the fake's lock and returns the live token r bears, for a handler that goes on
// holding the lock. For a bearer that is missing, unknown, revoked or expired it releases the
// lock, answers 403 permission denied as OpenBao does, and returns nil.
func (s *Server) lockToken(w http.ResponseWriter, r *http.Request) *token {
	s.mu.Lock()
	t, err := s.liveLocked(bearer(r))
	if err != nil {
		s.mu.Unlock()
		denied(w)
		return nil
	}
	return t
}

// ServeHTTP routes the handful of OpenBao paths the agent calls.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if q := s.fails[r.URL.Path]; len(q) > 0 {
		status := q[0]
		s.fails[r.URL.Path] = q[1:]
		s.mu.Unlock()
		if status == http.StatusForbidden {
			denied(w)
		} else {
			writeErr(w, status, "injected failure")
		}
		return
	}
	s.mu.Unlock()

	p := r.URL.Path
	put := r.Method == http.MethodPut || r.Method == http.MethodPost
	switch {
	case p == "/v1/auth/"+s.opts.AuthMount+"/login" && put:
		s.login(w, r)
	case p == "/v1/auth/token/lookup-self" && r.Method == http.MethodGet:
		s.lookupSelf(w, r)
	case p == "/v1/auth/token/renew-self" && put:
		s.renewSelf(w, r)
	case p == "/v1/auth/token/revoke-self" && put:
		s.revokeSelf(w, r)
	case strings.HasPrefix(p, "/v1/"+s.opts.KVMount+"/data/") && r.Method == http.MethodGet:
		s.readKV(w, r, strings.TrimPrefix(p, "/v1/"+s.opts.KVMount+"/data/"))
	default:
		// OpenBao answers a non-root token's call to an unknown path with 403, not 404.
		denied(w)
	}
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Role string `json:"role"`
		JWT  string `json:"jwt"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
		writeErr(w, http.StatusBadRequest, "failed to parse JSON input")
		return
	}
	switch {
	case body.Role == "":
		writeErr(w, http.StatusBadRequest, "missing role")
		return
	case body.Role != s.opts.Role:
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("role %q could not be found", body.Role))
		return
	case body.JWT == "":
		writeErr(w, http.StatusBadRequest, "missing token")
		return
	}
	// The jwt mount keeps no replay state: a grant logs in as often as it likes until exp. A
	// superseded grant is refused by tenancy at the next bearer call, not here.
	c, err := grant.Verify(body.JWT, s.opts.PublicKey, s.now())
	if err != nil {
		writeErr(w, http.StatusBadRequest, loginMessage(err))
		return
	}
	s.mu.Lock()
	t := s.mintLocked(c.EnvID, c.ID)
	s.logins++
	resp := s.authLocked(t)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// loginMessage words a grant failure the way OpenBao's jwt auth method does.
func loginMessage(err error) string {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return "error validating claims: token is expired (exp)"
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return "error validating claims: invalid audience (aud) claim: audience claim does not match any expected audience"
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return "error validating token: error verifying token signature: no known key successfully validated the token signature"
	case errors.Is(err, jwt.ErrTokenMalformed):
		return "error validating token: token is malformed"
	default:
		return `error validating claims: claim "kind" does not match any associated bound claim values`
	}
}

func (s *Server) authLocked(t *token) map[string]any {
	return map[string]any{
		"request_id":     randHex(8),
		"lease_id":       "",
		"renewable":      false,
		"lease_duration": 0,
		"data":           nil,
		"warnings":       nil,
		"auth": map[string]any{
			"client_token":   t.value,
			"accessor":       t.accessor,
			"policies":       []string{"default", "see-env"},
			"token_policies": []string{"default", "see-env"},
			"metadata":       map[string]string{"env_id": t.env, "grant_jti": t.jti, "role": t.role},
			"lease_duration": int(t.expires.Sub(s.now()) / time.Second),
			"renewable":      t.renewable,
			"entity_id":      "entity-" + t.env,
			"token_type":     "service",
			"orphan":         true,
		},
	}
}

func (s *Server) lookupSelf(w http.ResponseWriter, r *http.Request) {
	t := s.lockToken(w, r)
	if t == nil {
		return
	}
	s.lookups++
	now := s.now()
	data := map[string]any{
		"accessor":         t.accessor,
		"creation_ttl":     int(s.opts.TokenTTL / time.Second),
		"display_name":     "jwt-tenancy-agent:" + t.env,
		"entity_id":        "entity-" + t.env,
		"expire_time":      t.expires.UTC().Format(time.RFC3339Nano),
		"explicit_max_ttl": 0,
		// Real OpenBao echoes the token itself here; the client must drop it.
		"id":         t.value,
		"issue_time": t.created.UTC().Format(time.RFC3339Nano),
		"meta":       map[string]string{"env_id": t.env, "grant_jti": t.jti, "role": t.role},
		"num_uses":   0,
		"orphan":     true,
		"path":       "auth/" + s.opts.AuthMount + "/login",
		"policies":   []string{"default", "see-env"},
		"renewable":  t.renewable,
		"ttl":        int(t.expires.Sub(now) / time.Second),
		"type":       "service",
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"request_id": randHex(8), "data": data})
}

func (s *Server) renewSelf(w http.ResponseWriter, r *http.Request) {
	t := s.lockToken(w, r)
	if t == nil {
		return
	}
	if !t.renewable {
		s.mu.Unlock()
		writeErr(w, http.StatusBadRequest, "lease is not renewable")
		return
	}
	exp := s.now().Add(s.opts.TokenTTL)
	if maxExp := t.created.Add(s.opts.MaxTTL); exp.After(maxExp) {
		exp = maxExp
	}
	t.expires = exp
	s.renews++
	resp := s.authLocked(t)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

func (s *Server) revokeSelf(w http.ResponseWriter, r *http.Request) {
	t := s.lockToken(w, r)
	if t == nil {
		return
	}
	t.revoked = true
	s.revokes++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) readKV(w http.ResponseWriter, r *http.Request, path string) {
	t := s.lockToken(w, r)
	if t == nil {
		return
	}
	// The see-env policy: a token reads only <mount>/data/<its env_id>/see/*.
	if !strings.HasPrefix(path, t.env+"/see/") {
		s.mu.Unlock()
		denied(w)
		return
	}
	s.inFlight++
	s.maxIn = max(s.maxIn, s.inFlight)
	hold, arrived := s.hold, s.arrived
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()

	if hold != nil {
		arrived <- path
		select {
		case <-hold:
		case <-r.Context().Done():
			return
		}
	}
	if s.opts.ReadLatency > 0 {
		tm := time.NewTimer(s.opts.ReadLatency)
		select {
		case <-tm.C:
		case <-r.Context().Done():
			tm.Stop()
			return
		}
	}

	version := 0
	if v := r.URL.Query().Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeErr(w, http.StatusBadRequest, "invalid version")
			return
		}
		version = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.kv[path]
	if e == nil || len(e.versions) == 0 {
		writeErr(w, http.StatusNotFound)
		return
	}
	if version == 0 {
		version = len(e.versions)
	}
	if version > len(e.versions) {
		writeErr(w, http.StatusNotFound)
		return
	}
	kv := e.versions[version-1]
	meta := map[string]any{
		"created_time":    kv.created.UTC().Format(time.RFC3339Nano),
		"custom_metadata": nil,
		"deletion_time":   "",
		"destroyed":       false,
		"version":         version,
	}
	if !kv.deleted.IsZero() {
		meta["deletion_time"] = kv.deleted.UTC().Format(time.RFC3339Nano)
		writeJSON(w, http.StatusNotFound, map[string]any{"data": map[string]any{"data": nil, "metadata": meta}})
		return
	}
	s.reads++
	s.readsOf[path]++
	writeJSON(w, http.StatusOK, map[string]any{
		"request_id":     randHex(8),
		"lease_id":       "",
		"renewable":      false,
		"lease_duration": 0,
		"data":           map[string]any{"data": kv.data, "metadata": meta},
		"wrap_info":      nil,
		"warnings":       nil,
		"auth":           nil,
	})
}
