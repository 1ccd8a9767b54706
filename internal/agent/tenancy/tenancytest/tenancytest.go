// Package tenancytest is an in-process fake of monky-tenancy's agent entrypoint (check-in,
// bundle, lease, report) that follows the agent protocol of record, for unit tests, end-to-end
// tests and a development stack. It serves many envs at once, records every call, and fails on
// demand: injected statuses, malformed bodies, stalled answers, rate-limited leases, AppRole-era
// lease shapes and superseded grants. It also keeps, per env, the view tenancy's admin API
// serves (AdminAgent): what the agents really checked in and reported, for fleetctl's fakes.
package tenancytest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// Verifier resolves the bearer of an agent call, as real tenancy does with OpenBao's
// auth/token/lookup. Verify returns the env the token belongs to and the jti of the deploy grant
// it was minted from, or an error for a token that is unknown, revoked or expired (the fake
// answers 401 AGENT_UNAUTHENTICATED). It must be safe for concurrent use. baotest.Server
// implements it.
type Verifier interface {
	Verify(ctx context.Context, token string) (envID, grantJTI string, err error)
}

// Endpoint names one of the four agent endpoints, for failure injection.
type Endpoint string

// The agent endpoints.
const (
	Checkin Endpoint = "checkin"
	Bundle  Endpoint = "bundle"
	Lease   Endpoint = "lease"
	Report  Endpoint = "report"
)

// LeaseShape is the body a lease is answered with.
type LeaseShape int

const (
	// LeaseNormal is tenancy's AgentLeaseOut: {env_id, login_jwt, ttl_s, mount, role, addr}.
	LeaseNormal LeaseShape = iota
	// LeaseAppRole is the pre-Gate-1 body {wrapping_token, role_id}: the agent must refuse it.
	LeaseAppRole
	// LeaseMissingJWT is the normal body without login_jwt.
	LeaseMissingJWT
	// LeaseLegacyVault carries the address only in a nested vault{addr, mount}.
	LeaseLegacyVault
)

// ErrorShape is how error bodies are written.
type ErrorShape int

const (
	// ErrorTopLevel is {"code": "X", "message": "…"}.
	ErrorTopLevel ErrorShape = iota
	// ErrorFastAPI is {"detail": {"code": "X", "message": "…"}}.
	ErrorFastAPI
	// ErrorPlainDetail is {"detail": "X: …"} (just the message when there is no code).
	ErrorPlainDetail
)

// Options configure the fake. Zero values take the defaults of record.
type Options struct {
	// Verifier resolves bearers. Required.
	Verifier Verifier
	// Signer signs lease login grants and install-kit grants. Required for Lease and RevealKit.
	Signer *grant.Signer
	// Clock drives the lease rate limit and record times (wall clock when nil).
	Clock func() time.Time
	// Sha computes a bundle's sha (BundleSha when nil).
	Sha func(files map[string]string) string
	// LeaseLimit leases are granted per env per LeaseWindow (5 and 1 h when zero; see
	// SetLeaseLimit for a limit of 0).
	LeaseLimit  int
	LeaseWindow time.Duration
	// GrantTTL is the lifetime of signed grants and the lease's ttl_s (1 h when zero).
	GrantTTL time.Duration
	// BaoAddr is the OpenBao address handed out in vault.addr and the lease's addr.
	BaoAddr string
	// KVMount, AuthMount, AuthRole fill the check-in's vault block (monky, jwt-tenancy, see-env).
	KVMount, AuthMount, AuthRole string
	// CheckinIntervalS is the check-in interval handed out (60 when zero).
	CheckinIntervalS int
	// OnUpdate, when set, is called with an env whenever its admin view (AdminAgent) changes:
	// after an accepted check-in or report, BEFORE the agent receives its answer (so whoever
	// mirrors the view is up to date once the agent's call returns), and after the control
	// calls AddEnv, SetDesired, SetDesiredRaw, Retire, SetCheckinInterval and SetSite. It runs
	// outside the fake's lock, on the caller's goroutine, and may call back into the fake.
	OnUpdate func(env string)
}

// Call is what every record holds: the env the call was about (from the body or URL, else the
// token's), the status answered and its error code.
type Call struct {
	EnvID  string
	Status int
	Code   string
	At     time.Time
}

