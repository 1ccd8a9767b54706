// Package zititest is an in-process fake of the OpenZiti edge management API, built on
// edge-api's own generated server (rest_management_api_server) so that requests and answers
// follow the real schema. It serves the calls fleetctl makes — password and certificate
// authentication, identity listing with filters and offset paging, detail, PATCH and create —
// over TLS, and can be told to fail (401, 500, malformed, slow) per operation. Tests, the dev
// stack and end-to-end tests share it.
package zititest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	openapierrors "github.com/go-openapi/errors"
	"github.com/go-openapi/loads"
	"github.com/go-openapi/runtime"
	"github.com/go-openapi/runtime/middleware"
	"github.com/go-openapi/strfmt"
	server "github.com/openziti/edge-api/rest_management_api_server"
	"github.com/openziti/edge-api/rest_management_api_server/operations"
	"github.com/openziti/edge-api/rest_management_api_server/operations/authentication"
	"github.com/openziti/edge-api/rest_management_api_server/operations/identity"
	"github.com/openziti/edge-api/rest_model"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/failplan"
)

// Op names an operation whose behaviour can be changed with Fail.
type Op string

// Operations of the fake.
const (
	OpAuthenticate Op = "authenticate"
	OpList         Op = "list"
	OpDetail       Op = "detail"
	OpPatch        Op = "patch"
	OpCreate       Op = "create"
	// OpAuthenticators is GET /authenticators (authenticators.go).
	OpAuthenticators Op = "authenticators"
)

// Failure changes how an operation answers. The zero Failure restores normal service. Here
// Status comes with Ziti's {"error": …} envelope, and Malformed is a body that is not JSON.
type Failure = failplan.Failure

// Identity is an identity as the fake stores it.
type Identity struct {
	ID             string // assigned by AddIdentity when empty
	Name           string
	RoleAttributes []string
	Online         bool
	Hostname       string
	SDKVersion     string
	SDKApp         string // e.g. ziti-edge-tunnel
	// EnrollmentJWT is a pending one-time-token enrolment; "" means enrolled.
	EnrollmentJWT string
	Type          string // Device unless set
	IsAdmin       bool
	// CertNotAfter, when set on an enrolled identity, gives it a cert authenticator whose
	// certificate (signed by the fake's client CA) expires then; CertPEM, when set, is that
	// certificate as given (a test's garbage too). Neither: no cert authenticator.
	CertNotAfter time.Time
	CertPEM      string
	// CertNotNetwork marks the certificate as issued by a third-party CA (isIssuedByNetwork false).
	CertNotNetwork bool
}

// Patch records one PATCH of role attributes.
type Patch struct {
	ID             string
	Name           string
	RoleAttributes []string
}

// Request records one request the fake received.
type Request struct {
	Method string
	Path   string
	Query  url.Values
	// Session is true when the request carried a zt-session header.
	Session bool
}

// Options configure New.
type Options struct {
	// Users maps username to password for method=password.
	Users map[string]string
	// Now is the fake's clock (enrolment expiry, session expiry); time.Now when nil.
	Now func() time.Time
}

// Server is a running fake controller. Its methods are safe for concurrent use.
type Server struct {
	// URL is https://127.0.0.1:port, the value for ziti.url.
	URL string

	srv      *httptest.Server
	clientCA *x509.Certificate
	clientCK *ecdsa.PrivateKey
	now      func() time.Time

	mu         sync.Mutex
	users      map[string]string
	byID       map[string]*Identity
	sorted     []*Identity // byID by name; nil when it must be rebuilt
	version    int         // bumped by every change to an identity
	pages      map[pageKey][]byte
	nextID     int
	failures   failplan.Plan[Op]
	patches    []Patch
	created    []Identity
	requests   []Request
	inFlight   int
	maxFlight  int
	barrier    int
	barrierCh  chan struct{}
	barrierMet bool
	maxLimit   int64
	silentCap  int64
	onList     func(offset int64)
	// auths caches the cert authenticators at authsVersion (authenticators.go).
	auths        []*rest_model.AuthenticatorDetail
	authsVersion int
}

