package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Proxy timings. Dials are retried (edge router restarts drop circuits); several unanswered dial
// failures in a row rebuild the context, re-reading an identity the tunneller may have rewritten.
const (
	defaultDialAttempts = 3
	defaultRebuildAfter = 3
	defaultDialTimeout  = 15 * time.Second
	defaultDrainTimeout = 10 * time.Second
	// Rebuilds cannot fix an unreachable controller and each dead context keeps probing: cap their rate.
	defaultRebuildInterval = time.Minute
)

// doubling returns delays from first doubling up to most, no jitter (dial retries, accept backoff).
func doubling(first, most time.Duration) backoff.BackOff {
	return backoff.NewExponentialBackOff(backoff.WithInitialInterval(first), backoff.WithMaxInterval(most),
		backoff.WithMultiplier(2), backoff.WithRandomizationFactor(0), backoff.WithMaxElapsedTime(0))
}

// proxyHooks lets tests watch the proxy and shorten its timings. Zero values mean the defaults.
type proxyHooks struct {
	onListen        func(service string, addr net.Addr) // after each listener is bound
	onDrain         func()                              // after the listeners are closed, before the drain
	newDialer       func() (ServiceDialer, error)       // replaces the identity loader; rebuilds allowed
	dialBackOff     func() backoff.BackOff
	drainTimeout    time.Duration
	dialAttempts    int
	rebuildAfter    int
	rebuildInterval time.Duration // negative: no minimum
}

type proxySpec struct {
	key  string // config key, for errors
	addr string
	svc  serviceInfo
}

// RunProxy is `monky-deployd proxy`: loopback connections forwarded to their services. A broken
// identity fails before anything listens; on ctx done, streams get a grace period, then nil.
func RunProxy(ctx context.Context, opts Options) error {
	logger := loggerOrDiscard(opts.Logger)
	h := opts.hooks
	if h == nil {
		h = &proxyHooks{}
	}
	specs, err := proxySpecs(opts)
	if err != nil {
		if opts.Dialer != nil {
			opts.Dialer.Close() // ours to close, whatever the outcome
		}
		return err
	}

	rd := &rebuildingDialer{
		threshold:   orInt(h.rebuildAfter, defaultRebuildAfter),
		minInterval: orDuration(h.rebuildInterval, defaultRebuildInterval),
		now:         time.Now,
		logger:      logger,
		rebuild:     true,
	}
	switch {
	case h.newDialer != nil:
		rd.build = h.newDialer
	case opts.Dialer != nil:
		d := opts.Dialer
		rd.build = func() (ServiceDialer, error) { return d, nil }
		rd.rebuild = false // not ours to throw away and re-create
	default:
		rd.build = func() (ServiceDialer, error) { return newZitiDialer(opts.IdentityFile, opts.ReadFile, logger, "") }
	}
	defer rd.Close()
	if err := rd.warm(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if opts.Reload != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-opts.Reload:
					rd.replace()
				}
			}
		}()
	}

	var lc net.ListenConfig
	var lns []net.Listener
	closeListeners := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	for _, s := range specs {
		ln, err := lc.Listen(ctx, "tcp", s.addr)
		if err != nil {
			closeListeners()
			return fmt.Errorf("proxy: listen on %s %s: %w", s.key, s.addr, err)
		}
		lns = append(lns, ln)
		// "localhost" is resolved by the OS: check what was actually bound.
		if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			closeListeners()
			return fmt.Errorf("proxy: %s %s bound to %s, which is not loopback", s.key, s.addr, ln.Addr())
		}
		logger.Info("proxy: listening", "addr", ln.Addr().String(), "service", s.svc.name)
		if h.onListen != nil {
			h.onListen(s.svc.name, ln.Addr())
		}
	}

	p := &proxy{
		dialer:   rd,
		logger:   logger,
		attempts: orInt(h.dialAttempts, defaultDialAttempts),
		backOff:  h.dialBackOff,
		conns:    make(map[net.Conn]struct{}),
	}
	if p.backOff == nil {
		p.backOff = func() backoff.BackOff { return doubling(500*time.Millisecond, time.Minute) }
	}
	// Streams outlive ctx by the drain; streamCtx bounds their dials and is cut when the drain gives up.
	streamCtx, cutStreams := context.WithCancel(context.WithoutCancel(ctx))
	defer cutStreams()

	var accepting, handlers sync.WaitGroup
	errc := make(chan error, len(lns))
	for i, ln := range lns {
		accepting.Add(1)
		go func() {
			defer accepting.Done()
			if err := p.accept(streamCtx, ln, specs[i], &handlers); err != nil {
				errc <- err
			}
		}()
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	p.closing.Store(true)
	closeListeners()
	accepting.Wait()
	logger.Info("proxy: shutting down", "streams", p.active())
	if h.onDrain != nil {
		h.onDrain()
	}

	drained := make(chan struct{})
	go func() { handlers.Wait(); close(drained) }()
	timer := time.NewTimer(orDuration(h.drainTimeout, defaultDrainTimeout))
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
		logger.Warn("proxy: drain timed out; cutting streams", "streams", p.active())
		cutStreams()
		p.closeAll()
		<-drained
	}
	logger.Info("proxy: stopped")
	return runErr
}