// CheckinRecord is one check-in. Response is nil unless Status is 200 from the fake itself.
type CheckinRecord struct {
	Call
	Request  protocol.CheckinRequest
	Response *protocol.CheckinResponse
}

// LeaseRecord is one lease request; GrantJTI is the jti of the grant handed out, if any.
type LeaseRecord struct {
	Call
	Request  protocol.LeaseRequest
	GrantJTI string
}

// ReportRecord is one report.
type ReportRecord struct {
	Call
	Report protocol.Report
}

// BundleRecord is one bundle fetch.
type BundleRecord struct {
	Call
	Sha string
}

type envState struct {
	desired      string
	bundles      map[string]map[string]string
	retired      bool
	purgeVolumes bool
	interval     int
	vault        *protocol.Vault
	shape        LeaseShape
	leaseTimes   []time.Time
	issued       []string // jtis of grants tenancy signed for this env

	// The admin view: what tenancy remembers of the agent's last accepted calls.
	site         string
	desiredAt    time.Time
	lastCheckin  *protocol.CheckinRequest
	checkinAt    time.Time
	applied      string
	lastResult   string
	lastDetail   string
	resultAt     time.Time
	upgradedFrom string
	// Operator truth (issue 20): the action the last check-in was answered with, and the tick
	// of the last report.
	lastAction   string
	resultTickID string

	// Issue 22: apply windows the check-in answers carry (nil: none sent), and ignore_window.
	windows      *[]string
	windowsTZ    *string
	ignoreWindow bool
}

type injection struct {
	status int
	code   string
	body   *string
}

type stall struct {
	arrived chan struct{}
	release chan struct{}
}

// Server is the fake tenancy. It is an http.Handler; Start also serves it on loopback.
type Server struct {
	// URL is the base URL when started with Start.
	URL string

	opts Options
	mux  *http.ServeMux
	hs   *httptest.Server

	mu         sync.Mutex
	envs       map[string]*envState
	superseded map[string]bool
	inject     map[Endpoint][]injection
	stalls     map[Endpoint]*stall
	errShape   ErrorShape
	leaseLimit int
	hdrName    string
	hdrValue   string

	checkins []CheckinRecord
	leases   []LeaseRecord
	reports  []ReportRecord
	bundles  []BundleRecord
}

// BundleSha is PROTOCOL's bundle sha: lowercase hex SHA-256 over, for each file in byte order
// of its path, path + "\n" + decimal byte length + "\n" + content.
func BundleSha(files map[string]string) string {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		io.WriteString(h, p+"\n"+strconv.Itoa(len(files[p]))+"\n")
		io.WriteString(h, files[p])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// New returns the fake as a handler, not listening anywhere.
func New(opts Options) *Server {
	if opts.Sha == nil {
		opts.Sha = BundleSha
	}
	if opts.LeaseLimit == 0 {
		opts.LeaseLimit = 5
	}
	if opts.LeaseWindow == 0 {
		opts.LeaseWindow = time.Hour
	}
	if opts.GrantTTL == 0 {
		opts.GrantTTL = time.Hour
	}
	if opts.BaoAddr == "" {
		opts.BaoAddr = "https://bao.cbs.tikali.net:8200"
	}
	if opts.KVMount == "" {
		opts.KVMount = "monky"
	}
	if opts.AuthMount == "" {
		opts.AuthMount = "jwt-tenancy"
	}
	if opts.AuthRole == "" {
		opts.AuthRole = "see-env"
	}
	if opts.CheckinIntervalS == 0 {
		opts.CheckinIntervalS = 60
	}
	s := &Server{
		opts:       opts,
		envs:       map[string]*envState{},
		superseded: map[string]bool{},
		inject:     map[Endpoint][]injection{},
		stalls:     map[Endpoint]*stall{},
		leaseLimit: opts.LeaseLimit,
		hdrName:    "X-Bundle-Sha",
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /v1/agent/checkin", s.checkin)
	s.mux.HandleFunc("POST /v1/agent/lease", s.lease)
	s.mux.HandleFunc("POST /v1/agent/report", s.report)
	s.mux.HandleFunc("GET /v1/agent/bundle/{env}/{sha}", s.bundle)
	return s
}

// Start serves a new fake on loopback over plain HTTP (tenancy is plain HTTP inside the mesh).
func Start(opts Options) *Server {
	s := New(opts)
	s.hs = httptest.NewServer(s)
	s.URL = s.hs.URL
	return s
}

// Close stops a started fake, releasing any stalled request first.
func (s *Server) Close() {
	s.mu.Lock()
	for ep, st := range s.stalls {
		close(st.release)
		delete(s.stalls, ep)
	}
	s.mu.Unlock()
	if s.hs != nil {
		s.hs.Close()
	}
}

// ServeHTTP serves the agent endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) now() time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock()
	}
	return time.Now()
}