// The generated server analyses a 40,000-line spec and builds a router for every operation:
// seconds of CPU. One handler serves every fake in the process; each fake's listener tags its
// requests with the fake they belong to, and sessions remember which fake opened them.
var shared struct {
	once     sync.Once
	handler  http.Handler
	err      error
	mu       sync.Mutex
	sessions map[string]session // token → session
}

type session struct {
	server *Server
	who    string
}

type serverKey struct{}

func sharedHandler() (http.Handler, error) {
	shared.once.Do(func() {
		spec, err := loads.Analyzed(server.SwaggerJSON, "")
		if err != nil {
			shared.err = fmt.Errorf("zititest: load the management spec: %w", err)
			return
		}
		shared.sessions = map[string]session{}
		api := operations.NewZitiEdgeManagementAPI(spec)
		api.Logger = func(string, ...any) {}
		api.ServeError = serveError
		api.ZtSessionAuth = func(token string) (any, error) {
			shared.mu.Lock()
			defer shared.mu.Unlock()
			sess, ok := shared.sessions[token]
			if !ok {
				return nil, openapierrors.New(http.StatusUnauthorized, "the session is not valid")
			}
			return sess, nil
		}
		api.Oauth2Auth = func(string, []string) (any, error) {
			return nil, openapierrors.New(http.StatusUnauthorized, "no zt-session header")
		}
		api.AuthenticationAuthenticateHandler = authentication.AuthenticateHandlerFunc(func(p authentication.AuthenticateParams) middleware.Responder {
			return serverOf(p.HTTPRequest).authenticate(p)
		})
		api.IdentityListIdentitiesHandler = identity.ListIdentitiesHandlerFunc(func(p identity.ListIdentitiesParams, pr any) middleware.Responder {
			return serverOf(p.HTTPRequest).authorized(pr, func(s *Server) middleware.Responder { return s.list(p) })
		})
		api.IdentityDetailIdentityHandler = identity.DetailIdentityHandlerFunc(func(p identity.DetailIdentityParams, pr any) middleware.Responder {
			return serverOf(p.HTTPRequest).authorized(pr, func(s *Server) middleware.Responder { return s.detail(p) })
		})
		api.IdentityPatchIdentityHandler = identity.PatchIdentityHandlerFunc(func(p identity.PatchIdentityParams, pr any) middleware.Responder {
			return serverOf(p.HTTPRequest).authorized(pr, func(s *Server) middleware.Responder { return s.patch(p) })
		})
		registerAuthenticators(api)
		api.IdentityCreateIdentityHandler = identity.CreateIdentityHandlerFunc(func(p identity.CreateIdentityParams, pr any) middleware.Responder {
			return serverOf(p.HTTPRequest).authorized(pr, func(s *Server) middleware.Responder { return s.create(p) })
		})
		shared.handler = api.Serve(nil)
	})
	return shared.handler, shared.err
}

func serverOf(r *http.Request) *Server { return r.Context().Value(serverKey{}).(*Server) }

// authorized runs fn when the session belongs to this fake (a token of another fake in the same
// process is as unknown here as it would be to another controller).
func (s *Server) authorized(principal any, fn func(*Server) middleware.Responder) middleware.Responder {
	if sess, ok := principal.(session); !ok || sess.server != s {
		return errorResponder(http.StatusUnauthorized, "UNAUTHORIZED", "the session is not valid")
	}
	return fn(s)
}

// New starts a fake controller on a loopback TLS listener. Close it when done. The first call in
// a process spends a few seconds analysing the spec; later ones are quick.
func New(opts Options) (*Server, error) {
	h, err := sharedHandler()
	if err != nil {
		return nil, err
	}
	s := &Server{
		now:   opts.Now,
		users: map[string]string{},
		byID:  map[string]*Identity{},
	}
	if s.now == nil {
		s.now = time.Now
	}
	for u, p := range opts.Users {
		s.users[u] = p
	}
	if err := s.makeClientCA(); err != nil {
		return nil, err
	}
	s.srv = httptest.NewUnstartedServer(s.record(h))
	pool := x509.NewCertPool()
	pool.AddCert(s.clientCA)
	s.srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool}
	// Handshakes a test refuses on purpose (unknown client CA) would otherwise log to stderr.
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	s.URL = s.srv.URL
	return s, nil
}

