// Package admintest is an in-process fake of tenancy's admin API (docs/FLEET-API.md): the agent
// listing with cursor paging and a clock of its own, and the kit reveal with second-reveal
// semantics. It can be told to fail (401, 500, malformed, slow) per operation, and to change an
// agent when the Nth listing starts, so that polling commands can be tested without timing.
// Tests, the dev stack and end-to-end tests share it.
package admintest

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/failplan"
)

// Op names an operation whose behaviour can be changed with Fail.
type Op string

// Operations of the fake.
const (
	OpList Op = "list"
	OpKit  Op = "kit"
)

// Failure changes how an operation answers. The zero Failure restores normal service. Here
// Status comes with a FastAPI-style error body, and Malformed is a listing with wrong types.
type Failure = failplan.Failure

// KitDefaults are the values a revealed kit carries besides the env and grant.
type KitDefaults struct {
	PackageVersion string
	TenancyService string
	TenancyPort    int
	BaoAddr        string
	BaoAuthMount   string
	BaoRole        string
	// GrantTTL is how long a bootstrap grant lives (1 h unless set).
	GrantTTL time.Duration
}

// KitCall records one kit reveal.
type KitCall struct {
	EnvID    string
	Request  protocol.KitRequest
	Response protocol.KitResponse
	// Superseded lists the grants this reveal superseded.
	Superseded []string
}

// Request records one request received.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	// Authorized is true when the request carried the right bearer token.
	Authorized bool
}

// Options configure New.
type Options struct {
	// Token is the admin bearer token the fake accepts.
	Token string
	// PageSize is how many agents a page holds (500 unless set).
	PageSize int
	// Now is the fake's clock, the `now` of every page; time.Now when nil. SetNow fixes it.
	Now func() time.Time
	// OnKit, when set, runs at every successful reveal: the real tenancy has the broker create
	// or update the identity then (zititest wiring uses it).
	OnKit func(envID string)
	// Grant, when set, makes the bootstrap grant of every reveal of a known env, and its
	// expiry (the dev stack signs a real ES256 grant that OpenBao accepts, superseding the
	// env's earlier ones). An error answers 500 and records no reveal. When nil, grants are
	// shaped like tenancy's but verified by nothing.
	Grant func(envID string) (grant string, expiresAt time.Time, err error)
}

// Server is a running fake tenancy. Its methods are safe for concurrent use.
type Server struct {
	// URL is http://127.0.0.1:port, the value for tenancy.url.
	URL string

	srv *httptest.Server

	mu        sync.Mutex
	token     string
	pageSize  int
	now       func() time.Time
	onKit     func(string)
	grantFn   func(string) (string, time.Time, error)
	agents    map[string]protocol.AdminAgent
	sorted    []protocol.AdminAgent // agents by env id; nil when it must be rebuilt
	pages     map[pageKey][]byte    // encoded pages, until an agent or the clock changes
	backends  map[string]string     // env → site, for envs known without an agent
	kitDef    KitDefaults
	kits      []KitCall
	grants    map[string][]string // env → grants, newest last
	failures  failplan.Plan[Op]
	requests  []Request
	polls     int
	pollHooks map[int][]func()
}

// New starts a fake tenancy on a loopback listener (plain HTTP). Close it when done.
func New(opts Options) *Server {
	s := &Server{
		token:     opts.Token,
		pageSize:  opts.PageSize,
		now:       opts.Now,
		onKit:     opts.OnKit,
		grantFn:   opts.Grant,
		agents:    map[string]protocol.AdminAgent{},
		backends:  map[string]string{},
		grants:    map[string][]string{},
		pollHooks: map[int][]func(){},
		kitDef: KitDefaults{
			PackageVersion: "0.2.0",
			TenancyService: "monky.tenancy.deploy",
			TenancyPort:    443,
			BaoAddr:        "https://bao.cbs.tikali.net:8200",
			BaoAuthMount:   "jwt-tenancy",
			BaoRole:        "see-env",
			GrantTTL:       time.Hour,
		},
	}
	if s.pageSize <= 0 {
		s.pageSize = 500
	}
	if s.now == nil {
		s.now = time.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/agents", s.list)
	mux.HandleFunc("POST /v1/admin/backends/{env}/kit", s.kit)
	s.srv = httptest.NewServer(s.record(mux))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// SetNow fixes the fake's clock.
func (s *Server) SetNow(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.now = func() time.Time { return t }
}

// Now reads the fake's clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now().UTC()
}

// SetToken changes the accepted admin token.
func (s *Server) SetToken(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// DefaultPage is how many agents a page holds when the listing asks no limit (tenancy's default).
const DefaultPage = 500

// SetPageSize changes how many agents a page holds at most, whatever limit the listing asks;
// without a limit a page holds min(DefaultPage, n).
func (s *Server) SetPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageSize = max(n, 1)
	s.pages = nil
}

// SetKitDefaults changes what revealed kits carry.
func (s *Server) SetKitDefaults(d KitDefaults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.GrantTTL == 0 {
		d.GrantTTL = time.Hour
	}
	s.kitDef = d
}

// SetOnKit sets (or, with nil, removes) the reveal hook.
func (s *Server) SetOnKit(fn func(envID string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onKit = fn
}

// PutAgent stores (or replaces) an agent's record; its env becomes known for kits.
func (s *Server) PutAgent(a protocol.AdminAgent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agents[a.EnvID] = a
	s.sorted, s.pages = nil, nil
}

// UpdateAgent changes a stored agent in place; false when there is none.
func (s *Server) UpdateAgent(envID string, fn func(*protocol.AdminAgent)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.agents[envID]
	if !ok {
		return false
	}
	fn(&a)
	s.agents[envID] = a
	s.sorted, s.pages = nil, nil
	return true
}

// Agents returns the stored agents sorted by env id.
func (s *Server) Agents() []protocol.AdminAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]protocol.AdminAgent(nil), s.sortedLocked("")...)
}