// --- state controls --------------------------------------------------------------------------

func (s *Server) envLocked(env string) *envState {
	st := s.envs[env]
	if st == nil {
		st = &envState{bundles: map[string]map[string]string{}, interval: s.opts.CheckinIntervalS}
		s.envs[env] = st
	}
	return st
}

// AddEnv registers env with no desired bundle (check-ins answer none).
func (s *Server) AddEnv(env string) {
	s.mu.Lock()
	s.envLocked(env)
	s.mu.Unlock()
	s.notify(env)
}

// SetSite records env's site, as tenancy's backend registry holds it (the admin view's site).
func (s *Server) SetSite(env, site string) {
	s.mu.Lock()
	s.envLocked(env).site = site
	s.mu.Unlock()
	s.notify(env)
}

// notify runs OnUpdate for env; the lock must not be held.
func (s *Server) notify(env string) {
	if s.opts.OnUpdate != nil {
		s.opts.OnUpdate(env)
	}
}

// SetDesired makes files env's desired bundle and returns its sha. It also un-retires env.
func (s *Server) SetDesired(env string, files map[string]string) string {
	sha := s.opts.Sha(files)
	s.SetDesiredRaw(env, sha, files)
	return sha
}

// SetDesiredRaw serves files under sha, which need not be their sha (to provoke
// BUNDLE_SHA_MISMATCH).
func (s *Server) SetDesiredRaw(env, sha string, files map[string]string) {
	cp := make(map[string]string, len(files))
	for k, v := range files {
		cp[k] = v
	}
	s.mu.Lock()
	st := s.envLocked(env)
	st.bundles[sha] = cp
	if st.desired != sha {
		st.desiredAt = s.now()
	}
	st.desired = sha
	st.retired = false
	s.mu.Unlock()
	s.notify(env)
}

// Retire makes env's check-ins answer down, with purge_volumes as given.
func (s *Server) Retire(env string, purgeVolumes bool) {
	s.mu.Lock()
	st := s.envLocked(env)
	st.retired, st.purgeVolumes = true, purgeVolumes
	s.mu.Unlock()
	s.notify(env)
}

// SetCheckinInterval sets env's checkin_interval_s.
func (s *Server) SetCheckinInterval(env string, secs int) {
	s.mu.Lock()
	s.envLocked(env).interval = secs
	s.mu.Unlock()
	s.notify(env)
}

// SetApplyWindows makes env's check-in answers carry apply_windows and apply_windows_tz (nil:
// the field is left out, so the agent keeps its config's) and ignore_window.
func (s *Server) SetApplyWindows(env string, windows []string, tz *string, ignore bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.envLocked(env)
	st.windows, st.windowsTZ, st.ignoreWindow = nil, tz, ignore
	if windows != nil {
		w := append([]string{}, windows...)
		st.windows = &w
	}
}

// SetVault replaces env's vault block (default: BaoAddr, KVMount, <env>/see, AuthMount, AuthRole).
func (s *Server) SetVault(env string, v protocol.Vault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.envLocked(env).vault = &v
}

// SetLeaseShape selects the body env's leases are answered with.
func (s *Server) SetLeaseShape(env string, shape LeaseShape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.envLocked(env).shape = shape
}

// SetLeaseLimit sets how many leases each env gets per window; 0 refuses every lease.
func (s *Server) SetLeaseLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaseLimit = n
}

// SetErrorShape selects how error bodies are written.
func (s *Server) SetErrorShape(shape ErrorShape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errShape = shape
}

// SetBundleHeader sets the sha header of bundle answers: name is X-Bundle-Sha (default),
// X-Bundle-Sha256, or "" for none; a non-empty value is sent instead of the true sha.
func (s *Server) SetBundleHeader(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hdrName, s.hdrValue = name, value
}