// Close stops the server.
func (s *Server) Close() {
	s.srv.Close()
	s.ExpireSessions()
}

// CAPEM is the PEM of the certificate the fake serves, the content of a ziti.ca_file.
func (s *Server) CAPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
}

// CertPool trusts the fake's serving certificate.
func (s *Server) CertPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(s.srv.Certificate())
	return p
}

// AddUser adds (or changes) an updb user.
func (s *Server) AddUser(name, password string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[name] = password
}

// ExpireSessions forgets every session: the next call with an old token gets 401.
func (s *Server) ExpireSessions() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	for tok, sess := range shared.sessions {
		if sess.server == s {
			delete(shared.sessions, tok)
		}
	}
}

// Fail sets how op answers from now on; Fail(op, Failure{}) restores it.
func (s *Server) Fail(op Op, f Failure) { s.failures.Set(op, f) }

// RequireConcurrentPages makes every list request for a page after the first wait until n such
// requests are in flight at once (or the client gives up). A client that pages serially then
// never completes a page, so a test can prove concurrency without timing anything.
func (s *Server) RequireConcurrentPages(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.barrier = n
	s.barrierCh = make(chan struct{})
	s.barrierMet = false
}

// MaxConcurrentPages is the most list requests (pages after the first) seen in flight at once.
func (s *Server) MaxConcurrentPages() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxFlight
}

// SetMaxLimit makes the fake cap every page at n identities, as the controller caps at 500
// (0 restores 500). Small pages let a test reach paging with a small fleet.
func (s *Server) SetMaxLimit(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxLimit = n
	s.pages = nil
}

// SetSilentLimit makes the fake serve at most n identities a page while its
// meta.pagination.limit still reports what was asked for, as a controller that pages
// differently from its API would (0 restores normal service).
func (s *Server) SetSilentLimit(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.silentCap = n
	s.pages = nil
}

// OnList runs fn with the requested offset whenever a list request arrives, before it is
// answered; nil removes it. fn may change the identities (AddIdentity, RemoveIdentity) to
// make the set change in the middle of a client's paging. Pages are fetched concurrently, so
// fn may run concurrently with itself.
func (s *Server) OnList(fn func(offset int64)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onList = fn
}

// RemoveIdentity deletes the identity with this name; false when there is none.
func (s *Server) RemoveIdentity(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, id := range s.byID {
		if id.Name == name {
			delete(s.byID, key)
			s.changedLocked()
			return true
		}
	}
	return false
}

// AddIdentity stores an identity and returns its id.
func (s *Server) AddIdentity(id Identity) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(id)
}

func (s *Server) addLocked(id Identity) string {
	if id.ID == "" {
		s.nextID++
		id.ID = fmt.Sprintf("zid%05d", s.nextID)
	}
	if id.Type == "" {
		id.Type = string(rest_model.IdentityTypeDevice)
	}
	id.RoleAttributes = append([]string{}, id.RoleAttributes...)
	if id.CertPEM == "" && !id.CertNotAfter.IsZero() && id.EnrollmentJWT == "" {
		id.CertPEM = s.certPEM(id.Name, id.CertNotAfter)
	}
	s.byID[id.ID] = &id
	s.changedLocked()
	return id.ID
}

// changedLocked forgets what was derived from the identities.
func (s *Server) changedLocked() {
	s.sorted = nil
	s.version++
	s.pages = nil
}

// pageKey names a list answer; answers are kept until an identity changes, so that a benchmark
// paging through 10,000 identities measures its client and not the fake's JSON encoder.
type pageKey struct {
	op                   Op
	filter               string
	offset, limit, serve int64
	version              int
}

// sortedPtrsLocked lists the stored identities by name. The list is kept between requests: a
// fake that re-sorts 10,000 identities for every page would measure itself, not its client.
func (s *Server) sortedPtrsLocked() []*Identity {
	if s.sorted == nil {
		s.sorted = make([]*Identity, 0, len(s.byID))
		for _, id := range s.byID {
			s.sorted = append(s.sorted, id)
		}
		sort.Slice(s.sorted, func(i, j int) bool { return s.sorted[i].Name < s.sorted[j].Name })
	}
	return s.sorted
}

