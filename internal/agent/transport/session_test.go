package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/openziti/edge-api/rest_model"
	edge_apis "github.com/openziti/sdk-golang/edge-apis"
)

var sessionNow = time.Date(2026, 12, 3, 20, 0, 0, 0, time.UTC)

const testFingerprint = "aa00000000000000000000000000000000000000000000000000000000000000"

func validRecord() sessionRecord {
	return sessionRecord{Schema: sessionSchema, Identity: testFingerprint, Controller: "https://ctrl:1280",
		Type: sessionLegacy, Token: "0a1b-legacy-token-secret", SessionID: "s1", IdentityID: "i1", IdentityName: "monky-host.env-qa-02",
		ObtainedAt: sessionNow.Add(-time.Minute), ExpiresAt: sessionNow.Add(29 * time.Minute)}
}

// testService is a service and its dial session as the controller answers them.
func testService(t testing.TB, name, svcID, token string) keptService {
	t.Helper()
	svc := rest_model.ServiceDetail{BaseEntity: rest_model.BaseEntity{ID: &svcID}, Name: &name}
	typ := rest_model.DialBindDial
	sid, erName, addr := "ses-"+svcID, "router-1", "tls:router:3022"
	ses := rest_model.SessionDetail{BaseEntity: rest_model.BaseEntity{ID: &sid}, ServiceID: &svcID, Token: &token, Type: &typ,
		EdgeRouters: []*rest_model.SessionEdgeRouter{{CommonEdgeRouterProperties: rest_model.CommonEdgeRouterProperties{Name: &erName,
			SupportedProtocols: map[string]string{"tls": addr}}}}}
	return keptService{Service: encodeRecord(t, &svc), Session: encodeRecord(t, &ses)}
}

func encodeRecord(t testing.TB, r any) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The file is our own state and is read strictly: every fault names the field.
func TestParseSessionRecordNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(r map[string]any)
		field string
	}{
		{"schema", func(r map[string]any) { r["schema"] = 2 }, "schema"},
		{"fingerprint", func(r map[string]any) { r["identity_sha256"] = "AB" }, "identity_sha256"},
		{"controller", func(r map[string]any) { r["controller"] = "http://ctrl" }, "controller"},
		{"type", func(r map[string]any) { r["type"] = "cookie" }, "type"},
		{"token", func(r map[string]any) { r["token"] = "" }, "token"},
		{"obtained", func(r map[string]any) { delete(r, "obtained_at") }, "obtained_at"},
		{"expires missing", func(r map[string]any) { delete(r, "expires_at") }, "expires_at"},
		{"expires a year on", func(r map[string]any) { r["expires_at"] = sessionNow.AddDate(1, 0, 0) }, "expires_at"},
		{"unknown field", func(r map[string]any) { r["password"] = "x" }, "password"},
		{"wrong type", func(r map[string]any) { r["schema"] = "1" }, "schema"},
		{"service not an object", func(r map[string]any) {
			r["services"] = map[string]any{"tenancy": map[string]any{"service": 7, "session": 7}}
		}, `services["tenancy"].service`},
		{"service of another name", func(r map[string]any) { editService(r, "service", "name", "bao") }, `services["tenancy"].service.name`},
		{"service without id", func(r map[string]any) { editService(r, "service", "id", "") }, `services["tenancy"].service.id`},
		{"dial session token", func(r map[string]any) { editService(r, "session", "token", "") }, `services["tenancy"].session.token`},
		{"dial session of another service", func(r map[string]any) { editService(r, "session", "serviceId", "svc-other") }, `services["tenancy"].session.serviceId`},
		{"bind session", func(r map[string]any) { editService(r, "session", "type", "Bind") }, `services["tenancy"].session.type`},
		{"no edge routers", func(r map[string]any) { editService(r, "session", "edgeRouters", []any{}) }, `services["tenancy"].session.edgeRouters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]any
			r := validRecord()
			r.Services = map[string]keptService{"tenancy": testService(t, "tenancy", "svc-1", "dial-session-token-secret")}
			if err := json.Unmarshal(encodeRecord(t, r), &m); err != nil {
				t.Fatal(err)
			}
			tc.edit(m)
			_, err := parseSessionRecord(encodeRecord(t, m))
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v, want one naming %s", err, tc.field)
			}
			if strings.Contains(err.Error(), "token-secret") {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
	if _, err := parseSessionRecord(encodeRecord(t, validRecord())); err != nil {
		t.Fatalf("a valid record: %v", err)
	}
}

// editService sets one field of the record's tenancy service (a generic map from JSON).
func editService(r map[string]any, part, field string, v any) {
	r["services"].(map[string]any)["tenancy"].(map[string]any)[part].(map[string]any)[field] = v
}

// A record serves only the certificate that obtained it, at its controller, until a minute
// before its expiry: a renewed identity (issue 21) authenticates by itself.
func TestSessionRecordUsable(t *testing.T) {
	r := validRecord()
	for _, tc := range []struct {
		name, fingerprint, controller string
		now                           time.Time
		want                          string
	}{
		{"fresh", testFingerprint, "https://ctrl:1280", sessionNow, ""},
		{"identity renewed", strings.Repeat("b", 64), "https://ctrl:1280", sessionNow, "identity certificate changed"},
		{"other controller", testFingerprint, "https://other:1280", sessionNow, "controller changed"},
		{"expired", testFingerprint, "https://ctrl:1280", r.ExpiresAt.Add(time.Second), "expired"},
		{"within the margin", testFingerprint, "https://ctrl:1280", r.ExpiresAt.Add(-30 * time.Second), "expired"},
		{"clock turned back", testFingerprint, "https://ctrl:1280", r.ObtainedAt.Add(-time.Hour), "clock turned back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.usable(tc.fingerprint, tc.controller, tc.now)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("usable = %q, want %q", got, tc.want)
			}
		})
	}
}

// fakeJWT is an unsigned token with these claims (the kept session's claims are read, never trusted).
func fakeJWT(t testing.TB, claims map[string]any) string {
	t.Helper()
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"ES256"}`)) + "." + enc.EncodeToString(encodeRecord(t, claims)) + ".c2ln"
}

