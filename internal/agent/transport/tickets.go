package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/openziti/identity"
)

// An sdk tick is a new process, and its edge router connection a new TLS handshake, in which the
// router signs with its RSA key: issue 24 measured 69% of the quickstart's CPU per converged sdk
// tick there, ~17 ms. The router (a Go TLS server) issues session tickets, so the transport keeps
// the ticket in the session file and the next tick resumes: no signature, one X25519 exchange.
// A ticket and its resumption secret let their holder resume as this identity until the ticket
// expires: it is a credential, kept 0600 beside the API session, bound to the identity
// certificate that made it, never logged. A ticket the router no longer takes (restarted,
// rotated its keys, more than 7 days) costs a full handshake inside the same dial, never a
// failure.

// maxTicketAge bounds a kept ticket: TLS 1.3 tickets live at most 7 days (RFC 8446 4.6.1).
const maxTicketAge = 7 * 24 * time.Hour

// ticketRefresh: a ticket this old is replaced by the newest one even when it still resumed, so
// the file is rewritten about once a day, not every tick.
const ticketRefresh = 24 * time.Hour

// keptTicket is one server's TLS session: the ticket and tls.SessionState.Bytes, which hold the
// resumption secret and the server's verified chain (verified again on use by crypto/tls).
type keptTicket struct {
	Ticket   []byte    `json:"ticket"`
	State    []byte    `json:"state"`
	StoredAt time.Time `json:"stored_at"`
}

// decode checks a kept ticket, naming the field.
func (kt keptTicket) decode(server string) (*tls.ClientSessionState, error) {
	field := func(f string) string { return fmt.Sprintf("tls_sessions[%q].%s", server, f) }
	switch {
	case server == "":
		return nil, errors.New(`tls_sessions[""]: no server name`)
	case len(kt.Ticket) == 0:
		return nil, errors.New(field("ticket") + ": empty")
	case kt.StoredAt.IsZero():
		return nil, errors.New(field("stored_at") + ": missing")
	}
	st, err := tls.ParseSessionState(kt.State)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field("state"), err)
	}
	cs, err := tls.NewResumptionState(kt.Ticket, st)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field("state"), err)
	}
	return cs, nil
}

// ticketCache is the tls.ClientSessionCache of one sdk tick: the tickets kept by earlier ticks,
// and what the servers sent this tick (Put), which keep decides to write.
type ticketCache struct {
	now func() time.Time

	mu   sync.Mutex
	kept map[string]keptTicket
	// put holds this tick's tickets by server; nil: crypto/tls dropped the kept one (expired,
	// its chain no longer verifies).
	put map[string]*tls.ClientSessionState
	// full: a handshake of this tick did not resume; its ticket is kept even if one was.
	full bool
	// handshakes and resumed count this tick's handshakes, for the debug log.
	handshakes, resumed int
	// ctrlArmed lets the controller's tickets serve: only while the tick runs on a restored API
	// session. The controller authenticates by the client certificate of the TLS handshake, and
	// a resumed handshake presents none of its own: it carries the one of the handshake that made
	// its ticket, which controllerTLS makes the identity's (the SDK still authenticates by itself
	// on a 401 while the tickets serve).
	ctrlArmed atomic.Bool
}

func newTicketCache(now func() time.Time) *ticketCache {
	return &ticketCache{now: now, kept: map[string]keptTicket{}, put: map[string]*tls.ClientSessionState{}}
}

// load takes the file's tickets that may still be used: within maxTicketAge, not from the
// future. (The record was parsed strictly: each one decodes.)
func (c *ticketCache) load(tickets map[string]keptTicket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for server, kt := range tickets {
		if kt.StoredAt.After(now.Add(sessionMargin)) || !now.Before(kt.StoredAt.Add(maxTicketAge)) {
			continue
		}
		c.kept[server] = kt
	}
}

// Get is this tick's ticket for server, else the kept one.
func (c *ticketCache) Get(server string) (*tls.ClientSessionState, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs, ok := c.put[server]; ok {
		return cs, cs != nil
	}
	kt, ok := c.kept[server]
	if !ok {
		return nil, false
	}
	cs, err := kt.decode(server)
	if err != nil {
		return nil, false
	}
	return cs, true
}

