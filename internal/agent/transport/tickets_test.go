package transport

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"
)

// tlsServer is a TLS 1.3 server as the edge router is one (a Go server issuing session tickets).
func tlsServer(t *testing.T) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

// handshake connects to srv through c as kind and reads an answer (the server's ticket comes
// after the handshake); it reports whether the connection resumed.
func handshake(t *testing.T, srv *httptest.Server, pool *x509.CertPool, c *ticketCache, kind string) bool {
	t.Helper()
	resumed, answer := request(t, srv, pool, func(cfg *tls.Config) { c.resumeWith(cfg, kind) })
	if !strings.HasSuffix(answer, "ok") {
		t.Fatalf("answer %q", answer)
	}
	return resumed
}

// request makes one GET to srv over a TLS 1.3 config that arm prepares, and returns whether
// the connection resumed and the answer.
func request(t *testing.T, srv *httptest.Server, pool *x509.CertPool, arm func(*tls.Config)) (resumed bool, answer string) {
	t.Helper()
	cfg := &tls.Config{RootCAs: pool, ServerName: "example.com", MinVersion: tls.VersionTLS13}
	arm(cfg)
	conn, err := tls.Dial("tcp", srv.Listener.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.0\r\nHost: example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatal(err)
	}
	return conn.ConnectionState().DidResume, string(b)
}

// throughFile is what the next tick loads: the tickets written in the record and read back.
func throughFile(t *testing.T, tickets map[string]keptTicket) map[string]keptTicket {
	t.Helper()
	r := validRecord()
	r.TLSSessions = tickets
	path := t.TempDir() + "/ziti-session.json"
	if err := writeSessionRecord(path, &r); err != nil {
		t.Fatal(err)
	}
	back, err := readSessionRecord(path)
	if err != nil {
		t.Fatal(err)
	}
	return back.TLSSessions
}

// A tick's ticket lets the next tick resume; a ticket that resumed is not written again until it
// is a day old; one older than 7 days or from the future is not offered; a server that no longer
// takes it (restarted: new ticket keys) costs a full handshake in the same connection, whose
// ticket replaces it.
func TestTicketsResumeTheNextTick(t *testing.T) {
	srv, pool := tlsServer(t)
	now := sessionNow
	clock := func() time.Time { return now }

	first := newTicketCache(clock)
	if handshake(t, srv, pool, first, "router") {
		t.Fatal("the first tick resumed with no ticket")
	}
	kept, changed := first.toKeep(nil)
	if !changed || len(kept) != 1 || kept["router example.com"].StoredAt.IsZero() {
		t.Fatalf("the first tick keeps %v (changed %v), want the router's ticket", keys(kept), changed)
	}
	onFile := throughFile(t, kept)

	next := newTicketCache(clock)
	next.load(onFile)
	if !handshake(t, srv, pool, next, "router") {
		t.Fatal("the next tick did not resume with the kept ticket")
	}
	if _, changed := next.toKeep(onFile); changed {
		t.Error("a ticket that resumed was written again (a write every tick)")
	}
	if h, r := next.counts(); h != 1 || r != 1 {
		t.Errorf("counts %d handshakes, %d resumed; want 1, 1", h, r)
	}

	now = sessionNow.Add(ticketRefresh + time.Minute)
	aged := newTicketCache(clock)
	aged.load(onFile)
	if !handshake(t, srv, pool, aged, "router") {
		t.Fatal("a day-old ticket did not resume")
	}
	if k, changed := aged.toKeep(onFile); !changed || !k["router example.com"].StoredAt.Equal(now) {
		t.Error("a day-old ticket was not replaced by the newest")
	}

	for _, at := range []time.Time{sessionNow.Add(maxTicketAge), sessionNow.Add(-2 * sessionMargin)} {
		now = at
		old := newTicketCache(clock)
		old.load(onFile)
		if handshake(t, srv, pool, old, "router") {
			t.Errorf("at %v a ticket stored at %v was offered", at, sessionNow)
		}
	}

	now = sessionNow
	restarted, pool2 := tlsServer(t) // other ticket keys, same names
	again := newTicketCache(clock)
	again.load(onFile)
	if handshake(t, restarted, pool2, again, "router") {
		t.Fatal("another server's ticket resumed")
	}
	if k, changed := again.toKeep(onFile); !changed || string(k["router example.com"].Ticket) == string(onFile["router example.com"].Ticket) {
		t.Error("the refused ticket was not replaced after the full handshake")
	}
}

