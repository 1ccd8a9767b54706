package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// sdkDialTimeout bounds a dial whose context has no deadline.
const sdkDialTimeout = 30 * time.Second

// Modes, as spelled in config (`transport:`).
const (
	ModeSDK    = "sdk"
	ModeProxy  = "proxy"
	ModeSystem = "system"
)

// Options configure New or RunProxy; field comments name each config key.
type Options struct {
	Mode         string // sdk | proxy | system (`transport`)
	IdentityFile string // `identity`; sdk mode and RunProxy

	TenancyService string // `tenancy.service`, e.g. monky.tenancy.deploy
	BaoService     string // `bao.service`, e.g. openbao

	// The host:port the agent dials, as in the URL; sdk and proxy modes route exactly these.
	TenancyHostPort string
	BaoHostPort     string

	// Proxy daemon loopback addresses (`*.proxy_addr`): proxy mode dials them, RunProxy listens.
	TenancyProxyAddr string
	BaoProxyAddr     string

	Logger *slog.Logger // nil discards

	// SessionFile is where the sdk transport keeps its controller session between ticks
	// (<state_dir>/ziti-session.json, 0600); "" authenticates every time.
	SessionFile string

	// Dialer replaces the SDK context (tests; New and RunProxy close it); IdentityFile is then unread.
	Dialer ServiceDialer
	// ReadFile replaces identity.ReadFile for the identity pre-flight (tests).
	ReadFile func(string) ([]byte, error)

	// Reload, for RunProxy: each receive replaces the ziti context with one built from the
	// identity file as it is now (a renewed certificate); streams already open finish on the old
	// context, which is closed once they have.
	Reload <-chan struct{}

	hooks *proxyHooks // tests only: observe the proxy and tune its timings
}

// ServiceDialer opens a byte stream to a ziti service by name (the SDK context implements it).
// DialService honours ctx, returns a conn or an error, is concurrency-safe, and keeps the SDK's
// own error words, which Transport classifies into *ServiceError. Dials after Close fail.
type ServiceDialer interface {
	DialService(ctx context.Context, service string) (net.Conn, error)
	Close() error
}

// route is one (host, port) the agent may dial, and where it really goes.
type route struct {
	hostPort  string // normalised
	svc       serviceInfo
	proxyAddr string // proxy mode
}

// Transport dials host:port according to its mode. It is safe for concurrent use.
type Transport struct {
	mode   string
	routes map[string]route
	dialer ServiceDialer
	net    *net.Dialer
	logger *slog.Logger
	closed atomic.Bool
	once   sync.Once
}

// New builds the Transport for opts.Mode: sdk loads the identity eagerly (*IdentityError) without
// waiting on the network; proxy requires loopback addresses; system uses the OS resolver.
func New(opts Options) (*Transport, error) {
	t := &Transport{
		mode:   opts.Mode,
		net:    &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second},
		logger: loggerOrDiscard(opts.Logger),
	}
	switch opts.Mode {
	case ModeSystem:
		t.dialer = opts.Dialer // unused, but ours to close
		return t, nil
	case ModeSDK, ModeProxy:
	default:
		if opts.Dialer != nil {
			opts.Dialer.Close()
		}
		return nil, fmt.Errorf("transport: unknown mode %q (want sdk, proxy or system)", opts.Mode)
	}
	routes, err := buildRoutes(opts)
	if err != nil {
		if opts.Dialer != nil {
			opts.Dialer.Close() // ours to close, whatever the outcome
		}
		return nil, err
	}
	t.routes = routes
	if opts.Mode == ModeSDK {
		if opts.Dialer != nil {
			t.dialer = opts.Dialer
		} else {
			d, err := newZitiDialer(opts.IdentityFile, opts.ReadFile, t.logger, opts.SessionFile)
			if err != nil {
				return nil, err
			}
			t.dialer = d
		}
	}
	return t, nil
}