// Put records what the server sent (or nil: drop the ticket).
func (c *ticketCache) Put(server string, cs *tls.ClientSessionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.put[server] = cs
}

// handshake records whether a handshake of this tick resumed (tls.Config.VerifyConnection).
func (c *ticketCache) handshake(cs tls.ConnectionState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handshakes++
	if cs.DidResume {
		c.resumed++
		return
	}
	c.full = true
}

// counts is this tick's handshakes and how many of them resumed.
func (c *ticketCache) counts() (handshakes, resumed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handshakes, c.resumed
}

// toKeep is what the file should hold after this tick, and whether that differs from onFile: a
// ticket that resumed stays as it is (no write) until it is ticketRefresh old; a ticket of a full
// handshake, or one replacing a dropped or ageing one, is written.
func (c *ticketCache) toKeep(onFile map[string]keptTicket) (map[string]keptTicket, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.kept)
	if out == nil {
		out = map[string]keptTicket{}
	}
	now := c.now()
	for server, cs := range c.put {
		old, had := out[server]
		switch {
		case cs == nil:
			delete(out, server)
			continue
		case had && !c.full && now.Sub(old.StoredAt) < ticketRefresh:
			continue
		}
		ticket, st, err := cs.ResumptionState()
		if err != nil || st == nil || len(ticket) == 0 {
			continue
		}
		raw, err := st.Bytes()
		if err != nil {
			continue
		}
		out[server] = keptTicket{Ticket: ticket, State: raw, StoredAt: now.UTC()}
	}
	if len(out) == 0 {
		out = nil
	}
	return out, !ticketsEqual(out, onFile)
}

func ticketsEqual(a, b map[string]keptTicket) bool {
	return maps.EqualFunc(a, b, func(x, y keptTicket) bool {
		return string(x.Ticket) == string(y.Ticket) && string(x.State) == string(y.State) && x.StoredAt.Equal(y.StoredAt)
	})
}

// scoped is the cache under one kind of server: crypto/tls keys a ticket by host name alone, and
// the controller and an edge router may share a host (the quickstart does), each refusing the
// other's ticket.
func (c *ticketCache) scoped(kind string) tls.ClientSessionCache {
	s := scopedTickets{prefix: kind + " ", c: c}
	if kind == "controller" {
		s.gate = &c.ctrlArmed
	}
	return s
}

type scopedTickets struct {
	prefix string
	c      *ticketCache
	gate   *atomic.Bool // nil: always served
}

func (s scopedTickets) Get(server string) (*tls.ClientSessionState, bool) {
	if s.gate != nil && !s.gate.Load() {
		return nil, false
	}
	return s.c.Get(s.prefix + server)
}

func (s scopedTickets) Put(server string, cs *tls.ClientSessionState) { s.c.Put(s.prefix+server, cs) }

// resumeWith lets cfg's handshakes resume from cache and report to c whether they did.
func (c *ticketCache) resumeWith(cfg *tls.Config, kind string) {
	cfg.ClientSessionCache = c.scoped(kind)
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		c.handshake(cs)
		if verify != nil {
			return verify(cs)
		}
		return nil
	}
}

// controllerTLS arms the SDK's controller TLS config (before its first request) with the tick's
// tickets and the identity's certificate. A resumed handshake carries the client certificate of
// the handshake that made its ticket, and the SDK authenticates by itself on a 401 while the
// tickets serve: were a full handshake certificate-less (the SDK presents the certificate only
// once it authenticates), that authentication would meet a session with no certificate.
func (c *ticketCache) controllerTLS(cfg *tls.Config, cert *tls.Certificate) {
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c.resumeWith(cfg, "controller")
}

// resumingIdentity gives every client TLS config of the identity (the SDK's edge router
// connections) the tick's ticket cache. Everything else is the identity's own.
type resumingIdentity struct {
	identity.Identity
	tickets *ticketCache
}

func (r *resumingIdentity) ClientTLSConfig() *tls.Config {
	cfg := r.Identity.ClientTLSConfig()
	if cfg != nil {
		r.tickets.resumeWith(cfg, "router")
	}
	return cfg
}
