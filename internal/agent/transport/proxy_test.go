package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
)

func TestRunProxyRefusesBadListenAddresses(t *testing.T) {
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"all interfaces", Options{TenancyService: tenancySvc, TenancyProxyAddr: "0.0.0.0:18443"}, `tenancy.proxy_addr "0.0.0.0:18443" is not a loopback address`},
		{"empty host", Options{TenancyService: tenancySvc, TenancyProxyAddr: ":18443"}, `tenancy.proxy_addr ":18443" is not a loopback address`},
		{"IPv6 any", Options{BaoService: baoSvc, BaoProxyAddr: "[::]:18200"}, `bao.proxy_addr "[::]:18200" is not a loopback address`},
		{"LAN address", Options{BaoService: baoSvc, BaoProxyAddr: "10.1.2.3:18200"}, `bao.proxy_addr "10.1.2.3:18200" is not a loopback address`},
		{"hostname", Options{BaoService: baoSvc, BaoProxyAddr: "bao.cbs.tikali.net:18200"}, "is not a loopback address"},
		{"no port", Options{TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1"}, `tenancy.proxy_addr "127.0.0.1" is not host:port`},
		{"nothing to listen on", Options{TenancyService: tenancySvc}, "nothing to listen on"},
		{"no service", Options{TenancyProxyAddr: "127.0.0.1:0"}, "tenancy.proxy_addr is set but its service is empty"},
		{"same address twice", Options{TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:18443", BaoService: baoSvc, BaoProxyAddr: "127.0.0.1:18443"}, "are both 127.0.0.1:18443"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fd := &fakeDialer{}
			tc.opts.Dialer = fd
			err := RunProxy(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RunProxy: %v, want %q", err, tc.want)
			}
			if dials, closed := fd.count(); dials != 0 || !closed {
				t.Fatalf("the refused proxy dialled %d times; dialer closed: %v", dials, closed)
			}
		})
	}
}

func TestRunProxyIdentityFault(t *testing.T) {
	err := RunProxy(context.Background(), Options{
		IdentityFile: "/etc/nope.json", ReadFile: fakeFS{}.read,
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
	})
	var ie *IdentityError
	if !errors.As(err, &ie) || !errors.Is(err, ErrIdentityMissing) {
		t.Fatalf("RunProxy with a missing identity: %v", err)
	}
}

func TestRunProxyListenFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	fd := &fakeDialer{}
	err = RunProxy(context.Background(), Options{Dialer: fd, BaoService: baoSvc, BaoProxyAddr: busy.Addr().String()})
	if err == nil || !strings.Contains(err.Error(), "proxy: listen on bao.proxy_addr "+busy.Addr().String()) {
		t.Fatalf("got %v", err)
	}
	if _, closed := fd.count(); !closed {
		t.Fatal("the dialer was not closed on the way out")
	}
}