// AddBackend makes an env known (for kits) without an agent record.
func (s *Server) AddBackend(envID, site string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backends[envID] = site
}

// Kits returns the reveals made, in order.
func (s *Server) Kits() []KitCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]KitCall(nil), s.kits...)
}

// Fail sets how op answers from now on; Fail(op, Failure{}) restores it.
func (s *Server) Fail(op Op, f Failure) { s.failures.Set(op, f) }

// OnPoll runs fn just before the nth listing since the fake started (counting first pages only,
// from 1) is answered, e.g. to make an agent check in with a new version while a gate waits.
func (s *Server) OnPoll(n int, fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pollHooks[n] = append(s.pollHooks[n], fn)
}

// Polls is how many listings have started.
func (s *Server) Polls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.polls
}

// Requests returns every request received, in order of arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		ok := r.Header.Get("Authorization") == "Bearer "+s.token && s.token != ""
		s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Authorized: ok})
		s.mu.Unlock()
		if !ok {
			writeError(w, http.StatusUnauthorized, "ADMIN_UNAUTHENTICATED", "bearer refused")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// behave applies op's Failure; it reports whether it has answered.
func (s *Server) behave(w http.ResponseWriter, r *http.Request, op Op) bool {
	f, gone := s.failures.Next(r.Context(), op)
	if gone {
		return true // the client gave up during the Delay: nothing left to answer
	}
	switch {
	case f.Status != 0:
		writeError(w, f.Status, "", "admintest: failure switched on for "+string(op))
		return true
	case f.Malformed:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"now": "yesterday", "agents": [{"env_id": 42}]}`))
		return true
	}
	return false
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	cursor := r.URL.Query().Get("cursor")
	if cursor == "" {
		s.mu.Lock()
		s.polls++
		hooks := s.pollHooks[s.polls]
		delete(s.pollHooks, s.polls)
		s.mu.Unlock()
		for _, fn := range hooks {
			fn()
		}
	}
	if s.behave(w, r, OpList) {
		return
	}
	offset := 0
	if cursor != "" {
		var err error
		if offset, err = decodeCursor(cursor); err != nil {
			writeError(w, http.StatusBadRequest, "BAD_CURSOR", err.Error())
			return
		}
	}
	asked := 0
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > protocol.MaxAgentsPageLimit {
			writeError(w, http.StatusBadRequest, "BAD_LIMIT", fmt.Sprintf("limit %q is not 1-%d", l, protocol.MaxAgentsPageLimit))
			return
		}
		asked = n
	}
	s.mu.Lock()
	site := r.URL.Query().Get("site")
	all := s.sortedLocked(site)
	now := s.now().UTC()
	size := min(DefaultPage, s.pageSize)
	if asked > 0 {
		size = min(asked, s.pageSize)
	}
	key := pageKey{site: site, offset: offset, size: size, now: now}
	b, ok := s.pages[key]
	s.mu.Unlock()
	if !ok {
		page := protocol.AdminAgentsPage{Now: now.Format(time.RFC3339), Agents: []protocol.AdminAgent{}}
		if offset < len(all) {
			end := min(offset+size, len(all))
			page.Agents = all[offset:end]
			if end < len(all) {
				c := encodeCursor(end)
				page.Next = &c
			}
		}
		var err error
		if b, err = json.Marshal(page); err != nil {
			writeError(w, http.StatusInternalServerError, "", err.Error())
			return
		}
		s.mu.Lock()
		if s.pages == nil {
			s.pages = map[pageKey][]byte{}
		}
		s.pages[key] = b
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// pageKey names an encoded page. Pages are kept until an agent changes, so that a benchmark
// paging through 10,000 agents measures its client and not the fake's JSON encoder.
type pageKey struct {
	site         string
	offset, size int
	now          time.Time
}

// sortedLocked lists the agents (of one site, unless ""), by env id. The full list is kept
// between requests so that paging through 10,000 agents measures the client, not the fake.
func (s *Server) sortedLocked(site string) []protocol.AdminAgent {
	if s.sorted == nil {
		s.sorted = make([]protocol.AdminAgent, 0, len(s.agents))
		for _, a := range s.agents {
			s.sorted = append(s.sorted, a)
		}
		sort.Slice(s.sorted, func(i, j int) bool { return s.sorted[i].EnvID < s.sorted[j].EnvID })
	}
	if site == "" {
		return s.sorted
	}
	out := make([]protocol.AdminAgent, 0, len(s.sorted))
	for _, a := range s.sorted {
		if a.Site == site {
			out = append(out, a)
		}
	}
	return out
}

func (s *Server) kit(w http.ResponseWriter, r *http.Request) {
	if s.behave(w, r, OpKit) {
		return
	}
	env := r.PathValue("env")
	var req protocol.KitRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusUnprocessableEntity, "VALIDATION", "body: "+err.Error())
		return
	}
	s.mu.Lock()
	site, known := s.backends[env]
	if a, ok := s.agents[env]; ok {
		known, site = true, a.Site
	}
	if !known {
		s.mu.Unlock()
		// FastAPI-style nesting, as tenancy sends it.
		writeJSON(w, http.StatusNotFound, map[string]any{"detail": map[string]string{
			"code": protocol.CodeBackendUnknown, "message": "no backend " + env}})
		return
	}
	if req.Site != "" && site != "" && req.Site != site {
		s.mu.Unlock()
		writeError(w, http.StatusConflict, "SITE_MISMATCH", fmt.Sprintf("backend %s is at site %s", env, site))
		return
	}
	if req.Site != "" {
		site = req.Site
	}
	now := s.now().UTC()
	d := s.kitDef
	grant, expires := fakeGrant(env, now), now.Add(d.GrantTTL)
	if fn := s.grantFn; fn != nil {
		// Outside the lock: the provider may take its time (it signs, and supersedes elsewhere).
		s.mu.Unlock()
		g, exp, err := fn(env)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "GRANT", "cannot make the bootstrap grant")
			return
		}
		s.mu.Lock()
		grant, expires = g, exp.UTC()
	}
	resp := protocol.KitResponse{
		EnvID: env, Site: site, Identity: "monky-host." + env,
		BootstrapGrant: grant, GrantExpiresAt: expires.Format(time.RFC3339),
		PackageVersion: d.PackageVersion, TenancyService: d.TenancyService, TenancyPort: d.TenancyPort,
		BaoAddr: d.BaoAddr, BaoAuthMount: d.BaoAuthMount, BaoRole: d.BaoRole,
	}
	// Second-reveal semantics: every earlier grant of this backend is superseded.
	superseded := append([]string(nil), s.grants[env]...)
	s.grants[env] = []string{grant}
	s.kits = append(s.kits, KitCall{EnvID: env, Request: req, Response: resp, Superseded: superseded})
	hook := s.onKit
	s.mu.Unlock()
	if hook != nil {
		hook(env)
	}
	writeJSON(w, http.StatusOK, resp)
}

// Superseded reports whether grant was superseded by a later reveal.
func (s *Server) Superseded(grant string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range s.kits {
		for _, g := range k.Superseded {
			if g == grant {
				return true
			}
		}
	}
	return false
}

func encodeCursor(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o=" + strconv.Itoa(offset)))
}

func decodeCursor(c string) (int, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || !strings.HasPrefix(string(b), "o=") {
		return 0, fmt.Errorf("cursor %q is not one of ours", c)
	}
	n, err := strconv.Atoi(strings.TrimPrefix(string(b), "o="))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("cursor %q is not one of ours", c)
	}
	return n, nil
}

// fakeGrant is shaped like tenancy's ES256 deploy grant; nothing verifies it.
func fakeGrant(env string, now time.Time) string {
	enc := base64.RawURLEncoding
	jti := make([]byte, 8)
	_, _ = rand.Read(jti)
	sig := make([]byte, 48)
	_, _ = rand.Read(sig)
	head := enc.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT"}`))
	body := enc.EncodeToString([]byte(fmt.Sprintf(`{"aud":"openbao-see-env","sub":"agent:%s","env_id":%q,"kind":"deploy-grant","jti":%q,"iat":%d}`,
		env, env, hex.EncodeToString(jti), now.Unix())))
	return head + "." + body + "." + enc.EncodeToString(sig)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	body := map[string]string{"message": msg}
	if code != "" {
		body["code"] = code
	}
	writeJSON(w, status, body)
}
