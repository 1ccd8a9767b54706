// Package identitytest is an in-process fake of the OpenZiti controller's edge client API as the
// agent's certificate renewal uses it: certificate authentication, the current API session,
// DELETE of it, and the authenticator's extend and extend-verify. It is built on edge-api's
// generated server (rest_client_api_server), so requests and answers follow the real schema, and
// it keeps what the controller keeps: one verified and at most one unverified certificate per
// identity, only the verified one authenticating (the controller's AuthenticatorCert). Each
// operation can be told to fail (failplan), and a verify can be made to take effect and still
// lose its answer, as a connection cut at the wrong moment would.
package identitytest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // the controller's fingerprint
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	openapierrors "github.com/go-openapi/errors"
	"github.com/go-openapi/loads"
	"github.com/go-openapi/runtime"
	"github.com/go-openapi/runtime/middleware"
	"github.com/go-openapi/strfmt"
	server "github.com/openziti/edge-api/rest_client_api_server"
	"github.com/openziti/edge-api/rest_client_api_server/operations"
	"github.com/openziti/edge-api/rest_client_api_server/operations/authentication"
	"github.com/openziti/edge-api/rest_client_api_server/operations/current_api_session"
	"github.com/openziti/edge-api/rest_model"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/failplan"
)

// Op names an operation whose answers Fail can change.
type Op string

// Operations of the fake.
const (
	OpAuthenticate Op = "authenticate"
	OpSession      Op = "current-api-session"
	OpExtend       Op = "extend"
	OpVerify       Op = "extend-verify"
	// OpVerifyAnswer fails the answer of a verify that took effect (the answer is lost).
	OpVerifyAnswer Op = "extend-verify-answer"
)

// Failure is failplan's: a status in Ziti's error envelope, a malformed body, a delay.
type Failure = failplan.Failure

// Options configure Start.
type Options struct {
	// Now is the fake's clock (certificate validity); time.Now when nil.
	Now func() time.Time
	// Life is how long a certificate the fake signs is valid (default a year, as the controller).
	Life time.Duration
}

// authenticator is an identity's cert authenticator, as the controller's AuthenticatorCert.
type authenticator struct {
	id, identityID, name     string
	fingerprint, pem         string // verified
	unverifiedFP, unverified string
	extendable               bool
	signAs                   string // the common name extensions are signed for ("": name)
	extendRequested, keyRoll bool
	extends, verifies        int
}

// Server is a running fake controller. Its methods are safe for concurrent use.
type Server struct {
	// URL is https://127.0.0.1:port; identity files name URL + "/edge/client/v1".
	URL string

	srv    *httptest.Server
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
	now    func() time.Time
	life   time.Duration
	failed failplan.Plan[Op]
	// answers replace an operation's answer with a handler's (Answer).
	answers sync.Map // Op -> http.HandlerFunc

	mu       sync.Mutex
	auths    map[string]*authenticator // by identity name
	sessions map[string]*authenticator // by token
	next     int
	opened   int
	closed   int
}

var shared struct {
	once    sync.Once
	handler http.Handler
	err     error
}

type serverKey struct{}

func serverOf(r *http.Request) *Server { return r.Context().Value(serverKey{}).(*Server) }

// sharedHandler builds the generated router once per process (seconds of CPU for the spec).
func sharedHandler() (http.Handler, error) {
	shared.once.Do(func() {
		spec, err := loads.Analyzed(server.SwaggerJSON, "")
		if err != nil {
			shared.err = fmt.Errorf("identitytest: load the client spec: %w", err)
			return
		}
		api := operations.NewZitiEdgeClientAPI(spec)
		api.Logger = func(string, ...any) {}
		api.ServeError = serveError
		// The token's server is checked by each handler (sessions are per fake).
		api.ZtSessionAuth = func(token string) (any, error) { return token, nil }
		api.Oauth2Auth = func(string, []string) (any, error) {
			return nil, openapierrors.New(http.StatusUnauthorized, "no zt-session header")
		}
		api.AuthenticationAuthenticateHandler = authentication.AuthenticateHandlerFunc(func(p authentication.AuthenticateParams) middleware.Responder {
			return serverOf(p.HTTPRequest).authenticate(p)
		})
		api.CurrentAPISessionGetCurrentAPISessionHandler = current_api_session.GetCurrentAPISessionHandlerFunc(
			func(p current_api_session.GetCurrentAPISessionParams, pr any) middleware.Responder {
				return serverOf(p.HTTPRequest).session(p.HTTPRequest, pr)
			})
		api.CurrentAPISessionDeleteCurrentAPISessionHandler = current_api_session.DeleteCurrentAPISessionHandlerFunc(
			func(p current_api_session.DeleteCurrentAPISessionParams, pr any) middleware.Responder {
				return serverOf(p.HTTPRequest).logout(pr)
			})
		api.CurrentAPISessionExtendCurrentIdentityAuthenticatorHandler = current_api_session.ExtendCurrentIdentityAuthenticatorHandlerFunc(
			func(p current_api_session.ExtendCurrentIdentityAuthenticatorParams, pr any) middleware.Responder {
				return serverOf(p.HTTPRequest).extend(p, pr)
			})
		api.CurrentAPISessionExtendVerifyCurrentIdentityAuthenticatorHandler = current_api_session.ExtendVerifyCurrentIdentityAuthenticatorHandlerFunc(
			func(p current_api_session.ExtendVerifyCurrentIdentityAuthenticatorParams, pr any) middleware.Responder {
				return serverOf(p.HTTPRequest).verify(p, pr)
			})
		shared.handler = api.Serve(nil)
	})
	return shared.handler, shared.err
}