func proxySpecs(opts Options) ([]proxySpec, error) {
	candidates := []proxySpec{
		{key: "tenancy.proxy_addr", addr: opts.TenancyProxyAddr, svc: tenancyInfo(opts.TenancyService)},
		{key: "bao.proxy_addr", addr: opts.BaoProxyAddr, svc: baoInfo(opts.BaoService)},
	}
	var specs []proxySpec
	seen := map[string]bool{}
	for _, s := range candidates {
		if s.addr == "" {
			continue
		}
		if err := checkLoopback(s.key, s.addr, true); err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		if s.svc.name == "" {
			return nil, fmt.Errorf("proxy: %s is set but its service is empty", s.key)
		}
		if seen[s.addr] && !strings.HasSuffix(s.addr, ":0") {
			return nil, fmt.Errorf("proxy: tenancy.proxy_addr and bao.proxy_addr are both %s", s.addr)
		}
		seen[s.addr] = true
		specs = append(specs, s)
	}
	if len(specs) == 0 {
		return nil, errors.New("proxy: nothing to listen on (tenancy.proxy_addr and bao.proxy_addr are empty)")
	}
	return specs, nil
}

type proxy struct {
	dialer   *rebuildingDialer
	logger   *slog.Logger
	attempts int
	backOff  func() backoff.BackOff
	closing  atomic.Bool

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func (p *proxy) accept(ctx context.Context, ln net.Listener, s proxySpec, handlers *sync.WaitGroup) error {
	wait := doubling(5*time.Millisecond, time.Second)
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.closing.Load() {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("proxy: listener %s for %s closed: %w", ln.Addr(), s.svc.name, err)
			}
			// Out of file descriptors and the like: wait and try again, as net/http does.
			d := wait.NextBackOff()
			p.logger.Warn("proxy: accept failed; retrying", "addr", ln.Addr().String(), "err", err.Error(), "in", d)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		wait.Reset()
		handlers.Add(1)
		go func() {
			defer handlers.Done()
			p.handle(ctx, c, s.svc)
		}()
	}
}

func (p *proxy) handle(ctx context.Context, client net.Conn, svc serviceInfo) {
	p.track(client)
	defer p.untrack(client)
	defer client.Close()
	up, err := p.dial(ctx, svc)
	if err != nil {
		p.logger.Warn("proxy: dial failed", "service", svc.name, "client", client.RemoteAddr().String(), "err", err.Error())
		return
	}
	p.track(up)
	defer p.untrack(up)
	defer up.Close()
	p.logger.Debug("proxy: stream open", "service", svc.name, "client", client.RemoteAddr().String())
	pipe(client, up)
}

// dial retries the service; a mesh answer or an identity fault is final within a connection.
func (p *proxy) dial(ctx context.Context, svc serviceInfo) (net.Conn, error) {
	wait := p.backOff()
	for attempt := 1; ; attempt++ {
		c, err := p.dialer.dial(ctx, svc)
		if err == nil {
			return c, nil
		}
		var ie *IdentityError
		if meshAnswered(err) || errors.As(err, &ie) || attempt >= p.attempts || ctx.Err() != nil {
			return nil, err
		}
		p.logger.Debug("proxy: dial failed; retrying", "service", svc.name, "attempt", attempt, "err", err.Error())
		t := time.NewTimer(wait.NextBackOff())
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

func meshAnswered(err error) bool {
	return errors.Is(err, ErrServiceNotVisible) || errors.Is(err, ErrNoTerminators)
}

func (p *proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns[c] = struct{}{}
	p.mu.Unlock()
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) active() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// pipe copies both ways; EOF half-closes the other side, a broken direction tears both down.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		copyHalf(b, a)
		close(done)
	}()
	copyHalf(a, b)
	<-done
}

func copyHalf(dst, src net.Conn) {
	_, srcTCP := src.(*net.TCPConn)
	_, dstTCP := dst.(*net.TCPConn)
	var err error
	if srcTCP && dstTCP {
		_, err = io.Copy(dst, src) // splice(2): the kernel moves the bytes
	} else {
		// Pooled buffer; the wrappers stop io.CopyBuffer using ReadFrom (a fresh 32 KiB per stream).
		buf := copyBufs.Get().(*[]byte)
		_, err = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *buf)
		copyBufs.Put(buf)
	}
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
}