// RevealKit is an operator revealing env's install kit again: every grant tenancy signed for
// env so far is superseded (tokens minted from them get 401 at their next call) and a fresh
// bootstrap grant is returned. It panics without a Signer.
func (s *Server) RevealKit(env string) (bootstrapJWT string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.envLocked(env)
	s.supersedeLocked(st)
	tok, jti, err := s.opts.Signer.Sign(env, s.opts.GrantTTL)
	if err != nil {
		panic(fmt.Sprintf("tenancytest: RevealKit: %v", err))
	}
	st.issued = append(st.issued, jti)
	return tok
}

// Supersede supersedes every grant tenancy signed for env so far, without a new kit (retire).
func (s *Server) Supersede(env string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.supersedeLocked(s.envLocked(env))
}

// SupersedeJTI supersedes one grant by jti, including one this fake did not sign.
func (s *Server) SupersedeJTI(jti string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.superseded[jti] = true
}

func (s *Server) supersedeLocked(st *envState) {
	for _, j := range st.issued {
		s.superseded[j] = true
	}
}

// FailNext makes the next n calls to ep answer status with an error body carrying code
// (message "injected failure"), before any other check.
func (s *Server) FailNext(ep Endpoint, status int, code string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.inject[ep] = append(s.inject[ep], injection{status: status, code: code})
	}
}

// MalformNext makes the next n calls to ep answer 200 with body verbatim.
func (s *Server) MalformNext(ep Endpoint, body string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.inject[ep] = append(s.inject[ep], injection{status: http.StatusOK, body: &body})
	}
}

// Stall holds every call to ep until release is called or its client goes away; each held
// call signals arrived (buffered, never blocking the fake). Tests time out a client against it
// without sleeping.
func (s *Server) Stall(ep Endpoint) (arrived <-chan struct{}, release func()) {
	st := &stall{arrived: make(chan struct{}, 64), release: make(chan struct{})}
	s.mu.Lock()
	if old := s.stalls[ep]; old != nil {
		close(old.release)
	}
	s.stalls[ep] = st
	s.mu.Unlock()
	var once sync.Once
	return st.arrived, func() {
		once.Do(func() {
			s.mu.Lock()
			if s.stalls[ep] == st {
				delete(s.stalls, ep)
				close(st.release)
			}
			s.mu.Unlock()
		})
	}
}

// --- records ---------------------------------------------------------------------------------

func filter[T any](all []T, env string, envOf func(T) string) []T {
	out := []T{}
	for _, r := range all {
		if env == "" || envOf(r) == env {
			out = append(out, r)
		}
	}
	return out
}

// Checkins returns env's check-ins in order ("" for every env).
func (s *Server) Checkins(env string) []CheckinRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filter(s.checkins, env, func(r CheckinRecord) string { return r.EnvID })
}

// Leases returns env's lease requests in order, refused ones included.
func (s *Server) Leases(env string) []LeaseRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filter(s.leases, env, func(r LeaseRecord) string { return r.EnvID })
}

// LeasesGranted counts env's leases answered 200 by the fake itself (not by MalformNext).
func (s *Server) LeasesGranted(env string) int {
	n := 0
	for _, r := range s.Leases(env) {
		if r.Status == http.StatusOK && r.Code == "" {
			n++
		}
	}
	return n
}

// Reports returns env's reports in order.
func (s *Server) Reports(env string) []ReportRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filter(s.reports, env, func(r ReportRecord) string { return r.EnvID })
}

// LastReport returns env's latest accepted report.
func (s *Server) LastReport(env string) (protocol.Report, bool) {
	rs := s.Reports(env)
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Status == http.StatusOK {
			return rs[i].Report, true
		}
	}
	return protocol.Report{}, false
}

// BundleFetches returns env's bundle fetches in order.
func (s *Server) BundleFetches(env string) []BundleRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return filter(s.bundles, env, func(r BundleRecord) string { return r.EnvID })
}