func loggerOrDiscard(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

func buildRoutes(opts Options) (map[string]route, error) {
	type pair struct {
		hostPortKey, hostPort string
		svcKey                string
		svc                   serviceInfo
		proxyKey, proxyAddr   string
	}
	pairs := []pair{
		{"tenancy host:port", opts.TenancyHostPort, "tenancy.service", tenancyInfo(opts.TenancyService), "tenancy.proxy_addr", opts.TenancyProxyAddr},
		{"bao host:port", opts.BaoHostPort, "bao.service", baoInfo(opts.BaoService), "bao.proxy_addr", opts.BaoProxyAddr},
	}
	routes := make(map[string]route)
	for _, p := range pairs {
		if p.hostPort == "" {
			continue
		}
		key, err := normaliseHostPort(p.hostPort)
		if err != nil {
			return nil, fmt.Errorf("transport %s: %s %q: %w", opts.Mode, p.hostPortKey, p.hostPort, err)
		}
		if _, dup := routes[key]; dup {
			return nil, fmt.Errorf("transport %s: tenancy and bao both use %s", opts.Mode, key)
		}
		r := route{hostPort: key, svc: p.svc}
		if p.svc.name == "" {
			return nil, fmt.Errorf("transport %s: %s is empty (needed to route %s)", opts.Mode, p.svcKey, key)
		}
		if opts.Mode == ModeProxy {
			if err := checkLoopback(p.proxyKey, p.proxyAddr, false); err != nil {
				return nil, fmt.Errorf("transport proxy: %w", err)
			}
			r.proxyAddr = p.proxyAddr
		}
		routes[key] = r
	}
	if len(routes) == 0 {
		return nil, fmt.Errorf("transport %s: no host:port to route (tenancy and bao are both unset)", opts.Mode)
	}
	return routes, nil
}

// normaliseHostPort lower-cases and drops a trailing dot, as net/http does before DialContext.
func normaliseHostPort(hp string) (string, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", errors.New("not host:port")
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", errors.New("empty host")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is not 1-65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// checkLoopback refuses a non-loopback address: the proxy forwards unauthenticated clients into
// the mesh under the box's identity, and tenancy's plain HTTP must not cross a LAN.
func checkLoopback(key, addr string, allowPortZero bool) error {
	if addr == "" {
		return fmt.Errorf("%s is empty", key)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port", key, addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !allowPortZero) {
		return fmt.Errorf("%s %q: bad port %q", key, addr, port)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%s %q is not a loopback address: the proxy forwards into the mesh "+
			"without authenticating its clients, so it listens on 127.0.0.1 or ::1 only", key, addr)
	}
	return nil
}

// DialContext opens a stream to addr as the mode says. In sdk and proxy modes an unmapped addr is
// refused with ErrUnmapped; dial faults come back as *ServiceError naming the service.
func (t *Transport) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if t.closed.Load() {
		return nil, fmt.Errorf("transport %s: dial %s: %w", t.mode, addr, ErrClosed)
	}
	if t.mode == ModeSystem {
		c, err := t.net.DialContext(ctx, network, addr)
		if err != nil {
			return nil, fmt.Errorf("transport system: %w", err)
		}
		return c, nil
	}
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return nil, fmt.Errorf("transport %s: network %q to %s: only tcp is routed", t.mode, network, addr)
	}
	key, err := normaliseHostPort(addr)
	r, ok := t.routes[key]
	if err != nil || !ok {
		return nil, fmt.Errorf("transport %s: refusing %s: %w (mapped: %s)", t.mode, addr, ErrUnmapped, t.mapped())
	}
	if t.mode == ModeSDK {
		if _, ok := ctx.Deadline(); !ok {
			// The SDK's dial can wait forever; a caller without a deadline must not hang the tick.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, sdkDialTimeout)
			defer cancel()
		}
		c, err := t.dialer.DialService(ctx, r.svc.name)
		if err != nil {
			return nil, classifyDialError(ctx, r.svc, err)
		}
		return c, nil
	}
	c, err := t.net.DialContext(ctx, "tcp", r.proxyAddr)
	if err != nil {
		return nil, &ServiceError{
			Service: r.svc.name,
			Reason:  fmt.Sprintf("the proxy at %s does not answer (is monky-deployd-proxy.service running?): %v", r.proxyAddr, err),
			Kind:    ErrProxyUnreachable,
			Err:     err,
		}
	}
	return &proxiedConn{Conn: c, svc: r.svc.name, addr: r.proxyAddr}, nil
}

func (t *Transport) mapped() string {
	keys := make([]string, 0, len(t.routes))
	for k := range t.routes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

// HTTPTransport returns a new *http.Transport dialling through t; callers own it (OpenBao's
// ConfigureTLS type-asserts it). Proxy is nil so HTTP(S)_PROXY never diverts mesh traffic; HTTP/2
// stays off so a stalled circuit stalls one request only.
func (t *Transport) HTTPTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           t.DialContext,
		MaxIdleConns:          16,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// Close releases the ziti context; idempotent, later dials fail with ErrClosed.
func (t *Transport) Close() error {
	var err error
	t.once.Do(func() {
		t.closed.Store(true)
		if t.dialer != nil {
			err = t.dialer.Close()
		}
	})
	return err
}

// proxiedConn names the service when the proxy hangs up before any byte came back: the proxy
// accepts before dialling the mesh, so a mesh fault would otherwise read as a bare "EOF".
type proxiedConn struct {
	net.Conn
	svc, addr string
	got       atomic.Int64
}

func (c *proxiedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	// A hang-up reads as EOF, or as a reset when the request was still unread at the proxy.
	if c.got.Add(int64(n)) == 0 && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
		return n, &ServiceError{
			Service: c.svc,
			Reason: fmt.Sprintf("the proxy at %s closed the stream without a reply: it could not reach the "+
				"service, or the service hung up (journalctl -u monky-deployd-proxy names the fault)", c.addr),
			Err: err,
		}
	}
	return n, err
}

// CloseWrite passes a half-close through to the TCP connection.
func (c *proxiedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