// rebuildingDialer replaces its dialer after threshold unanswered failures, at most per minInterval.
type rebuildingDialer struct {
	build       func() (ServiceDialer, error)
	rebuild     bool
	threshold   int
	minInterval time.Duration
	now         func() time.Time
	logger      *slog.Logger

	mu      sync.Mutex
	cur     ServiceDialer
	gen     uint64
	fails   int
	builtAt time.Time
	// streams counts the open streams of each context; retired holds a replaced context until its
	// last stream closes (or retireAfter has passed).
	streams map[uint64]int
	retired map[uint64]ServiceDialer
}

// retireAfter bounds how long a replaced context waits for its streams: a tick lasts at most an hour.
const retireAfter = time.Hour

func (r *rebuildingDialer) warm() error {
	_, _, err := r.current()
	return err
}

func (r *rebuildingDialer) current() (ServiceDialer, uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil {
		d, err := r.build()
		if err != nil {
			return nil, 0, err
		}
		r.cur = d
		r.gen++
		r.builtAt = r.now()
		if r.gen > 1 {
			r.logger.Info("proxy: ziti context rebuilt")
		}
	}
	return r.cur, r.gen, nil
}

func (r *rebuildingDialer) dial(ctx context.Context, svc serviceInfo) (net.Conn, error) {
	d, gen, err := r.current()
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, defaultDialTimeout)
	defer cancel()
	c, err := d.DialService(dctx, svc.name)
	if err != nil {
		err = classifyDialError(dctx, svc, err)
	}
	r.record(ctx, gen, err)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.streams == nil {
		r.streams = map[uint64]int{}
	}
	r.streams[gen]++
	r.mu.Unlock()
	return &genConn{Conn: c, release: func() { r.release(gen) }}, nil
}

// genConn counts itself out of its context's streams when closed.
type genConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *genConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite passes a half-close through to the stream.
func (c *genConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// release counts a stream of gen out; a retired context goes with its last stream.
func (r *rebuildingDialer) release(gen uint64) {
	r.mu.Lock()
	r.streams[gen]--
	old, retired := r.retired[gen]
	last := r.streams[gen] <= 0
	if last {
		delete(r.streams, gen)
	}
	if last && retired {
		delete(r.retired, gen)
	}
	r.mu.Unlock()
	if last && retired {
		r.closeOld(old)
	}
}

// replace builds a context from the identity as it is now and dials with it from now on (a
// renewed certificate: the old one no longer authenticates new connections). The old context
// serves its open streams and is closed after the last, or after retireAfter.
func (r *rebuildingDialer) replace() {
	if !r.rebuild {
		return
	}
	d, err := r.build()
	if err != nil {
		r.logger.Error("proxy: the renewed identity could not be loaded; dials go on with the old one", "err", err.Error())
		return
	}
	r.mu.Lock()
	old, oldGen := r.cur, r.gen
	r.cur, r.fails, r.builtAt = d, 0, r.now()
	r.gen++
	open := r.streams[oldGen]
	if old != nil && open > 0 {
		if r.retired == nil {
			r.retired = map[uint64]ServiceDialer{}
		}
		r.retired[oldGen] = old
		time.AfterFunc(retireAfter, func() {
			r.mu.Lock()
			d, ok := r.retired[oldGen]
			delete(r.retired, oldGen)
			r.mu.Unlock()
			if ok {
				r.closeOld(d)
			}
		})
	}
	r.mu.Unlock()
	r.logger.Info("proxy: ziti context replaced with the renewed identity; new dials use it", "streams_on_the_old_one", open)
	if old != nil && open == 0 {
		r.closeOld(old)
	}
}

func (r *rebuildingDialer) closeOld(d ServiceDialer) {
	if err := d.Close(); err != nil {
		r.logger.Warn("proxy: closing the old ziti context", "err", err.Error())
	}
}

func (r *rebuildingDialer) record(ctx context.Context, gen uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen || ctx.Err() != nil {
		return // a dial on a context already replaced, or one we abandoned ourselves
	}
	if err == nil || meshAnswered(err) {
		r.fails = 0
		return
	}
	r.fails++
	if !r.rebuild || r.fails < r.threshold || r.cur == nil || r.now().Sub(r.builtAt) < r.minInterval {
		return
	}
	r.logger.Warn("proxy: ziti context looks dead; rebuilding it", "failed_dials", r.fails, "err", err.Error())
	old := r.cur
	r.cur, r.fails = nil, 0
	if cerr := old.Close(); cerr != nil {
		r.logger.Warn("proxy: closing the old ziti context", "err", cerr.Error())
	}
}

func (r *rebuildingDialer) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for gen, d := range r.retired {
		errs = append(errs, d.Close())
		delete(r.retired, gen)
	}
	if r.cur != nil {
		errs = append(errs, r.cur.Close())
		r.cur = nil
	}
	return errors.Join(errs...)
}

func orInt(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func orDuration(v, def time.Duration) time.Duration {
	if v != 0 {
		return v
	}
	return def
}