// --- HTTP ------------------------------------------------------------------------------------

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) writeError(w http.ResponseWriter, status int, code, msg string) {
	s.mu.Lock()
	shape := s.errShape
	s.mu.Unlock()
	var body any
	switch shape {
	case ErrorFastAPI:
		body = map[string]any{"detail": map[string]string{"code": code, "message": msg}}
	case ErrorPlainDetail:
		d := msg
		if code != "" {
			d = code + ": " + msg
		}
		body = map[string]any{"detail": d}
	default:
		body = map[string]string{"code": code, "message": msg}
	}
	writeJSON(w, status, body)
}

// pre runs what precedes every endpoint: a stall, then an injected answer. It reports whether
// the call was answered (and how, for the record).
func (s *Server) pre(ep Endpoint, w http.ResponseWriter, r *http.Request) (answered bool, status int, code string) {
	s.mu.Lock()
	st := s.stalls[ep]
	s.mu.Unlock()
	if st != nil {
		select {
		case st.arrived <- struct{}{}:
		default:
		}
		select {
		case <-st.release:
		case <-r.Context().Done():
			return true, 0, "CLIENT_GONE"
		}
	}
	s.mu.Lock()
	q := s.inject[ep]
	if len(q) == 0 {
		s.mu.Unlock()
		return false, 0, ""
	}
	inj := q[0]
	s.inject[ep] = q[1:]
	s.mu.Unlock()
	if inj.body != nil {
		w.Header().Set("Content-Type", "application/json")
		if ep == Bundle {
			w.Header().Set("X-Bundle-Sha", strings.Repeat("0", 64))
		}
		w.WriteHeader(inj.status)
		_, _ = io.WriteString(w, *inj.body)
		return true, inj.status, "MALFORMED"
	}
	if inj.status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "60")
	}
	s.writeError(w, inj.status, inj.code, "injected failure")
	return true, inj.status, inj.code
}

// authn checks the bearer and answers 401 itself when it fails.
func (s *Server) authn(w http.ResponseWriter, r *http.Request) (env string, ok bool) {
	tok, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found || tok == "" {
		s.writeError(w, http.StatusUnauthorized, protocol.CodeUnauthenticated, "missing bearer token")
		return "", false
	}
	env, jti, err := s.opts.Verifier.Verify(r.Context(), tok)
	if err != nil {
		s.writeError(w, http.StatusUnauthorized, protocol.CodeUnauthenticated, "bearer refused")
		return "", false
	}
	s.mu.Lock()
	sup := s.superseded[jti]
	s.mu.Unlock()
	if sup {
		s.writeError(w, http.StatusUnauthorized, protocol.CodeUnauthenticated, "bearer refused: deploy grant superseded (kit re-revealed or backend retired)")
		return "", false
	}
	return env, true
}

func (s *Server) mismatch(w http.ResponseWriter, tokenEnv, env string) bool {
	if tokenEnv == env {
		return false
	}
	s.writeError(w, http.StatusForbidden, protocol.CodeEnvMismatch,
		fmt.Sprintf("token belongs to %s, not %s", tokenEnv, env))
	return true
}

func decodeBody(r *http.Request, v any) error {
	return json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(v)
}

func (s *Server) vaultLocked(env string, st *envState) protocol.Vault {
	if st.vault != nil {
		return *st.vault
	}
	return protocol.Vault{Addr: s.opts.BaoAddr, Mount: s.opts.KVMount, Prefix: env + "/see",
		AuthMount: s.opts.AuthMount, AuthRole: s.opts.AuthRole}
}

// rec is filled by a handler and appended by the deferred record call.
type rec struct {
	env    string
	status int
	code   string
}

// record appends the call rc describes, through add, to its endpoint's records. Handlers defer
// it first, so that every call is recorded however it ends; add's closure reads the handler's
// body and answer as they stand when the handler returns.
func (s *Server) record(rc *rec, add func(Call)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	add(Call{EnvID: rc.env, Status: rc.status, Code: rc.code, At: s.now()})
}

// agentBody is the JSON body of an agent call, as admit needs it.
type agentBody struct {
	into  any           // where the body decodes to
	env   func() string // the env_id the decoded body names
	valid func() bool   // further checks besides a non-empty env_id; nil for none
	want  string        // what the 422 says the body must be
}