// Start runs a fake controller on a loopback TLS listener; Close it when done.
func Start(o Options) (*Server, error) {
	h, err := sharedHandler()
	if err != nil {
		return nil, err
	}
	s := &Server{now: o.Now, life: o.Life, auths: map[string]*authenticator{}, sessions: map[string]*authenticator{}}
	if s.now == nil {
		s.now = time.Now
	}
	if s.life <= 0 {
		s.life = 365 * 24 * time.Hour
	}
	if err := s.makeCA(); err != nil {
		return nil, err
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serverKey{}, s)))
	}))
	pool := x509.NewCertPool()
	pool.AddCert(s.ca)
	// Like the controller: a client certificate is asked for, and only checked against its CA.
	// Certificates are judged on the fake's clock, as the controller judges them on its own.
	s.srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool, Time: s.now}
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.srv.StartTLS()
	s.URL = s.srv.URL
	return s, nil
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Fail sets how op answers from now on; Fail(op, Failure{}) restores it.
func (s *Server) Fail(op Op, f Failure) { s.failed.Set(op, f) }

func (s *Server) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "identitytest network CA"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	s.ca, err = x509.ParseCertificate(der)
	s.caKey = key
	s.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return err
}

// sign issues a client certificate for pub, valid from now for the fake's life (or until notAfter).
func (s *Server) sign(cn string, pub any, notAfter time.Time) (string, string, error) {
	now := s.now()
	if notAfter.IsZero() {
		notAfter = now.Add(s.life)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Minute), NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, s.ca, pub, s.caKey)
	if err != nil {
		return "", "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), fingerprint(der), nil
}

func fingerprint(der []byte) string {
	sum := sha1.Sum(der) //nolint:gosec // the controller's fingerprint
	return hex.EncodeToString(sum[:])
}

// Enroll creates the identity name with a certificate valid until notAfter (zero: the fake's
// life) and returns its identity file, inline PEM, as ziti's enrolment writes it.
func (s *Server) Enroll(name string, notAfter time.Time) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	certPEM, fp, err := s.sign(name, &key.PublicKey, notAfter)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.next++
	s.auths[name] = &authenticator{id: fmt.Sprintf("auth%04d", s.next), identityID: fmt.Sprintf("zid%04d", s.next), name: name,
		fingerprint: fp, pem: certPEM, extendable: true}
	s.mu.Unlock()
	serving := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})
	return json.MarshalIndent(map[string]any{
		"ztAPI": s.URL + "/edge/client/v1",
		"id": map[string]string{
			"cert": "pem:" + certPEM,
			"key":  "pem:" + string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})),
			"ca":   "pem:" + string(serving) + string(s.caPEM),
		},
		"configTypes": nil,
		"enableHa":    false,
	}, "", "  ")
}

// SetExtendable marks name's certificate as issued by a third-party CA (false) or the network.
func (s *Server) SetExtendable(name string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auths[name].extendable = ok
}

// SignAs makes name's extensions carry the common name cn, as a confused controller would.
func (s *Server) SignAs(name, cn string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.auths[name].signAs = cn
}

// RequestExtend sets the flags an administrator's request-extend sets.
func (s *Server) RequestExtend(name string, rollKeys bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.auths[name]
	a.extendRequested, a.keyRoll = true, rollKeys
}

// Accepts reports whether the controller authenticates certPEM's leaf as name now.
func (s *Server) Accepts(name string, certPEM []byte) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.auths[name]
	return a != nil && a.fingerprint == fingerprint(block.Bytes)
}

// Counts is how often the renewal's calls reached the fake.
type Counts struct {
	Extends, Verifies int
	// Opened and Closed count API sessions made and deleted.
	Opened, Closed int
}

