package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-openapi/strfmt"
	"github.com/golang-jwt/jwt/v5"
	"github.com/openziti/edge-api/rest_model"
	"github.com/openziti/metrics"
	edge_apis "github.com/openziti/sdk-golang/edge-apis"
	"github.com/openziti/sdk-golang/ziti"
	cmap "github.com/orcaman/concurrent-map/v2"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
)

// The sdk transport keeps the controller API session it authenticated in a file of state_dir,
// so that the next ticks dial with it instead of authenticating again: authenticating is most of
// what an sdk tick costs the controller (issue 24: 84 ms of controller CPU a tick, ~14 cores for
// 10,000 boxes on a 60 s timer). The session is a bearer credential: the file is 0600, written
// atomically, its tokens never logged, and it is used only by the identity certificate that
// obtained it (a renewed certificate authenticates afresh) and until its expiry.

// sessionSchema is the file's layout version; another one is not read (the tick authenticates).
const sessionSchema = 1

// sessionMargin: a session with less left is not used; a dial must not meet its expiry.
const sessionMargin = time.Minute

// maxSessionLife bounds a recorded expiry: a session claiming more is no session this agent kept.
const maxSessionLife = 7 * 24 * time.Hour

// Session types, as the SDK names them.
const (
	sessionLegacy = "legacy"
	sessionOIDC   = "oidc"
)

