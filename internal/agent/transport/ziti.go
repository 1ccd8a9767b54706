package transport

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/openziti/identity"
	edge_apis "github.com/openziti/sdk-golang/edge-apis"
	"github.com/openziti/sdk-golang/ziti"
)

// zitiDialer is a ServiceDialer over one ziti SDK context.
type zitiDialer struct {
	zctx ziti.Context
	// kept is the controller session kept between ticks (sdk transport); nil: none (the proxy
	// daemon keeps its one context alive instead, doctor authenticates for itself).
	kept *keptSession
}

// newZitiDialer pre-flights and loads the identity under recover (the SDK's lazy loader exits or
// panics on bad material); it does not wait on the network. With sessionFile, a controller
// session kept there by an earlier tick of the same identity certificate is used until it expires.
func newZitiDialer(path string, readFile func(string) ([]byte, error), logger *slog.Logger, sessionFile string) (*zitiDialer, error) {
	raw, err := checkIdentity(path, readFile)
	if err != nil {
		return nil, err
	}
	routeSDKLogs(logger)

	var cfg ziti.Config
	if err := json.Unmarshal(raw, &cfg); err != nil { // checked above; kept for safety
		return nil, &IdentityError{Path: path, Reason: fmt.Sprintf("is not valid JSON: %v", err), Kind: ErrIdentityMalformed, Err: err}
	}
	var id identity.Identity
	err = safeCall("load identity", func() error {
		var err error
		id, err = identity.LoadIdentity(cfg.ID)
		return err
	})
	if err != nil {
		return nil, &IdentityError{Path: path, Reason: fmt.Sprintf("could not be loaded: %v", err), Kind: ErrIdentityMalformed, Err: err}
	}
	var tickets *ticketCache
	fingerprint := ""
	if sessionFile != "" && id.Cert() != nil && len(id.Cert().Certificate) > 0 {
		fingerprint = certFingerprint(id.Cert().Certificate[0])
		tickets = newTicketCache(time.Now)
		id = &resumingIdentity{Identity: id, tickets: tickets}
	}
	creds := edge_apis.NewIdentityCredentials(id)
	creds.ConfigTypes = cfg.ConfigTypes
	cfg.Credentials = creds
	cfg.ID = identity.Config{} // Credentials win; clear ID so nothing falls back to the lazy loader

	// The SDK's controller client asks GET /version in a goroutine it starts inside NewContext:
	// a TLS handshake with the controller every tick. Its TLS config exists only once NewContext
	// has returned, and every controller request passes the proxy function before it dials: that
	// waits until the config has the tickets (set below, while no request can be under way), then
	// does what the SDK's default does (ProxyFromEnvironment). The controller's tickets serve
	// only while the restored API session does (see ticketCache.ctrlArmed).
	var ctrlTLS *tls.Config
	ready := make(chan struct{})
	open := sync.OnceFunc(func() { close(ready) })
	defer open() // whatever fails below, no controller request waits for ever
	if tickets != nil {
		cfg.CtrlProxy = func(r *http.Request) (*url.URL, error) {
			<-ready
			return http.ProxyFromEnvironment(r)
		}
	}
	var zctx ziti.Context
	err = safeCall("create ziti context", func() error {
		var err error
		if zctx, err = ziti.NewContext(&cfg); err != nil {
			return err
		}
		if impl, ok := zctx.(*ziti.ContextImpl); ok && impl.CtrlClt != nil && impl.CtrlClt.ClientApiClient != nil && impl.CtrlClt.TlsAwareTransport != nil {
			ctrlTLS = impl.CtrlClt.TlsAwareTransport.GetTlsClientConfig()
		}
		return nil
	})
	if err != nil {
		return nil, &IdentityError{Path: path, Reason: fmt.Sprintf("could not start a ziti context: %v", err), Kind: ErrIdentityMalformed, Err: err}
	}
	d := &zitiDialer{zctx: zctx}
	if impl, ok := zctx.(*ziti.ContextImpl); ok && fingerprint != "" {
		d.kept = &keptSession{path: sessionFile, fingerprint: fingerprint, tickets: tickets,
			controller: controllerOf(cfg), impl: impl, log: loggerOrDiscard(logger), now: time.Now}
		d.kept.restore()
	}
	if tickets != nil && ctrlTLS != nil {
		tickets.controllerTLS(ctrlTLS, id.Cert())
	}
	open()
	return d, nil
}