// admit runs what precedes every agent endpoint's own logic, in the order tenancy checks:
// stall and failure injection, the bearer, the body when there is one, then that the token's
// env is the env the call is about (rc.env, from the URL when body is nil). It returns false
// when it has answered the call itself, with rc saying how. A refused call is still recorded
// under the env it was about, from its body, as far as the body can be read.
func (s *Server) admit(ep Endpoint, w http.ResponseWriter, r *http.Request, rc *rec, body *agentBody) bool {
	envFromBody := func() {
		if body != nil {
			_ = decodeBody(r, body.into)
			rc.env = body.env()
		}
	}
	if done, st, code := s.pre(ep, w, r); done {
		rc.status, rc.code = st, code
		envFromBody()
		return false
	}
	tokenEnv, ok := s.authn(w, r)
	if !ok {
		envFromBody()
		rc.status, rc.code = http.StatusUnauthorized, protocol.CodeUnauthenticated
		return false
	}
	if body != nil {
		rc.env = tokenEnv
		if err := decodeBody(r, body.into); err != nil || body.env() == "" || (body.valid != nil && !body.valid()) {
			rc.status, rc.code = http.StatusUnprocessableEntity, "INVALID_REQUEST"
			s.writeError(w, rc.status, rc.code, "body must be "+body.want)
			return false
		}
		rc.env = body.env()
	}
	if s.mismatch(w, tokenEnv, rc.env) {
		rc.status, rc.code = http.StatusForbidden, protocol.CodeEnvMismatch
		return false
	}
	return true
}

// lockBackend takes the fake's lock and returns env's state, for a handler that goes on holding
// the lock. For a backend tenancy does not know, it releases the lock, answers 404
// BACKEND_UNKNOWN itself (rc says so) and returns nil.
func (s *Server) lockBackend(w http.ResponseWriter, rc *rec, env string) *envState {
	s.mu.Lock()
	st := s.envs[env]
	if st == nil {
		s.mu.Unlock()
		rc.status, rc.code = http.StatusNotFound, protocol.CodeBackendUnknown
		s.writeError(w, rc.status, rc.code, "no backend "+env)
	}
	return st
}

func (s *Server) checkin(w http.ResponseWriter, r *http.Request) {
	var req protocol.CheckinRequest
	var resp *protocol.CheckinResponse
	rc := rec{}
	defer s.record(&rc, func(c Call) {
		s.checkins = append(s.checkins, CheckinRecord{Call: c, Request: req, Response: resp})
	})
	if !s.admit(Checkin, w, r, &rc, &agentBody{into: &req, env: func() string { return req.EnvID },
		want: "a check-in with env_id"}) {
		return
	}
	st := s.lockBackend(w, &rc, req.EnvID)
	if st == nil {
		return
	}
	applied := ""
	if req.AppliedSha != nil {
		applied = *req.AppliedSha
	}
	out := protocol.CheckinResponse{
		EnvID:            req.EnvID,
		DesiredSha:       st.desired,
		Action:           protocol.ActionNone,
		CheckinIntervalS: st.interval,
		Vault:            s.vaultLocked(req.EnvID, st),
		ApplyWindows:     st.windows,
		ApplyWindowsTZ:   st.windowsTZ,
		IgnoreWindow:     st.ignoreWindow,
	}
	switch {
	case st.retired:
		out.Action, out.PurgeVolumes = protocol.ActionDown, st.purgeVolumes
	case st.desired != "" && st.desired != applied:
		out.Action = protocol.ActionApply
	}
	if st.desired != "" {
		out.BundleURL = "/v1/agent/bundle/" + req.EnvID + "/" + st.desired
	}
	s.rememberCheckinLocked(st, req)
	st.lastAction = out.Action
	s.mu.Unlock()
	resp, rc.status = &out, http.StatusOK
	s.notify(req.EnvID)
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) bundle(w http.ResponseWriter, r *http.Request) {
	env, sha := r.PathValue("env"), r.PathValue("sha")
	rc := rec{env: env}
	defer s.record(&rc, func(c Call) {
		s.bundles = append(s.bundles, BundleRecord{Call: c, Sha: sha})
	})
	if !s.admit(Bundle, w, r, &rc, nil) {
		return
	}
	s.mu.Lock()
	var files map[string]string
	if st := s.envs[env]; st != nil {
		files = st.bundles[sha]
	}
	name, value := s.hdrName, s.hdrValue
	s.mu.Unlock()
	if files == nil {
		rc.status, rc.code = http.StatusNotFound, "BUNDLE_UNKNOWN"
		s.writeError(w, rc.status, rc.code, "no bundle "+sha+" for "+env)
		return
	}
	if name != "" {
		if value == "" {
			value = sha
		}
		w.Header().Set(name, value)
	}
	rc.status = http.StatusOK
	writeJSON(w, http.StatusOK, protocol.BundleBody{Files: files})
}