// keptFixture is an SDK context of a real identity (its controller unreachable: nothing here
// dials) with a session file in a temp state dir.
func keptFixture(t *testing.T) (*zitiDialer, string) {
	t.Helper()
	dir := t.TempDir()
	idPath := filepath.Join(dir, "id.json")
	if err := os.WriteFile(idPath, validIdentity(t, "https://127.0.0.1:1"), 0o600); err != nil {
		t.Fatal(err)
	}
	sessionFile := filepath.Join(dir, "ziti-session.json")
	d, err := newZitiDialer(idPath, nil, nil, sessionFile)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if d.kept == nil {
		t.Fatal("no kept session with a session file")
	}
	d.kept.now = func() time.Time { return sessionNow }
	return d, sessionFile
}

// restoreFresh builds a new dialer of the same identity, as the next tick does.
func restoreFresh(t *testing.T, d *zitiDialer, sessionFile string) *keptSession {
	t.Helper()
	k := &keptSession{path: sessionFile, fingerprint: d.kept.fingerprint, controller: d.kept.controller, impl: d.kept.impl,
		log: loggerOrDiscard(nil), now: func() time.Time { return sessionNow }, tickets: newTicketCache(func() time.Time { return sessionNow })}
	k.impl.CtrlClt.ApiSession.Store(nil)
	k.restore()
	return k
}