// Counts returns name's counts.
func (s *Server) Counts(name string) Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.auths[name]
	if a == nil {
		return Counts{}
	}
	return Counts{Extends: a.extends, Verifies: a.verifies, Opened: s.opened, Closed: s.closed}
}

// Answer makes op answer with h instead (nil restores it), before it takes effect: a broken or
// hostile controller, or a proxy in front of it.
func (s *Server) Answer(op Op, h http.HandlerFunc) {
	if h == nil {
		s.answers.Delete(op)
		return
	}
	s.answers.Store(op, h)
}

// behave applies op's Answer or Failure: a responder when the call must not go on, else nil.
func (s *Server) behave(r *http.Request, op Op) middleware.Responder {
	if h, ok := s.answers.Load(op); ok {
		return middleware.ResponderFunc(func(w http.ResponseWriter, _ runtime.Producer) { h.(http.HandlerFunc)(w, r) })
	}
	f, _ := s.failed.Next(r.Context(), op)
	switch {
	case f.Status != 0:
		return errorResponder(f.Status, codeFor(f.Status), "identitytest: failure switched on for "+string(op))
	case f.Malformed:
		return middleware.ResponderFunc(func(w http.ResponseWriter, _ runtime.Producer) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"data": [ this is not json`))
		})
	}
	return nil
}

// peer is the authenticator whose verified certificate the TLS client presented.
func (s *Server) peerLocked(r *http.Request) *authenticator {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return nil
	}
	fp := fingerprint(r.TLS.PeerCertificates[0].Raw)
	for _, a := range s.auths {
		if a.fingerprint == fp {
			return a
		}
	}
	return nil
}

func (s *Server) authenticate(p authentication.AuthenticateParams) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpAuthenticate); resp != nil {
		return resp
	}
	if p.Method != "cert" {
		return errorResponder(http.StatusBadRequest, "INVALID_AUTH_METHOD", "unsupported method "+p.Method)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.peerLocked(p.HTTPRequest)
	if a == nil {
		return errorResponder(http.StatusUnauthorized, "INVALID_AUTH", "The authentication request failed")
	}
	token := randomHex(16)
	s.sessions[token] = a
	s.opened++
	return authentication.NewAuthenticateOK().WithPayload(&rest_model.CurrentAPISessionDetailEnvelope{Data: s.detailLocked(token, a), Meta: &rest_model.Meta{}})
}

func (s *Server) detailLocked(token string, a *authenticator) *rest_model.CurrentAPISessionDetail {
	now := strfmt.DateTime(s.now())
	exp := strfmt.DateTime(s.now().Add(30 * time.Minute))
	sid, authID, idID, ip := "ses"+token[:8], a.id, a.identityID, "127.0.0.1"
	secs := int64(1800)
	f := false
	ext := a.extendable
	return &rest_model.CurrentAPISessionDetail{
		APISessionDetail: rest_model.APISessionDetail{
			BaseEntity:             rest_model.BaseEntity{ID: &sid, CreatedAt: &now, UpdatedAt: &now, Links: rest_model.Links{}},
			AuthQueries:            rest_model.AuthQueryList{},
			AuthenticatorID:        &authID,
			ConfigTypes:            []string{},
			Identity:               &rest_model.EntityRef{ID: a.identityID, Name: a.name, Entity: "identities", Links: rest_model.Links{}},
			IdentityID:             &idID,
			IPAddress:              &ip,
			IsCertExtendable:       &ext,
			IsCertExtendRequested:  a.extendRequested,
			IsCertKeyRollRequested: a.keyRoll,
			IsMfaComplete:          &f,
			IsMfaRequired:          &f,
			Token:                  &token,
		},
		ExpirationSeconds: &secs,
		ExpiresAt:         &exp,
	}
}

// sessionOf returns the session's authenticator; nil for a token this fake never issued.
func (s *Server) sessionOfLocked(principal any) (string, *authenticator) {
	token, _ := principal.(string)
	return token, s.sessions[token]
}

func (s *Server) session(r *http.Request, pr any) middleware.Responder {
	if resp := s.behave(r, OpSession); resp != nil {
		return resp
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	token, a := s.sessionOfLocked(pr)
	if a == nil {
		return errorResponder(http.StatusUnauthorized, "UNAUTHORIZED", "the session is not valid")
	}
	return current_api_session.NewGetCurrentAPISessionOK().WithPayload(&rest_model.CurrentAPISessionDetailEnvelope{Data: s.detailLocked(token, a), Meta: &rest_model.Meta{}})
}

func (s *Server) logout(pr any) middleware.Responder {
	s.mu.Lock()
	defer s.mu.Unlock()
	token, a := s.sessionOfLocked(pr)
	if a == nil {
		return errorResponder(http.StatusUnauthorized, "UNAUTHORIZED", "the session is not valid")
	}
	delete(s.sessions, token)
	s.closed++
	return current_api_session.NewDeleteCurrentAPISessionOK().WithPayload(&rest_model.Empty{Data: map[string]any{}, Meta: &rest_model.Meta{}})
}

func (s *Server) extend(p current_api_session.ExtendCurrentIdentityAuthenticatorParams, pr any) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpExtend); resp != nil {
		return resp
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, a := s.sessionOfLocked(pr)
	switch {
	case a == nil:
		return errorResponder(http.StatusUnauthorized, "UNAUTHORIZED", "the session is not valid")
	case p.ID != a.id:
		return errorResponder(http.StatusNotFound, "NOT_FOUND", "authenticator "+p.ID+" not found")
	case !a.extendable:
		return errorResponder(http.StatusBadRequest, "AUTHENTICATOR_CANNOT_BE_UPDATED", "the authenticator cannot be updated")
	}
	// Like the controller: the request itself must present the current certificate.
	if peer := s.peerLocked(p.HTTPRequest); peer != a {
		return errorResponder(http.StatusUnauthorized, "UNAUTHORIZED", "the client certificate is not the identity's")
	}
	block, _ := pem.Decode([]byte(*p.Extend.ClientCertCsr))
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return errorResponder(http.StatusBadRequest, "COULD_NOT_PROCESS_CSR", "no PEM CSR")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil || csr.CheckSignature() != nil {
		return errorResponder(http.StatusBadRequest, "COULD_NOT_PROCESS_CSR", "the CSR does not parse or verify")
	}
	cn := a.name
	if a.signAs != "" {
		cn = a.signAs
	}
	certPEM, fp, err := s.sign(cn, csr.PublicKey, time.Time{})
	if err != nil {
		return errorResponder(http.StatusInternalServerError, "UNHANDLED", err.Error())
	}
	a.unverified, a.unverifiedFP = certPEM, fp
	a.extends++
	return current_api_session.NewExtendCurrentIdentityAuthenticatorOK().WithPayload(&rest_model.IdentityExtendEnrollmentEnvelope{
		Data: &rest_model.IdentityExtendCerts{ClientCert: certPEM + string(s.caPEM), Ca: string(s.caPEM)},
		Meta: &rest_model.Meta{},
	})
}

func (s *Server) verify(p current_api_session.ExtendVerifyCurrentIdentityAuthenticatorParams, pr any) middleware.Responder {
	if resp := s.behave(p.HTTPRequest, OpVerify); resp != nil {
		return resp
	}
	s.mu.Lock()
	_, a := s.sessionOfLocked(pr)
	switch {
	case a == nil:
		s.mu.Unlock()
		return errorResponder(http.StatusUnauthorized, "UNAUTHORIZED", "the session is not valid")
	case p.ID != a.id:
		s.mu.Unlock()
		return errorResponder(http.StatusNotFound, "NOT_FOUND", "authenticator "+p.ID+" not found")
	case a.unverified == "":
		s.mu.Unlock()
		return errorResponder(http.StatusBadRequest, "AUTHENTICATOR_CANNOT_BE_UPDATED", "no extension to verify")
	}
	// Like the controller: exactly one certificate, the one issued (a chain is refused).
	var blocks []*pem.Block
	for rest := []byte(*p.Extend.ClientCert); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		blocks = append(blocks, b)
	}
	if len(blocks) != 1 || fingerprint(blocks[0].Bytes) != a.unverifiedFP {
		s.mu.Unlock()
		return errorResponder(http.StatusBadRequest, "INVALID_CLIENT_CERT", "the certificate is not the one issued")
	}
	a.fingerprint, a.pem = a.unverifiedFP, a.unverified
	a.unverified, a.unverifiedFP = "", ""
	a.extendRequested, a.keyRoll = false, false
	a.verifies++
	s.mu.Unlock()
	if resp := s.behave(p.HTTPRequest, OpVerifyAnswer); resp != nil {
		return resp
	}
	return current_api_session.NewExtendVerifyCurrentIdentityAuthenticatorOK().WithPayload(&rest_model.Empty{Data: map[string]any{}, Meta: &rest_model.Meta{}})
}

// serveError answers in Ziti's {"error": {code, message}, "meta": {}} envelope.
func serveError(w http.ResponseWriter, _ *http.Request, err error) {
	status := http.StatusInternalServerError
	if e, ok := err.(openapierrors.Error); ok {
		status = int(e.Code())
	}
	if status >= 600 {
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
	case http.StatusBadRequest:
		return "COULD_NOT_VALIDATE"
	case http.StatusTooManyRequests:
		return "RATE_LIMITED"
	}
	return "UNHANDLED"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