func (s *Server) lease(w http.ResponseWriter, r *http.Request) {
	var req protocol.LeaseRequest
	rc := rec{}
	jti := ""
	defer s.record(&rc, func(c Call) {
		s.leases = append(s.leases, LeaseRecord{Call: c, Request: req, GrantJTI: jti})
	})
	if !s.admit(Lease, w, r, &rc, &agentBody{into: &req, env: func() string { return req.EnvID },
		want: "a lease request with env_id"}) {
		return
	}
	st := s.lockBackend(w, &rc, req.EnvID)
	if st == nil {
		return
	}
	now := s.now()
	cut := now.Add(-s.opts.LeaseWindow)
	kept := st.leaseTimes[:0]
	for _, t := range st.leaseTimes {
		if t.After(cut) {
			kept = append(kept, t)
		}
	}
	st.leaseTimes = kept
	if len(kept) >= s.leaseLimit {
		retry := s.opts.LeaseWindow
		if len(kept) > 0 {
			retry = kept[0].Add(s.opts.LeaseWindow).Sub(now)
		}
		s.mu.Unlock()
		rc.status, rc.code = http.StatusTooManyRequests, protocol.CodeLeaseRateLimited
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(max(retry.Seconds(), 1)))))
		s.writeError(w, rc.status, rc.code,
			fmt.Sprintf("%d leases per %s per backend", s.leaseLimit, s.opts.LeaseWindow))
		return
	}
	shape := st.shape
	var loginJWT string
	if shape == LeaseNormal || shape == LeaseLegacyVault {
		var err error
		loginJWT, jti, err = s.opts.Signer.Sign(req.EnvID, s.opts.GrantTTL)
		if err != nil {
			s.mu.Unlock()
			rc.status, rc.code = http.StatusInternalServerError, "SIGNER"
			s.writeError(w, rc.status, rc.code, "cannot sign a grant")
			return
		}
		st.issued = append(st.issued, jti)
	}
	st.leaseTimes = append(st.leaseTimes, now)
	ttl := int(s.opts.GrantTTL / time.Second)
	var body map[string]any
	switch shape {
	case LeaseAppRole:
		body = map[string]any{"env_id": req.EnvID, "wrapping_token": "s.wrap" + randHex(8), "role_id": "role-" + randHex(8), "ttl_s": ttl}
	case LeaseMissingJWT:
		body = map[string]any{"env_id": req.EnvID, "ttl_s": ttl, "mount": s.opts.AuthMount, "role": s.opts.AuthRole, "addr": s.opts.BaoAddr}
	case LeaseLegacyVault:
		body = map[string]any{"env_id": req.EnvID, "login_jwt": loginJWT, "ttl_s": ttl, "mount": s.opts.AuthMount, "role": s.opts.AuthRole,
			"vault": map[string]string{"addr": s.opts.BaoAddr, "mount": s.opts.KVMount}}
	default:
		body = map[string]any{"env_id": req.EnvID, "login_jwt": loginJWT, "ttl_s": ttl, "mount": s.opts.AuthMount, "role": s.opts.AuthRole, "addr": s.opts.BaoAddr}
	}
	s.mu.Unlock()
	rc.status = http.StatusOK
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	var rep protocol.Report
	rc := rec{}
	defer s.record(&rc, func(c Call) {
		s.reports = append(s.reports, ReportRecord{Call: c, Report: rep})
	})
	if !s.admit(Report, w, r, &rc, &agentBody{into: &rep, env: func() string { return rep.EnvID },
		valid: func() bool { return rep.Result != "" }, want: "a report with env_id and result"}) {
		return
	}
	s.mu.Lock()
	st := s.envs[rep.EnvID]
	if st != nil {
		s.rememberReportLocked(st, rep)
	}
	s.mu.Unlock()
	rc.status = http.StatusOK
	if st != nil {
		s.notify(rep.EnvID)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