// What one tick keeps, the next uses: the session goes to the file (0600, tokens nowhere else)
// when it changed, and comes back into a new context as the SDK's own type — legacy and OIDC.
func TestKeptSessionRoundTrip(t *testing.T) {
	d, sessionFile := keptFixture(t)
	k := d.kept
	idToken := fakeJWT(t, map[string]any{"sub": "i1", "name": "monky-host.env-qa-02", "exp": sessionNow.Add(time.Hour).Unix()})
	access := fakeJWT(t, map[string]any{"sub": "i1", "exp": sessionNow.Add(30 * time.Minute).Unix()})
	for _, tc := range []struct {
		name    string
		session edge_apis.ApiSession
		typ     string
	}{
		{"legacy", func() edge_apis.ApiSession {
			s := edge_apis.NewApiSessionLegacy("0a1b-legacy-token-secret")
			r := validRecord()
			s2, _ := r.apiSession()
			return mustLegacy(s, s2)
		}(), sessionLegacy},
		{"oidc", func() edge_apis.ApiSession {
			s := edge_apis.NewApiSessionOidc(access, "refresh-token-secret")
			s.OidcTokens.IDToken = idToken
			s.OidcTokens.Expiry = sessionNow.Add(30 * time.Minute)
			return s
		}(), sessionOIDC},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(sessionFile)
			k.onFile, k.restored = nil, false
			k.impl.CtrlClt.ApiSession.Store(&tc.session)
			k.keep()
			st, err := os.Stat(sessionFile)
			if err != nil {
				t.Fatalf("keep wrote no file: %v", err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("session file mode %v, want 0600", st.Mode().Perm())
			}
			r, err := readSessionRecord(sessionFile)
			if err != nil || r.Type != tc.typ || r.Identity != k.fingerprint || r.Controller != "https://127.0.0.1:1" {
				t.Fatalf("record %+v, %v", r, err)
			}
			before := st.ModTime()
			k.keep() // unchanged: not written again
			if st2, _ := os.Stat(sessionFile); !st2.ModTime().Equal(before) || k.onFile == nil || k.onFile.Token != r.Token {
				t.Error("an unchanged session was written again")
			}

			next := restoreFresh(t, d, sessionFile)
			got := next.impl.CtrlClt.GetCurrentApiSession()
			if !next.restored || got == nil || string(got.GetToken()) != string(tc.session.GetToken()) {
				t.Fatalf("the next tick did not restore the session (restored %v)", next.restored)
			}
			// Without it the first edge router connection panics (sdk-golang v1.9.0 creates it
			// only when it authenticates).
			if reflect.ValueOf(next.impl).Elem().FieldByName("metrics").IsNil() {
				t.Error("the restored context has no metrics registry")
			}
			if got.GetIdentityName() != "monky-host.env-qa-02" {
				t.Errorf("restored identity name %q (the SDK sends it as the dial's caller id)", got.GetIdentityName())
			}
		})
	}
}

func mustLegacy(_ edge_apis.ApiSession, s edge_apis.ApiSession) edge_apis.ApiSession { return s }