// TestProxyConcurrentStreams pushes many streams at once through both listeners and checks
// every byte comes back to the stream that sent it.
func TestProxyConcurrentStreams(t *testing.T) {
	echo := echoServer(t)
	logger, logs := newTestLogger(slog.LevelInfo)
	addrs, stop := startProxy(t, Options{
		Logger:         logger,
		Dialer:         &fakeDialer{routes: map[string]string{tenancySvc: echo, baoSvc: echo}},
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
		BaoService: baoSvc, BaoProxyAddr: "127.0.0.1:0",
	})
	const streams = 64
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			target := addrs[tenancySvc]
			if i%2 == 1 {
				target = addrs[baoSvc]
			}
			payload := bytes.Repeat([]byte(fmt.Sprintf("stream %03d;", i)), 2000+i*50)
			c, err := net.Dial("tcp", target)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			go func() {
				c.Write(payload)
				c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %w", i, err)
				return
			}
			if !bytes.Equal(got, payload) {
				errs <- fmt.Errorf("stream %d: got %d bytes back, sent %d", i, len(got), len(payload))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("RunProxy: %v", err)
	}
	for _, want := range []string{
		`msg="proxy: listening" addr=` + addrs[tenancySvc] + " service=monky.tenancy.deploy",
		`msg="proxy: listening" addr=` + addrs[baoSvc] + " service=openbao",
		`msg="proxy: stopped"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}

func TestProxyDialFailures(t *testing.T) {
	echo := echoServer(t)
	cases := []struct {
		name      string
		dialer    *fakeDialer
		wantEcho  bool
		wantDials int
		wantLog   string
	}{
		{"a failed dial is retried", &fakeDialer{routes: map[string]string{tenancySvc: echo}, failFirst: 2}, true, 3, ""},
		{"retries run out", &fakeDialer{routes: map[string]string{tenancySvc: echo}, failFirst: 5}, false, 3,
			`msg="proxy: dial failed" service=monky.tenancy.deploy`},
		{"not visible is final", &fakeDialer{}, false, 1,
			"not visible to this identity: check #monky-deploy-agent"},
		{"no terminators is final", &fakeDialer{errFor: map[string]error{tenancySvc: errors.New("service monky.tenancy.deploy has no terminators")}}, false, 1,
			"has no terminators: tenancy's sidecar is not hosting it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logger, logs := newTestLogger(slog.LevelInfo)
			addrs, stop := startProxy(t, Options{
				Logger: logger, Dialer: tc.dialer,
				TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
				hooks: &proxyHooks{dialBackOff: func() backoff.BackOff { return &backoff.ZeroBackOff{} }},
			})
			c, err := net.Dial("tcp", addrs[tenancySvc])
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantEcho {
				assertEcho(t, c, "hello through a flaky mesh")
			} else {
				got, _ := io.ReadAll(c) // the proxy hangs up after logging
				c.Close()
				if len(got) != 0 {
					t.Fatalf("got %q from a failed stream", got)
				}
			}
			if dials, _ := tc.dialer.count(); dials != tc.wantDials {
				t.Errorf("dials = %d, want %d", dials, tc.wantDials)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("log lacks %q:\n%s", tc.wantLog, logs)
			}
		})
	}
}

// TestProxyRebuildsDeadContext: a context that fails every dial without the mesh answering is
// closed and replaced, and the next stream goes through the new one.
func TestProxyRebuildsDeadContext(t *testing.T) {
	echo := echoServer(t)
	dead := &fakeDialer{failFirst: 1 << 30}
	healthy := &fakeDialer{routes: map[string]string{tenancySvc: echo}}
	var mu sync.Mutex
	built := []*fakeDialer{dead, healthy}
	builds := 0
	logger, logs := newTestLogger(slog.LevelInfo)
	addrs, stop := startProxy(t, Options{
		Logger: logger, TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
		hooks: &proxyHooks{
			dialAttempts:    1,
			rebuildAfter:    2,
			rebuildInterval: -1,
			newDialer: func() (ServiceDialer, error) {
				mu.Lock()
				defer mu.Unlock()
				if builds == len(built) {
					return nil, errors.New("built too often")
				}
				builds++
				return built[builds-1], nil
			},
		},
	})
	for i := range 2 { // two failed streams make the context dead
		c, err := net.Dial("tcp", addrs[tenancySvc])
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := io.ReadAll(c); len(got) != 0 {
			t.Fatalf("stream %d through the dead context got %q", i, got)
		}
		c.Close()
	}
	if _, closed := dead.count(); !closed {
		t.Fatal("the dead context was not closed")
	}
	c, err := net.Dial("tcp", addrs[tenancySvc])
	if err != nil {
		t.Fatal(err)
	}
	assertEcho(t, c, "after the rebuild")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, closed := healthy.count(); !closed {
		t.Error("the live context was not closed at shutdown")
	}
	if !strings.Contains(logs.String(), "proxy: ziti context looks dead; rebuilding it") ||
		!strings.Contains(logs.String(), "proxy: ziti context rebuilt") {
		t.Errorf("log lacks the rebuild:\n%s", logs)
	}
}

// TestProxyGracefulShutdown: after ctx is cancelled the listener is gone, a stream in flight
// still completes, and RunProxy returns nil once it has.
func TestProxyGracefulShutdown(t *testing.T) {
	echo := echoServer(t)
	draining := make(chan struct{})
	addrs, stop := startProxy(t, Options{
		Dialer:         &fakeDialer{routes: map[string]string{tenancySvc: echo}},
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
		hooks: &proxyHooks{onDrain: func() { close(draining) }, drainTimeout: time.Hour},
	})
	c, err := net.Dial("tcp", addrs[tenancySvc])
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "first" {
		t.Fatalf("before shutdown: %q %v", buf, err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	<-draining
	if c2, err := net.Dial("tcp", addrs[tenancySvc]); err == nil {
		c2.Close()
		t.Fatal("the proxy still accepts after shutdown began")
	}
	select {
	case err := <-stopped:
		t.Fatalf("RunProxy returned (%v) with a stream in flight", err)
	default:
	}
	assertEcho(t, c, "still flowing") // completes the stream; RunProxy may now return
	if err := <-stopped; err != nil {
		t.Fatalf("RunProxy: %v", err)
	}
}

func TestProxyDrainTimeoutCutsStreams(t *testing.T) {
	echo := echoServer(t)
	addrs, stop := startProxy(t, Options{
		Dialer:         &fakeDialer{routes: map[string]string{tenancySvc: echo}},
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
		hooks: &proxyHooks{drainTimeout: time.Nanosecond},
	})
	c, err := net.Dial("tcp", addrs[tenancySvc])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	if _, err := c.Write([]byte("open")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("RunProxy: %v", err)
	}
	// RunProxy has returned, so the stream was cut: the client sees the end of it.
	if n, err := c.Read(buf); err == nil {
		t.Fatalf("read %d bytes from a cut stream", n)
	}
}

// TestRebuildInterval: a dead-looking context is rebuilt at most once per interval, because a
// rebuild cannot fix an unreachable controller and each abandoned SDK context keeps probing it.
func TestRebuildInterval(t *testing.T) {
	now := time.Unix(1000, 0)
	var built []*fakeDialer
	rd := &rebuildingDialer{
		build: func() (ServiceDialer, error) {
			d := &fakeDialer{failFirst: 1 << 30}
			built = append(built, d)
			return d, nil
		},
		rebuild: true, threshold: 2, minInterval: time.Minute,
		now:    func() time.Time { return now },
		logger: slog.New(slog.DiscardHandler),
	}
	ctx := context.Background()
	dialN := func(n int) {
		for range n {
			if _, err := rd.dial(ctx, tenancyInfo(tenancySvc)); err == nil {
				t.Fatal("a dead context dialled")
			}
		}
	}
	dialN(5)
	if len(built) != 1 {
		t.Fatalf("rebuilt within the interval: %d contexts", len(built))
	}
	now = now.Add(time.Minute)
	dialN(1) // the streak is already past the threshold: this failure rebuilds
	dialN(1) // and this one builds the new context
	if len(built) != 2 {
		t.Fatalf("after the interval: %d contexts, want 2", len(built))
	}
	if _, closed := built[0].count(); !closed {
		t.Fatal("the replaced context was not closed")
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDoublingDelays(t *testing.T) {
	b := doubling(5*time.Millisecond, time.Second)
	var got []time.Duration
	for range 10 {
		got = append(got, b.NextBackOff())
	}
	want := []time.Duration{5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("delays %v, want %v ms", got, want)
		}
	}
	b.Reset()
	if d := b.NextBackOff(); d != 5*time.Millisecond {
		t.Errorf("after Reset: %v, want 5ms", d)
	}
}

// TestProxyReloadsARenewedIdentity: a reload builds a new context for new dials while a stream
// open on the old one goes on; the old context is closed after its last stream, not before.
func TestProxyReloadsARenewedIdentity(t *testing.T) {
	echo := echoServer(t)
	old := &fakeDialer{routes: map[string]string{tenancySvc: echo}}
	renewed := &fakeDialer{routes: map[string]string{tenancySvc: echo}}
	var mu sync.Mutex
	built := []*fakeDialer{old, renewed}
	builds := 0
	logger, logs := newTestLogger(slog.LevelInfo)
	reload := make(chan struct{})
	addrs, stop := startProxy(t, Options{
		Logger: logger, TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0", Reload: reload,
		hooks: &proxyHooks{newDialer: func() (ServiceDialer, error) {
			mu.Lock()
			defer mu.Unlock()
			if builds == len(built) {
				return nil, errors.New("built too often")
			}
			builds++
			return built[builds-1], nil
		}},
	})
	// A stream on the old context, open across the reload (a tick's keep-alive connection).
	long, err := net.Dial("tcp", addrs[tenancySvc])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(long, buf); err != nil || string(buf) != "before" {
		t.Fatalf("the old stream: %q %v", buf, err)
	}
	reload <- struct{}{}
	reload <- struct{}{} // the second receive proves the first replace has returned
	// The second reload found nothing more to build: it logs the failure and keeps the context.
	c, err := net.Dial("tcp", addrs[tenancySvc])
	if err != nil {
		t.Fatal(err)
	}
	assertEcho(t, c, "after the reload")
	if n, _ := renewed.count(); n != 1 {
		t.Fatalf("the renewed context made %d dials, want the new stream's", n)
	}
	if n, closed := old.count(); n != 1 || closed {
		t.Fatalf("the old context: %d dials, closed %v; want one dial and still open for its stream", n, closed)
	}
	assertEcho(t, long, "still on the old context")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, closed := old.count(); closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the old context was not closed after its last stream")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if _, closed := renewed.count(); !closed {
		t.Error("the renewed context was not closed at shutdown")
	}
	if !strings.Contains(logs.String(), "proxy: ziti context replaced with the renewed identity") {
		t.Errorf("log lacks the replacement:\n%s", logs)
	}
}