// sessionRecord is the file. Tokens are bearer credentials; identity_sha256 is the SHA-256 of
// the identity certificate (DER) that authenticated, controller the ztAPI it was obtained from.
type sessionRecord struct {
	Schema       int       `json:"schema"`
	Identity     string    `json:"identity_sha256"`
	Controller   string    `json:"controller"`
	Type         string    `json:"type"`
	Token        string    `json:"token"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	IDToken      string    `json:"id_token,omitempty"`
	SessionID    string    `json:"session_id,omitempty"`
	IdentityID   string    `json:"identity_id,omitempty"`
	IdentityName string    `json:"identity_name,omitempty"`
	ObtainedAt   time.Time `json:"obtained_at"`
	ExpiresAt    time.Time `json:"expires_at"`
	// Services the session dialed, by name: what the next ticks would otherwise ask the
	// controller again on every dial (the service's lookup, a new dial session).
	Services map[string]keptService `json:"services,omitempty"`
	// TLSSessions are the controller's and the edge routers' TLS session tickets, by kind and
	// host name (tickets.go). They outlive the API session: a re-authentication keeps them.
	TLSSessions map[string]keptTicket `json:"tls_sessions,omitempty"`
}

// keptService is a service as the controller described it and the dial session it created for
// this API session, both in the controller's own JSON. The session token is a credential.
type keptService struct {
	Service json.RawMessage `json:"service"`
	Session json.RawMessage `json:"session"`
}

// decode checks a kept service for what a dial reads, naming the field.
func (ks keptService) decode(name string) (*rest_model.ServiceDetail, *rest_model.SessionDetail, error) {
	field := func(f string) string { return fmt.Sprintf("services[%q].%s", name, f) }
	var svc rest_model.ServiceDetail
	if err := json.Unmarshal(ks.Service, &svc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", field("service"), err)
	}
	var ses rest_model.SessionDetail
	if err := json.Unmarshal(ks.Session, &ses); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", field("session"), err)
	}
	switch {
	case deref(svc.ID) == "":
		return nil, nil, errors.New(field("service.id") + ": empty")
	case deref(svc.Name) != name:
		return nil, nil, fmt.Errorf("%s: %q, want %q", field("service.name"), deref(svc.Name), name)
	case deref(ses.ID) == "":
		return nil, nil, errors.New(field("session.id") + ": empty")
	case deref(ses.Token) == "":
		return nil, nil, errors.New(field("session.token") + ": empty")
	case deref(ses.ServiceID) != *svc.ID:
		return nil, nil, fmt.Errorf("%s: %q, want the service's id %q", field("session.serviceId"), deref(ses.ServiceID), *svc.ID)
	case ses.Type == nil || *ses.Type != rest_model.DialBindDial:
		return nil, nil, errors.New(field("session.type") + ": want Dial")
	case len(ses.EdgeRouters) == 0:
		return nil, nil, errors.New(field("session.edgeRouters") + ": empty")
	}
	return &svc, &ses, nil
}

// parseSessionRecord reads the file strictly: unknown fields, a wrong type or a missing field is
// refused naming the field (the tick then authenticates as if there were no file).
func parseSessionRecord(data []byte) (*sessionRecord, error) {
	var r sessionRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("not a session record: %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a session record: data after the object")
	}
	switch {
	case r.Schema != sessionSchema:
		return nil, fmt.Errorf("schema: %d, want %d", r.Schema, sessionSchema)
	case len(r.Identity) != sha256.Size*2 || strings.Trim(r.Identity, "0123456789abcdef") != "":
		return nil, errors.New("identity_sha256: want 64 lower-case hex digits")
	case !strings.HasPrefix(r.Controller, "https://"):
		return nil, errors.New("controller: want an https URL")
	case r.Type != sessionLegacy && r.Type != sessionOIDC:
		return nil, fmt.Errorf("type: %q, want legacy or oidc", r.Type)
	case r.Token == "":
		return nil, errors.New("token: empty")
	case r.ObtainedAt.IsZero():
		return nil, errors.New("obtained_at: missing")
	case r.ExpiresAt.IsZero():
		return nil, errors.New("expires_at: missing")
	case !r.ExpiresAt.After(r.ObtainedAt) || r.ExpiresAt.Sub(r.ObtainedAt) > maxSessionLife:
		return nil, fmt.Errorf("expires_at: %s is not within %v after obtained_at", r.ExpiresAt.Format(time.RFC3339), maxSessionLife)
	}
	for name, ks := range r.Services {
		if _, _, err := ks.decode(name); err != nil {
			return nil, err
		}
	}
	for server, kt := range r.TLSSessions {
		if _, err := kt.decode(server); err != nil {
			return nil, err
		}
	}
	return &r, nil
}

// certFingerprint is the hex SHA-256 of a DER certificate.
func certFingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// usable says why a record may not be used by this identity at this controller now ("" when it may).
func (r *sessionRecord) usable(fingerprint, controller string, now time.Time) string {
	switch {
	case r.Identity != fingerprint:
		return "the identity certificate changed"
	case r.Controller != controller:
		return "the controller changed"
	case now.Before(r.ObtainedAt.Add(-sessionMargin)):
		return "obtained in the future (clock turned back)"
	case !now.Before(r.ExpiresAt.Add(-sessionMargin)):
		return "expired"
	}
	return ""
}

// apiSession rebuilds the SDK's session from the record.
func (r *sessionRecord) apiSession() (edge_apis.ApiSession, error) {
	switch r.Type {
	case sessionLegacy:
		tok, sid, iid := r.Token, r.SessionID, r.IdentityID
		exp := strfmt.DateTime(r.ExpiresAt)
		return &edge_apis.ApiSessionLegacy{Detail: &rest_model.CurrentAPISessionDetail{
			APISessionDetail: rest_model.APISessionDetail{
				BaseEntity: rest_model.BaseEntity{ID: &sid},
				Token:      &tok,
				IdentityID: &iid,
				Identity:   &rest_model.EntityRef{ID: iid, Name: r.IdentityName},
			},
			ExpiresAt: &exp,
		}}, nil
	case sessionOIDC:
		claims := &oidc.IDTokenClaims{}
		if r.IDToken != "" {
			if err := claimsOf(r.IDToken, claims); err != nil {
				return nil, fmt.Errorf("id_token: %w", err)
			}
		}
		return &edge_apis.ApiSessionOidc{OidcTokens: &oidc.Tokens[*oidc.IDTokenClaims]{
			Token:         &oauth2.Token{AccessToken: r.Token, RefreshToken: r.RefreshToken, TokenType: "Bearer", Expiry: r.ExpiresAt},
			IDTokenClaims: claims,
			IDToken:       r.IDToken,
		}}, nil
	}
	return nil, fmt.Errorf("type: %q", r.Type)
}

// claimsOf decodes a JWT's claims without verifying it: the controller issued it over TLS to
// this identity, and it came back from our own 0600 file; the router and controller verify it.
func claimsOf(token string, dst any) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return errors.New("not a JWT: payload is not base64url")
	}
	if err := json.Unmarshal(payload, dst); err != nil {
		return errors.New("not a JWT: claims are not JSON")
	}
	return nil
}

// recordOf turns the SDK's current session into a record; nil when it cannot be kept (partial
// authentication, an unknown type, no expiry).
func recordOf(s edge_apis.ApiSession, fingerprint, controller string, now time.Time) *sessionRecord {
	if s == nil || len(s.GetAuthQueries()) > 0 || len(s.GetToken()) == 0 {
		return nil
	}
	r := &sessionRecord{Schema: sessionSchema, Identity: fingerprint, Controller: controller, ObtainedAt: now.UTC(),
		Token: string(s.GetToken())}
	// The SDK's getters dereference what a session may lack: each field is read where it is.
	switch v := s.(type) {
	case *edge_apis.ApiSessionLegacy:
		if v.Detail == nil {
			return nil
		}
		r.Type = sessionLegacy
		r.SessionID, r.IdentityID = deref(v.Detail.ID), deref(v.Detail.IdentityID)
		if v.Detail.Identity != nil {
			r.IdentityName = v.Detail.Identity.Name
		}
	case *edge_apis.ApiSessionOidc:
		if v.OidcTokens == nil || v.OidcTokens.Token == nil {
			return nil
		}
		r.Type = sessionOIDC
		r.RefreshToken, r.IDToken = v.OidcTokens.RefreshToken, v.OidcTokens.IDToken
		if c := v.OidcTokens.IDTokenClaims; c != nil {
			r.IdentityName, r.IdentityID = c.Name, c.Subject
		}
	default:
		return nil
	}
	if at := s.GetExpiresAt(); at != nil && !at.IsZero() {
		r.ExpiresAt = at.UTC()
	} else if r.Type == sessionOIDC {
		var claims jwt.RegisteredClaims
		if claimsOf(r.Token, &claims) == nil && claims.ExpiresAt != nil {
			r.ExpiresAt = claims.ExpiresAt.UTC()
		}
	}
	if !r.ExpiresAt.After(r.ObtainedAt) {
		return nil // no known expiry: not kept (time is an input: no credential without a horizon)
	}
	if most := r.ObtainedAt.Add(maxSessionLife); r.ExpiresAt.After(most) {
		r.ExpiresAt = most
	}
	return r
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// maxSessionFile bounds what is read of the session file: a record holds one session, the
// services it dialed with their dial sessions and a few TLS tickets (a few KiB).
const maxSessionFile = 1 << 20

// readSessionRecord loads the file; a missing file is (nil, nil), anything unusable an error.
// Only a regular file of at most maxSessionFile bytes is read: a symlink is not followed and a
// FIFO put in its place cannot hang the tick; either is unusable, and the tick's own record
// then replaces it.
func readSessionRecord(path string) (*sessionRecord, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, errors.New("it is a symlink, which the agent never writes")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := capread.Regular(f, maxSessionFile, fmt.Errorf("larger than %d bytes", maxSessionFile), nil)
	var notRegular *capread.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, fmt.Errorf("it is %w", err)
	}
	if err != nil {
		return nil, err
	}
	return parseSessionRecord(data)
}

// writeSessionRecord replaces the file atomically, 0600 (it holds bearer tokens).
func writeSessionRecord(path string, r *sessionRecord) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(data, '\n'), 0o600)
}

// keptSession is one tick's use of the session file by an SDK context.
type keptSession struct {
	path, fingerprint, controller string
	impl                          *ziti.ContextImpl
	log                           *slog.Logger
	now                           func() time.Time
	tickets                       *ticketCache

	mu sync.Mutex
	// restored: the context runs on the file's session, not (yet) replaced this tick.
	restored bool
	looked   map[string]bool // services known on the restored session (kept, or looked up by name)
	dialed   map[string]bool // services dialed this tick: their dial sessions are kept
	// onFile is what the file holds (nil when none): only a change is written.
	onFile *sessionRecord
}

// restore puts the file's session into the context when it is this identity's and unexpired,
// with the services it dialed and their dial sessions: a converged tick's dial then asks the
// controller nothing. A kept dial session the controller no longer knows does not fail the dial:
// the router admits it on the identity's policies (ziti v1.7's router data model), or the SDK,
// refused, creates another and dials again.
func (k *keptSession) restore() {
	r, err := readSessionRecord(k.path)
	if err != nil {
		k.log.Info("ziti: the kept controller session is unusable; authenticating", "file", k.path, "why", err.Error())
		return
	}
	if r == nil {
		return
	}
	k.onFile = r
	if r.Identity == k.fingerprint {
		k.tickets.load(r.TLSSessions)
	}
	if why := r.usable(k.fingerprint, k.controller, k.now()); why != "" {
		k.log.Debug("ziti: the kept controller session is not used; authenticating", "why", why)
		return
	}
	s, err := r.apiSession()
	if err != nil {
		k.log.Info("ziti: the kept controller session is unusable; authenticating", "file", k.path, "why", err.Error())
		return
	}
	if err := setMetrics(k.impl, r.IdentityName); err != nil {
		k.log.Info("ziti: the kept controller session cannot be used with this SDK; authenticating", "why", err.Error())
		return
	}
	k.impl.CtrlClt.ApiSession.Store(&s)
	k.restored = true
	k.tickets.ctrlArmed.Store(true)
	k.looked = map[string]bool{}
	if err := k.restoreServices(r); err != nil {
		// The API session alone still saves the authentication; services are looked up.
		k.log.Info("ziti: the kept services cannot be used with this SDK; looking them up", "why", err.Error())
	}
	k.log.Debug("ziti: using the kept controller session", "expires_at", r.ExpiresAt.Format(time.RFC3339), "services", len(k.looked))
}

// restoreServices puts the record's services and dial sessions into the context's caches.
func (k *keptSession) restoreServices(r *sessionRecord) error {
	if len(r.Services) == 0 {
		return nil
	}
	services, err := sdkMap[*rest_model.ServiceDetail](k.impl, "services")
	if err != nil {
		return err
	}
	sessions, err := sdkMap[*rest_model.SessionDetail](k.impl, "sessions")
	if err != nil {
		return err
	}
	for name, ks := range r.Services {
		svc, ses, err := ks.decode(name) // checked at parse: cannot fail here
		if err != nil {
			return err
		}
		services.Set(name, svc)
		sessions.Set(dialSessionKey(*svc.ID), ses)
		k.looked[name] = true
	}
	return nil
}

// dialSessionKey is how sdk-golang v1.9.0 keys a service's dial session in its cache.
func dialSessionKey(serviceID string) string {
	return serviceID + ":" + string(rest_model.DialBindDial)
}

// lookup fetches service by name once on a restored session that did not keep it: the SDK lists
// a context's services only when it authenticates, and would otherwise not know the service.
// The lookup stops waiting when ctx is done (the SDK's own retries take no context).
func (k *keptSession) lookup(ctx context.Context, service string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.restored || k.looked[service] {
		return nil
	}
	done := make(chan error, 1)
	go func() {
		done <- safeCall("look up "+service, func() error {
			_, err := k.impl.RefreshService(service)
			return err
		})
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("looking up service %s: %w", service, err)
	}
	k.looked[service] = true
	return nil
}

// dialedOK notes that service was dialed: keep records its dial session.
func (k *keptSession) dialedOK(service string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dialed == nil {
		k.dialed = map[string]bool{}
	}
	k.dialed[service] = true
}

// reauthenticate drops a restored session after err, so that the next dial authenticates afresh
// (inside the dial, which is bounded by its context: the SDK's authentication waits on an
// unreachable controller without one, and lists the services and clears the dial sessions it
// had); false when the context was not on a restored session (err is then the answer).
func (k *keptSession) reauthenticate(err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.restored {
		return false
	}
	k.restored = false
	k.tickets.ctrlArmed.Store(false) // the authentication must present the certificate
	k.log.Info("ziti: the kept controller session did not serve; authenticating again", "why", redactSDK(err.Error()))
	k.impl.CtrlClt.ApiSession.Store(nil)
	return true
}

// keep writes the context's session to the file when it changed (a fresh authentication, a
// refreshed token, a new dial session); a session gone after a refusal removes the file.
// Failures only cost the next tick an authentication: they are logged, never fatal.
func (k *keptSession) keep() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if n, resumed := k.tickets.counts(); n > 0 {
		k.log.Debug("ziti: TLS handshakes with the controller and edge routers", "handshakes", n, "resumed", resumed)
	}
	var cur edge_apis.ApiSession
	_ = safeCall("read the session", func() error { cur = k.impl.CtrlClt.GetCurrentApiSession(); return nil })
	if cur == nil {
		if k.onFile != nil && !k.restored {
			if err := os.Remove(k.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				k.log.Warn("ziti: the refused controller session could not be removed", "file", k.path, "error", err.Error())
			}
		}
		return
	}
	var r *sessionRecord
	sameSession := k.onFile != nil && string(cur.GetToken()) == k.onFile.Token
	if sameSession {
		c := *k.onFile
		r = &c
	} else {
		_ = safeCall("record the session", func() error { r = recordOf(cur, k.fingerprint, k.controller, k.now()); return nil })
		if r == nil {
			return
		}
	}
	// Dial sessions belong to their API session: a new one starts with none.
	services := map[string]keptService{}
	if sameSession {
		maps.Copy(services, k.onFile.Services)
	}
	maps.Copy(services, k.dialedServices())
	if len(services) == 0 {
		services = nil
	}
	var onFileTLS map[string]keptTicket
	if k.onFile != nil && k.onFile.Identity == k.fingerprint {
		onFileTLS = k.onFile.TLSSessions
	}
	tickets, ticketsChanged := k.tickets.toKeep(onFileTLS)
	if sameSession && reflect.DeepEqual(services, k.onFile.Services) && !ticketsChanged {
		return
	}
	r.Services, r.TLSSessions = services, tickets
	if err := writeSessionRecord(k.path, r); err != nil {
		k.log.Warn("ziti: the controller session could not be kept; the next tick authenticates again", "file", k.path, "error", err.Error())
		return
	}
	k.onFile = r
	if !sameSession {
		k.log.Info("ziti: authenticated to the controller; the session is kept for the next ticks", "file", k.path, "expires_at", r.ExpiresAt.Format(time.RFC3339))
	}
}

// dialedServices is what the context's caches hold of the services dialed this tick.
func (k *keptSession) dialedServices() map[string]keptService {
	if len(k.dialed) == 0 {
		return nil
	}
	services, err := sdkMap[*rest_model.ServiceDetail](k.impl, "services")
	if err != nil {
		return nil
	}
	sessions, err := sdkMap[*rest_model.SessionDetail](k.impl, "sessions")
	if err != nil {
		return nil
	}
	out := map[string]keptService{}
	for name := range k.dialed {
		svc, ok := services.Get(name)
		if !ok || svc == nil || svc.ID == nil {
			continue
		}
		ses, ok := sessions.Get(dialSessionKey(*svc.ID))
		if !ok || ses == nil {
			continue
		}
		svcJSON, err1 := json.Marshal(svc)
		sesJSON, err2 := json.Marshal(ses)
		ks := keptService{Service: svcJSON, Session: sesJSON}
		if err1 != nil || err2 != nil {
			continue
		}
		if _, _, err := ks.decode(name); err != nil {
			continue // not what a next tick could use
		}
		out[name] = ks
	}
	return out
}

// sdkMap is one of sdk-golang v1.9.0's unexported caches of a context (services by name, dial
// sessions by service id), checked by name and type like setMetrics: another SDK version that
// lacks it only costs the lookups and dial sessions, never the process.
func sdkMap[V any](impl *ziti.ContextImpl, name string) (cmap.ConcurrentMap[string, V], error) {
	v := reflect.ValueOf(impl).Elem().FieldByName(name)
	want := reflect.TypeFor[cmap.ConcurrentMap[string, V]]()
	if !v.IsValid() || v.Type() != want {
		return cmap.ConcurrentMap[string, V]{}, fmt.Errorf("sdk-golang's ContextImpl has no %s cache of the expected type", name)
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem().Interface().(cmap.ConcurrentMap[string, V]), nil
}

// setMetrics gives the context the metrics registry sdk-golang v1.9.0 creates only in its first
// full authentication (onFullAuth), which a restored session skips: its edge router connection
// records latencies there and would dereference nil. The field is unexported; it is set through
// reflect, checked by name and type, so another SDK version that lacks it only costs the
// authentication (an error here, the session unused), never the process.
func setMetrics(impl *ziti.ContextImpl, identityName string) error {
	v := reflect.ValueOf(impl).Elem().FieldByName("metrics")
	want := reflect.TypeFor[metrics.Registry]()
	if !v.IsValid() || v.Type() != want {
		return errors.New("sdk-golang's ContextImpl has no metrics registry field of the expected type")
	}
	field := reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
	if field.IsNil() {
		field.Set(reflect.ValueOf(metrics.NewRegistry(identityName, map[string]string{})))
	}
	return nil
}