// A session the file holds is not used when it expired or the certificate changed (renewal):
// the context then authenticates as on a first tick, and keep replaces the file.
func TestKeptSessionNotUsed(t *testing.T) {
	d, sessionFile := keptFixture(t)
	for _, tc := range []struct {
		name string
		edit func(r *sessionRecord)
	}{
		{"expired", func(r *sessionRecord) { r.ExpiresAt = sessionNow.Add(-time.Second) }},
		{"identity renewed", func(r *sessionRecord) { r.Identity = strings.Repeat("c", 64) }},
		{"other controller", func(r *sessionRecord) { r.Controller = "https://elsewhere:1280" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRecord()
			r.Identity, r.Controller = d.kept.fingerprint, d.kept.controller
			tc.edit(&r)
			if err := writeSessionRecord(sessionFile, &r); err != nil {
				t.Fatal(err)
			}
			k := restoreFresh(t, d, sessionFile)
			if k.restored || k.impl.CtrlClt.GetCurrentApiSession() != nil {
				t.Fatal("an unusable session was put into the context")
			}
		})
	}
	if err := os.WriteFile(sessionFile, []byte(`{"schema": 1, "token": 7}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if k := restoreFresh(t, d, sessionFile); k.restored {
		t.Fatal("a broken file was used")
	}
}

// Only a regular file of at most maxSessionFile bytes is read as the session file: a symlink
// (to a good record) is not followed, a FIFO does not hang the tick, an oversized file (a good
// record padded with blanks) is not read whole; each is unusable, so the tick authenticates, and
// the record it writes replaces the link, not the file the link names.
func TestKeptSessionFileIsARegularFileOfBoundedSize(t *testing.T) {
	d, sessionFile := keptFixture(t)
	good := validRecord()
	good.Identity, good.Controller = d.kept.fingerprint, d.kept.controller
	goodFile := filepath.Join(t.TempDir(), "elsewhere.json")
	if err := writeSessionRecord(goodFile, &good); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(goodFile)
	if err != nil {
		t.Fatal(err)
	}
	if k := restoreFresh(t, d, goodFile); !k.restored {
		t.Fatal("the good record itself is not restored: the cases below would prove nothing")
	}
	for _, tc := range []struct {
		name, why string
		make      func(p string) error
	}{
		{"symlink to a good record", "symlink", func(p string) error { return os.Symlink(goodFile, p) }},
		{"fifo", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
		{"directory", "not a regular file", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"good record padded past the cap", "larger than 1048576 bytes", func(p string) error {
			return os.WriteFile(p, append(append([]byte{}, raw...), bytes.Repeat([]byte(" "), maxSessionFile)...), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(sessionFile)
			if err := tc.make(sessionFile); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := readSessionRecord(sessionFile)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), tc.why) {
					t.Errorf("readSessionRecord: %v, want an error saying %q", err, tc.why)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("reading the session file hangs")
			}
			if k := restoreFresh(t, d, sessionFile); k.restored || k.impl.CtrlClt.GetCurrentApiSession() != nil {
				t.Error("an unusable session file was used")
			}
		})
	}
	os.RemoveAll(sessionFile)
	if err := os.Symlink(goodFile, sessionFile); err != nil {
		t.Fatal(err)
	}
	other := good
	other.Token = "replaced"
	if err := writeSessionRecord(sessionFile, &other); err != nil {
		t.Fatal(err)
	}
	if after, err := os.ReadFile(goodFile); err != nil || !bytes.Equal(after, raw) {
		t.Errorf("writing the session file wrote through the link into %s", goodFile)
	}
	if fi, err := os.Lstat(sessionFile); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("the session file after a write: %v, %v; want a regular file", fi, err)
	}
}

// A restored session that did not serve is dropped once for a full authentication; a session
// that came from authenticating this tick is not (its failure is the answer).
func TestKeptSessionReauthenticatesOnce(t *testing.T) {
	d, sessionFile := keptFixture(t)
	r := validRecord()
	r.Identity, r.Controller = d.kept.fingerprint, d.kept.controller
	if err := writeSessionRecord(sessionFile, &r); err != nil {
		t.Fatal(err)
	}
	k := restoreFresh(t, d, sessionFile)
	if !k.restored {
		t.Fatal("not restored")
	}
	if !k.reauthenticate(os.ErrDeadlineExceeded) {
		t.Fatal("a restored session that failed was not dropped for a new authentication")
	}
	if k.impl.CtrlClt.GetCurrentApiSession() != nil {
		t.Error("the refused session is still in the context (the controller is unreachable: no new one)")
	}
	if k.tickets.ctrlArmed.Load() {
		t.Error("the controller's tickets still serve: the authentication would resume without a certificate")
	}
	if k.reauthenticate(os.ErrDeadlineExceeded) {
		t.Error("a second failure authenticated again")
	}
	k.keep()
	if _, err := os.Stat(sessionFile); !os.IsNotExist(err) {
		t.Errorf("the refused session's file is still there: %v", err)
	}
}

// The services a tick dialed ride in the file with their dial sessions, and the next tick's
// context has them in its caches: its dial neither looks the service up nor creates a session
// (the controller here is unreachable: asking it would fail). An unchanged set is not written
// again; a new API session (the controller refused the kept one) starts without them.
func TestKeptSessionKeepsDialSessions(t *testing.T) {
	d, sessionFile := keptFixture(t)
	k := d.kept
	r := validRecord()
	r.Identity, r.Controller = k.fingerprint, k.controller
	if err := writeSessionRecord(sessionFile, &r); err != nil {
		t.Fatal(err)
	}
	k = restoreFresh(t, d, sessionFile)
	if !k.restored {
		t.Fatal("not restored")
	}
	// What the SDK caches after a lookup and a dial on the restored session.
	want := testService(t, "tenancy", "svc-1", "dial-session-token-secret")
	svc, ses, err := want.decode("tenancy")
	if err != nil {
		t.Fatal(err)
	}
	services, err := sdkMap[*rest_model.ServiceDetail](k.impl, "services")
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := sdkMap[*rest_model.SessionDetail](k.impl, "sessions")
	if err != nil {
		t.Fatal(err)
	}
	services.Set("tenancy", svc)
	sessions.Set(dialSessionKey("svc-1"), ses)
	services.Set("bao", svc) // cached but not dialed this tick: not kept
	k.dialedOK("tenancy")
	k.keep()
	got, err := readSessionRecord(sessionFile)
	if err != nil || len(got.Services) != 1 || got.Token != r.Token {
		t.Fatalf("record %+v, %v: want the same API session with the tenancy service", got, err)
	}
	st, _ := os.Stat(sessionFile)
	k.keep()
	if st2, _ := os.Stat(sessionFile); !st2.ModTime().Equal(st.ModTime()) {
		t.Error("an unchanged record was written again")
	}

	services.Clear()
	sessions.Clear()
	next := restoreFresh(t, d, sessionFile)
	if !next.restored || !next.looked["tenancy"] {
		t.Fatalf("the next tick did not restore the tenancy service (looked %v)", next.looked)
	}
	if s, ok := services.Get("tenancy"); !ok || *s.ID != "svc-1" {
		t.Fatal("the service is not in the restored context's cache")
	}
	if s, ok := sessions.Get(dialSessionKey("svc-1")); !ok || *s.Token != "dial-session-token-secret" {
		t.Fatal("the dial session is not in the restored context's cache")
	}
	if err := next.lookup(t.Context(), "tenancy"); err != nil {
		t.Fatalf("a kept service was looked up again: %v", err)
	}
	if err := next.lookup(t.Context(), "bao"); err == nil {
		t.Fatal("a service not kept was not looked up (the unreachable controller should have failed it)")
	}

	// The controller refused the kept session; the tick authenticated anew.
	fresh := edge_apis.ApiSession(&edge_apis.ApiSessionLegacy{Detail: &rest_model.CurrentAPISessionDetail{
		APISessionDetail: rest_model.APISessionDetail{Token: ptr("new-token-secret"), BaseEntity: rest_model.BaseEntity{ID: ptr("s2")}},
		ExpiresAt:        ptr(strfmt.DateTime(sessionNow.Add(time.Hour)))}})
	next.impl.CtrlClt.ApiSession.Store(&fresh)
	next.restored = false
	next.keep()
	got, err = readSessionRecord(sessionFile)
	if err != nil || got.Token != "new-token-secret" || len(got.Services) != 0 {
		t.Fatalf("record %+v, %v: want the new session without the old one's dial sessions", got, err)
	}
}

func ptr[T any](v T) *T { return &v }

func FuzzParseSessionRecord(f *testing.F) {
	f.Add(encodeRecord(f, validRecord()))
	f.Add(encodeRecord(f, func() sessionRecord {
		r := validRecord()
		r.Services = map[string]keptService{"tenancy": testService(f, "tenancy", "svc-1", "t")}
		return r
	}()))
	f.Add([]byte(`{"schema":1}`))
	f.Add([]byte(`{}`))
	f.Add(encodeRecord(f, func() sessionRecord {
		r := validRecord()
		r.TLSSessions = map[string]keptTicket{"router ctrl": {Ticket: []byte("t"), State: []byte{0, 1}, StoredAt: sessionNow}}
		return r
	}()))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := parseSessionRecord(data)
		if err != nil {
			return
		}
		if r.Token == "" || r.ExpiresAt.Before(r.ObtainedAt) || (r.Type != sessionLegacy && r.Type != sessionOIDC) {
			t.Fatalf("accepted a record no agent writes: %+v", r)
		}
		if _, err := r.apiSession(); err != nil && r.Type == sessionLegacy {
			t.Fatalf("a legacy record that parsed cannot be restored: %v", err)
		}
		for name, ks := range r.Services {
			if svc, ses, err := ks.decode(name); err != nil || *ses.ServiceID != *svc.ID || len(ses.EdgeRouters) == 0 {
				t.Fatalf("accepted a service a dial cannot use: %s: %v", name, err)
			}
		}
		for server, kt := range r.TLSSessions {
			if cs, err := kt.decode(server); err != nil || cs == nil || len(kt.Ticket) == 0 {
				t.Fatalf("accepted a TLS session crypto/tls cannot resume: %s: %v", server, err)
			}
		}
	})
}
