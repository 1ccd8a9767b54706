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
	"os"
	"reflect"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/go-openapi/strfmt"
	"github.com/golang-jwt/jwt/v5"
	"github.com/openziti/edge-api/rest_model"
	"github.com/openziti/metrics"
	edge_apis "github.com/openziti/sdk-golang/edge-apis"
	"github.com/openziti/sdk-golang/ziti"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
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

// readSessionRecord loads the file; a missing file is (nil, nil), anything unusable an error.
func readSessionRecord(path string) (*sessionRecord, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
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

	mu sync.Mutex
	// restored: the context runs on the file's session, not (yet) replaced this tick.
	restored bool
	looked   map[string]bool // services looked up by name on the restored session
	// onFile is the token the file holds ("" when none): only a change is written.
	onFile string
}

// restore puts the file's session into the context when it is this identity's and unexpired.
func (k *keptSession) restore() {
	r, err := readSessionRecord(k.path)
	if err != nil {
		k.log.Info("ziti: the kept controller session is unusable; authenticating", "file", k.path, "why", err.Error())
		return
	}
	if r == nil {
		return
	}
	k.onFile = r.Token
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
	k.looked = map[string]bool{}
	k.log.Debug("ziti: using the kept controller session", "expires_at", r.ExpiresAt.Format(time.RFC3339))
}

// lookup fetches service by name once on a restored session: the SDK lists a context's services
// only when it authenticates, and would otherwise not know the service.
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

// reauthenticate drops a restored session after err, so that the next dial authenticates afresh
// (inside the dial, which is bounded by its context: the SDK's authentication waits on an
// unreachable controller without one); false when the context was not on a restored session
// (err is then the answer).
func (k *keptSession) reauthenticate(err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.restored {
		return false
	}
	k.restored = false
	k.log.Info("ziti: the kept controller session did not serve; authenticating again", "why", redactSDK(err.Error()))
	k.impl.CtrlClt.ApiSession.Store(nil)
	return true
}

// keep writes the context's session to the file when it changed (a fresh authentication, a
// refreshed token); a session gone after a refusal removes the file. Failures only cost the next
// tick an authentication: they are logged, never fatal.
func (k *keptSession) keep() {
	k.mu.Lock()
	defer k.mu.Unlock()
	var cur edge_apis.ApiSession
	_ = safeCall("read the session", func() error { cur = k.impl.CtrlClt.GetCurrentApiSession(); return nil })
	if cur == nil {
		if k.onFile != "" && !k.restored {
			if err := os.Remove(k.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				k.log.Warn("ziti: the refused controller session could not be removed", "file", k.path, "error", err.Error())
			}
		}
		return
	}
	if string(cur.GetToken()) == k.onFile {
		return
	}
	var r *sessionRecord
	_ = safeCall("record the session", func() error { r = recordOf(cur, k.fingerprint, k.controller, k.now()); return nil })
	if r == nil {
		return
	}
	if err := writeSessionRecord(k.path, r); err != nil {
		k.log.Warn("ziti: the controller session could not be kept; the next tick authenticates again", "file", k.path, "error", err.Error())
		return
	}
	k.onFile = r.Token
	k.log.Info("ziti: authenticated to the controller; the session is kept for the next ticks", "file", k.path, "expires_at", r.ExpiresAt.Format(time.RFC3339))
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