// controllerOf is the identity's first controller URL, which the session belongs to.
func controllerOf(cfg ziti.Config) string {
	if len(cfg.ZtAPIs) > 0 {
		return cfg.ZtAPIs[0]
	}
	return cfg.ZtAPI
}

// DialService dials service. On a kept session, the service is looked up by name first (the SDK
// lists services only when it authenticates); if that or the dial fails, the session may be
// stale (expired early, revoked, the controller's state lost): one full authentication and one
// more dial follow, so a stale session costs a round trip, never the tick.
func (d *zitiDialer) DialService(ctx context.Context, service string) (net.Conn, error) {
	k := d.kept
	if k == nil {
		return d.dial(ctx, service)
	}
	err := k.lookup(ctx, service)
	if err == nil {
		var conn net.Conn
		if conn, err = d.dial(ctx, service); err == nil {
			k.dialedOK(service)
			return conn, nil
		}
	}
	if ctx.Err() != nil || !k.reauthenticate(err) {
		return nil, err
	}
	conn, err := d.dial(ctx, service)
	if err == nil {
		k.dialedOK(service)
	}
	return conn, err
}

// dial dials in a goroutine and stops waiting when ctx is done: sdk-golang v1.9.0's first dial
// ignores ctx until the controller answers. A late dial is closed.
func (d *zitiDialer) dial(ctx context.Context, service string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var conn net.Conn
		err := safeCall("dial "+service, func() error {
			c, err := d.zctx.DialContext(ctx, service)
			if err != nil {
				return err
			}
			conn = c
			return nil
		})
		done <- result{conn, err}
	}()
	select {
	case r := <-done:
		return r.conn, r.err
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				r.conn.Close()
			}
		}()
		return nil, fmt.Errorf("no answer from the ziti controller or edge router (is the controller reachable?): %w", ctx.Err())
	}
}

func (d *zitiDialer) Close() error {
	if d.kept != nil {
		d.kept.keep()
	}
	return safeCall("close ziti context", func() error {
		d.zctx.Close()
		return nil
	})
}

// serviceInfo is what an error about a service tells the operator to check.
type serviceInfo struct {
	name     string
	attr     string // the role attribute that grants dial, e.g. #monky-deploy-agent
	hostedBy string // who should be hosting it
}

func tenancyInfo(name string) serviceInfo {
	return serviceInfo{name: name, attr: "#monky-deploy-agent", hostedBy: "tenancy's sidecar is not hosting it"}
}

func baoInfo(name string) serviceInfo {
	return serviceInfo{name: name, attr: "#openbao-client", hostedBy: "OpenBao's ziti host is not hosting it"}
}

// classifyDialError turns SDK texts (matched as substrings, per api-notes) into what the operator
// should check; anything else keeps its own words.
func classifyDialError(ctx context.Context, svc serviceInfo, err error) error {
	var se *ServiceError
	var ie *IdentityError
	if errors.As(err, &se) || errors.As(err, &ie) {
		return err
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "service '"+svc.name+"' not found"):
		return &ServiceError{Service: svc.name, Reason: "not visible to this identity: check " + svc.attr, Kind: ErrServiceNotVisible, Err: err}
	case strings.Contains(msg, "has no terminators"):
		return &ServiceError{Service: svc.name, Reason: "has no terminators: " + svc.hostedBy, Kind: ErrNoTerminators, Err: err}
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return &ServiceError{Service: svc.name, Reason: fmt.Sprintf("dial abandoned (%v): %s", ctx.Err(), msg), Err: errors.Join(ctx.Err(), err)}
	}
	return &ServiceError{Service: svc.name, Reason: "dial failed: " + msg, Err: err}
}