// The controller authenticates by the certificate of the TLS handshake, which a resumed one does
// not present: its tickets serve only while the tick runs on a restored API session, and a
// router's ticket is never offered to the controller of the same host.
func TestControllerTicketsServeOnlyARestoredSession(t *testing.T) {
	srv, pool := tlsServer(t)
	first := newTicketCache(func() time.Time { return sessionNow })
	handshake(t, srv, pool, first, "controller")
	handshake(t, srv, pool, first, "router")
	kept, _ := first.toKeep(nil)
	if len(kept) != 2 {
		t.Fatalf("kept %v, want the controller's and the router's", keys(kept))
	}

	next := newTicketCache(func() time.Time { return sessionNow })
	next.load(map[string]keptTicket{"router example.com": kept["router example.com"]})
	next.ctrlArmed.Store(true)
	if handshake(t, srv, pool, next, "controller") {
		t.Error("the router's ticket was offered to the controller")
	}

	next = newTicketCache(func() time.Time { return sessionNow })
	next.load(kept)
	if handshake(t, srv, pool, next, "controller") {
		t.Error("a controller ticket served with no restored API session (an authentication would present no certificate)")
	}
	next.ctrlArmed.Store(true)
	if !handshake(t, srv, pool, next, "controller") {
		t.Error("a restored session's controller request did not resume")
	}
}

// The record's tickets are read strictly, naming the field, and only by the identity that made
// them: a renewed certificate starts with none.
func TestKeptTicketsAreReadStrictly(t *testing.T) {
	srv, pool := tlsServer(t)
	c := newTicketCache(func() time.Time { return sessionNow })
	handshake(t, srv, pool, c, "router")
	kept, _ := c.toKeep(nil)
	good := kept["router example.com"]
	for _, tc := range []struct {
		name string
		kt   keptTicket
		key  string
		want string
	}{
		{"no ticket", keptTicket{State: good.State, StoredAt: good.StoredAt}, "router x", `tls_sessions["router x"].ticket: empty`},
		{"bad state", keptTicket{Ticket: good.Ticket, State: []byte("garbage"), StoredAt: good.StoredAt}, "router x", `tls_sessions["router x"].state`},
		{"no time", keptTicket{Ticket: good.Ticket, State: good.State}, "router x", `tls_sessions["router x"].stored_at: missing`},
		{"no server", good, "", `tls_sessions[""]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := validRecord()
			r.TLSSessions = map[string]keptTicket{tc.key: tc.kt}
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := parseSessionRecord(data); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}

	d, sessionFile := keptFixture(t)
	r := validRecord()
	r.Identity, r.Controller = strings.Repeat("c", 64), d.kept.controller
	r.TLSSessions = kept
	if err := writeSessionRecord(sessionFile, &r); err != nil {
		t.Fatal(err)
	}
	k := restoreFresh(t, d, sessionFile)
	if len(k.tickets.kept) != 0 {
		t.Errorf("another certificate's tickets were loaded: %v", keys(k.tickets.kept))
	}
	r.Identity = d.kept.fingerprint
	if err := writeSessionRecord(sessionFile, &r); err != nil {
		t.Fatal(err)
	}
	if k := restoreFresh(t, d, sessionFile); len(k.tickets.kept) != 1 || !k.tickets.ctrlArmed.Load() {
		t.Errorf("this certificate's tickets: %v loaded, controller armed %v", keys(k.tickets.kept), k.tickets.ctrlArmed.Load())
	}
	if _, err := os.Stat(sessionFile); err != nil {
		t.Fatal(err)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// clientCert is a client certificate, as the identity's is to the controller.
func clientCert(t *testing.T) *tls.Certificate {
	t.Helper()
	leaf := testpki.NewCA(t, "test CA").Client(t, "agent", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	cert, err := tls.X509KeyPair(leaf.CertPEM, leaf.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &cert
}

// A tick on a restored session whose controller ticket the controller refuses (restarted) makes a
// full handshake before the SDK ever set its certificate; the SDK, meeting a 401 later (the
// session revoked, its refresh token refused), authenticates by itself while the tickets still
// serve. The resumed connection must show the controller the identity's certificate: ziti 1.7.2
// answered "no client certificates found" and the tick failed (TestMeshSDKKeepsItsSession).
func TestControllerTicketsCarryTheIdentityCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = fmt.Fprintf(w, "certificates=%d", len(r.TLS.PeerCertificates))
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	cert := clientCert(t)

	// get is one controller request of a restored tick: the SDK's config holds no certificate.
	get := func(c *ticketCache) (resumed bool, answer string) {
		t.Helper()
		return request(t, srv, pool, func(cfg *tls.Config) { c.controllerTLS(cfg, cert) })
	}

	first := newTicketCache(func() time.Time { return sessionNow })
	first.ctrlArmed.Store(true)
	if _, answer := get(first); !strings.HasSuffix(answer, "certificates=1") {
		t.Errorf("a full controller handshake: %q, want the identity's certificate shown", answer)
	}
	kept, _ := first.toKeep(nil)
	next := newTicketCache(func() time.Time { return sessionNow })
	next.load(throughFile(t, kept))
	next.ctrlArmed.Store(true)
	resumed, answer := get(next)
	if !resumed {
		t.Fatal("the next tick did not resume")
	}
	if !strings.HasSuffix(answer, "certificates=1") {
		t.Errorf("a resumed controller connection: %q, want the identity's certificate (an authentication on it fails)", answer)
	}
}