// Identity returns the stored identity with this name.
func (s *Server) Identity(name string) (Identity, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.byID {
		if id.Name == name {
			c := *id
			c.RoleAttributes = append([]string{}, id.RoleAttributes...)
			return c, true
		}
	}
	return Identity{}, false
}

// SetOnline changes an identity's edge router connection.
func (s *Server) SetOnline(name string, online bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.byID {
		if id.Name == name {
			id.Online = online
			s.changedLocked()
			return true
		}
	}
	return false
}

// Identities returns every stored identity, sorted by name.
func (s *Server) Identities() []Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sortedLocked()
}

func (s *Server) sortedLocked() []Identity {
	ptrs := s.sortedPtrsLocked()
	out := make([]Identity, 0, len(ptrs))
	for _, id := range ptrs {
		c := *id
		c.RoleAttributes = append([]string{}, id.RoleAttributes...)
		out = append(out, c)
	}
	return out
}

// Patches returns the PATCHes of role attributes received, in order.
func (s *Server) Patches() []Patch {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Patch(nil), s.patches...)
}

// Created returns the identities created through the API, in order.
func (s *Server) Created() []Identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Identity(nil), s.created...)
}

// Requests returns every request received, in order of arrival.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// ClientIdentityFile issues a client certificate for name, signed by the CA the fake trusts for
// method=cert, and returns a ziti identity file (JSON, inline PEM) that also trusts the fake's
// serving certificate.
func (s *Server) ClientIdentityFile(name string) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(s.now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    s.now().Add(-time.Hour),
		NotAfter:     s.now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.clientCA, &key.PublicKey, s.clientCK)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"ztAPI": s.URL + "/edge/client/v1",
		"id": map[string]string{
			"cert": "pem:" + string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
			"key":  "pem:" + string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
			"ca":   "pem:" + string(s.CAPEM()),
		},
	}
	return json.MarshalIndent(doc, "", "  ")
}

func (s *Server) makeClientCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "zititest client CA"},
		NotBefore:             s.now().Add(-time.Hour),
		NotAfter:              s.now().Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	s.clientCA, err = x509.ParseCertificate(der)
	s.clientCK = key
	return err
}

// record notes every request before the generated router sees it.
func (s *Server) record(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, Request{
			Method:  r.Method,
			Path:    r.URL.Path,
			Query:   r.URL.Query(),
			Session: r.Header.Get("zt-session") != "",
		})
		s.mu.Unlock()
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverKey{}, s)))
	})
}

// behave applies op's Failure: it returns a responder when the call must fail, nil to proceed.
func (s *Server) behave(r *http.Request, op Op) middleware.Responder {
	// A client that gave up during the Delay still gets the failure written, as it always has.
	f, _ := s.failures.Next(r.Context(), op)
	switch {
	case f.Status != 0:
		return errorResponder(f.Status, codeFor(f.Status), "zititest: failure switched on for "+string(op))
	case f.Malformed:
		return middleware.ResponderFunc(func(w http.ResponseWriter, _ runtime.Producer) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"data": [ this is not json`))
		})
	}
	return nil
}

func (s *Server) authenticate(p authentication.AuthenticateParams) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpAuthenticate); resp != nil {
		return resp
	}
	var who string
	switch p.Method {
	case "password":
		if p.Auth == nil {
			return errorResponder(http.StatusBadRequest, "COULD_NOT_VALIDATE", "no credentials")
		}
		s.mu.Lock()
		want, ok := s.users[string(p.Auth.Username)]
		s.mu.Unlock()
		if !ok || want != string(p.Auth.Password) {
			return errorResponder(http.StatusUnauthorized, "INVALID_AUTH", "The authentication request failed")
		}
		who = string(p.Auth.Username)
	case "cert":
		tlsState := p.HTTPRequest.TLS
		if tlsState == nil || len(tlsState.PeerCertificates) == 0 {
			return errorResponder(http.StatusUnauthorized, "INVALID_AUTH", "no client certificate")
		}
		who = tlsState.PeerCertificates[0].Subject.CommonName
	default:
		return errorResponder(http.StatusBadRequest, "INVALID_AUTH_METHOD", "unsupported method "+p.Method)
	}
	token := randomHex(16)
	shared.mu.Lock()
	shared.sessions[token] = session{server: s, who: who}
	shared.mu.Unlock()
	sid := randomHex(8)
	exp := strfmt.DateTime(s.now().Add(30 * time.Minute))
	secs := int64(1800)
	return authentication.NewAuthenticateOK().WithPayload(&rest_model.CurrentAPISessionDetailEnvelope{
		Data: &rest_model.CurrentAPISessionDetail{
			APISessionDetail: rest_model.APISessionDetail{
				BaseEntity: rest_model.BaseEntity{ID: &sid},
				Token:      &token,
				IdentityID: &who,
			},
			ExpirationSeconds: &secs,
			ExpiresAt:         &exp,
		},
		Meta: &rest_model.Meta{},
	})
}

func (s *Server) list(p identity.ListIdentitiesParams) middleware.Responder {
	offset := int64(0)
	if p.Offset != nil {
		offset = *p.Offset
	}
	if offset > 0 {
		done := s.enterPage(p.HTTPRequest)
		defer done()
	}
	if resp := s.behave(p.HTTPRequest, OpList); resp != nil {
		return resp
	}
	s.mu.Lock()
	hook := s.onList
	s.mu.Unlock()
	if hook != nil {
		hook(offset)
	}
	var f filter
	if p.Filter != nil {
		var err error
		if f, err = parseFilter(*p.Filter); err != nil {
			return errorResponder(http.StatusBadRequest, "INVALID_FILTER", err.Error())
		}
	}
	// The controller answers 10 when asked nothing and never more than 500.
	limit := int64(10)
	if p.Limit != nil {
		limit = *p.Limit
	}
	s.mu.Lock()
	capAt := s.maxLimit
	s.mu.Unlock()
	if capAt <= 0 {
		capAt = 500
	}
	limit = min(limit, capAt)
	if limit < 1 || offset < 0 {
		return errorResponder(http.StatusBadRequest, "INVALID_PAGINATION", "limit must be ≥ 1 and offset ≥ 0")
	}
	raw := ""
	if p.Filter != nil {
		raw = *p.Filter
	}
	s.mu.Lock()
	serve := limit
	if s.silentCap > 0 {
		serve = min(limit, s.silentCap)
	}
	key := pageKey{op: OpList, filter: raw, offset: offset, limit: limit, serve: serve, version: s.version}
	if b, ok := s.pages[key]; ok {
		s.mu.Unlock()
		return rawJSON(b)
	}
	var total int64
	data := make(rest_model.IdentityList, 0, limit)
	for _, id := range s.sortedPtrsLocked() {
		if !f.match(id) {
			continue
		}
		if total >= offset && total < offset+serve {
			data = append(data, toDetail(*id))
		}
		total++
	}
	s.mu.Unlock()
	b, err := json.Marshal(&rest_model.ListIdentitiesEnvelope{
		Data: data,
		Meta: &rest_model.Meta{Pagination: &rest_model.Pagination{Limit: &limit, Offset: &offset, TotalCount: &total}},
	})
	if err != nil {
		return errorResponder(http.StatusInternalServerError, "UNHANDLED", err.Error())
	}
	s.keepPage(key, b)
	return rawJSON(b)
}

// keepPage keeps an answer encoded at key.version, unless an identity changed meanwhile.
func (s *Server) keepPage(key pageKey, b []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version == key.version {
		if s.pages == nil {
			s.pages = map[pageKey][]byte{}
		}
		s.pages[key] = b
	}
}

// rawJSON answers 200 with an envelope encoded already.
func rawJSON(b []byte) middleware.Responder {
	return middleware.ResponderFunc(func(w http.ResponseWriter, _ runtime.Producer) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	})
}

// enterPage counts a page request in flight and, when RequireConcurrentPages is armed, holds it
// until enough are.
func (s *Server) enterPage(r *http.Request) func() {
	s.mu.Lock()
	s.inFlight++
	if s.inFlight > s.maxFlight {
		s.maxFlight = s.inFlight
	}
	ch, n := s.barrierCh, s.barrier
	if ch != nil && s.inFlight >= n && !s.barrierMet {
		s.barrierMet = true
		close(ch)
	}
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-r.Context().Done():
		}
	}
	return func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}
}

func (s *Server) detail(p identity.DetailIdentityParams) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpDetail); resp != nil {
		return resp
	}
	s.mu.Lock()
	id, ok := s.byID[p.ID]
	var c Identity
	if ok {
		c = *id
	}
	s.mu.Unlock()
	if !ok {
		return errorResponder(http.StatusNotFound, "NOT_FOUND", "identity "+p.ID+" not found")
	}
	return identity.NewDetailIdentityOK().WithPayload(&rest_model.DetailIdentityEnvelope{Data: toDetail(c), Meta: &rest_model.Meta{}})
}

func (s *Server) patch(p identity.PatchIdentityParams) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpPatch); resp != nil {
		return resp
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.byID[p.ID]
	if !ok {
		return errorResponder(http.StatusNotFound, "NOT_FOUND", "identity "+p.ID+" not found")
	}
	if p.Identity != nil && p.Identity.RoleAttributes != nil {
		// Like the controller: the list given replaces the list held.
		id.RoleAttributes = append([]string{}, (*p.Identity.RoleAttributes)...)
		s.changedLocked()
		s.patches = append(s.patches, Patch{ID: id.ID, Name: id.Name, RoleAttributes: append([]string{}, id.RoleAttributes...)})
	}
	return identity.NewPatchIdentityOK().WithPayload(&rest_model.Empty{Data: map[string]any{}, Meta: &rest_model.Meta{}})
}

func (s *Server) create(p identity.CreateIdentityParams) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpCreate); resp != nil {
		return resp
	}
	body := p.Identity // the generated binder has validated name, isAdmin and type
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.byID {
		if id.Name == *body.Name {
			return errorResponder(http.StatusBadRequest, "COULD_NOT_VALIDATE", "name is must be unique")
		}
	}
	id := Identity{Name: *body.Name, Type: string(*body.Type), IsAdmin: *body.IsAdmin}
	if body.RoleAttributes != nil {
		id.RoleAttributes = append([]string{}, (*body.RoleAttributes)...)
	}
	if body.Enrollment != nil && body.Enrollment.Ott {
		id.EnrollmentJWT = fakeJWT(id.Name)
	}
	id.ID = s.addLocked(id)
	s.created = append(s.created, id)
	return identity.NewCreateIdentityCreated().WithPayload(&rest_model.CreateEnvelope{
		Data: &rest_model.CreateLocation{ID: id.ID},
		Meta: &rest_model.Meta{},
	})
}

func toDetail(id Identity) *rest_model.IdentityDetail {
	ident, name := id.ID, id.Name
	online := id.Online
	status := "offline"
	if online {
		status = "online"
	}
	attrs := rest_model.Attributes(append([]string{}, id.RoleAttributes...))
	typ := id.Type
	isAdmin := id.IsAdmin
	d := &rest_model.IdentityDetail{
		BaseEntity:                 rest_model.BaseEntity{ID: &ident},
		Name:                       &name,
		RoleAttributes:             &attrs,
		HasEdgeRouterConnection:    &online,
		HasAPISession:              &online,
		EdgeRouterConnectionStatus: &status,
		TypeID:                     &typ,
		IsAdmin:                    &isAdmin,
		Enrollment:                 &rest_model.IdentityEnrollments{},
	}
	if id.Hostname != "" {
		d.EnvInfo = &rest_model.EnvInfo{Hostname: id.Hostname, Os: "linux"}
	}
	if id.SDKVersion != "" || id.SDKApp != "" {
		d.SdkInfo = &rest_model.SdkInfo{Version: id.SDKVersion, AppID: id.SDKApp}
	}
	if id.EnrollmentJWT != "" {
		d.Enrollment.Ott = &rest_model.IdentityEnrollmentsOtt{
			ID:        "enr-" + id.ID,
			JWT:       id.EnrollmentJWT,
			ExpiresAt: strfmt.DateTime(time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)),
		}
	}
	return d
}

// serveError answers in Ziti's {"error": {code, message}, "meta": {}} envelope.
func serveError(w http.ResponseWriter, _ *http.Request, err error) {
	status := http.StatusInternalServerError
	if e, ok := err.(openapierrors.Error); ok {
		status = int(e.Code())
	}
	if status >= 600 { // go-openapi uses 6xx for some validation errors
		status = http.StatusBadRequest
	}
	writeEnvelope(w, status, codeFor(status), err.Error())
}

func errorResponder(status int, code, msg string) middleware.Responder {
	return middleware.ResponderFunc(func(w http.ResponseWriter, _ runtime.Producer) {
		writeEnvelope(w, status, code, msg)
	})
}

func writeEnvelope(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(rest_model.APIErrorEnvelope{
		Error: &rest_model.APIError{Code: code, Message: msg, RequestID: randomHex(4)},
		Meta:  &rest_model.Meta{},
	})
}

func codeFor(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "UNAUTHORIZED"
	case http.StatusNotFound:
		return "NOT_FOUND"
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return "COULD_NOT_VALIDATE"
	case http.StatusTooManyRequests:
		return "RATE_LIMITED"
	case http.StatusServiceUnavailable:
		return "SERVICE_UNAVAILABLE"
	}
	return "UNHANDLED"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fakeJWT is shaped like an enrolment JWT (three base64url parts); nothing verifies it.
func fakeJWT(name string) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"ES256","typ":"JWT"}`))
	body := enc.EncodeToString([]byte(fmt.Sprintf(`{"em":"ott","sub":%q,"jti":%q}`, name, randomHex(8))))
	return head + "." + body + "." + randomHex(32)
}

// filter is the subset of the controller's filter language fleetctl sends: one or more
// `field op "value"` joined by `and`, on name or id.
type filter []cond

type cond struct {
	field, op, value string
}

func (f filter) match(id *Identity) bool {
	for _, c := range f {
		v := id.Name
		if c.field == "id" {
			v = id.ID
		}
		var ok bool
		switch c.op {
		case "=":
			ok = v == c.value
		case "!=":
			ok = v != c.value
		case "contains":
			ok = strings.Contains(v, c.value)
		case "icontains":
			ok = strings.Contains(strings.ToLower(v), strings.ToLower(c.value))
		case "startswith":
			ok = strings.HasPrefix(v, c.value)
		case "endswith":
			ok = strings.HasSuffix(v, c.value)
		}
		if !ok {
			return false
		}
	}
	return true
}

// parseFilter reads the filter subset; anything else is an error, as the controller would
// refuse what it cannot parse.
func parseFilter(s string) (filter, error) {
	var out filter
	rest := strings.TrimSpace(s)
	if rest == "" {
		return nil, nil
	}
	for {
		var c cond
		var err error
		c.field, rest = word(rest)
		if c.field != "name" && c.field != "id" {
			return nil, fmt.Errorf("filter: unknown field %q", c.field)
		}
		c.op, rest = word(rest)
		c.op = strings.ToLower(c.op)
		switch c.op {
		case "=", "!=", "contains", "icontains", "startswith", "endswith":
		default:
			return nil, fmt.Errorf("filter: unknown operator %q", c.op)
		}
		c.value, rest, err = str(rest)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		rest = strings.TrimSpace(rest)
		if rest == "" {
			return out, nil
		}
		var conj string
		conj, rest = word(rest)
		if strings.ToLower(conj) != "and" {
			return nil, fmt.Errorf("filter: expected and, got %q", conj)
		}
	}
}

func word(s string) (string, string) {
	s = strings.TrimSpace(s)
	i := strings.IndexAny(s, " \t\"")
	if i < 0 {
		return s, ""
	}
	return s[:i], s[i:]
}

func str(s string) (string, string, error) {
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, `"`) {
		return "", "", fmt.Errorf("filter: expected a string literal at %q", s)
	}
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			if i+1 >= len(s) {
				return "", "", fmt.Errorf("filter: dangling escape")
			}
			i++
			b.WriteByte(s[i])
		case '"':
			return b.String(), s[i+1:], nil
		default:
			b.WriteByte(s[i])
		}
	}
	return "", "", fmt.Errorf("filter: unterminated string")
}
