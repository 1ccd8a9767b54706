package tick_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
)

// meshDialer stands in for the ziti context: it dials a service by name to the loopback fake
// that plays it, and counts the dials so a test can tell the mesh was used.
type meshDialer struct {
	mu       sync.Mutex
	services map[string]string // service → host:port
	dials    map[string]int
	closed   bool
}

func (d *meshDialer) DialService(ctx context.Context, service string) (net.Conn, error) {
	d.mu.Lock()
	addr, ok := d.services[service]
	d.dials[service]++
	d.mu.Unlock()
	if !ok {
		return nil, errors.New("service '" + service + "' not found")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, "tcp", addr)
}

func (d *meshDialer) Close() error { d.mu.Lock(); d.closed = true; d.mu.Unlock(); return nil }

func (d *meshDialer) count(service string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[service]
}

func hostOf(t testing.TB, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// meshHarness is a harness whose config names the production intercept addresses; only the
// transport under test can reach the fakes behind them.
func meshHarness(t testing.TB) (*harness, *meshDialer) {
	h := newHarnessWith(t, 0, "http://bao.cbs.tikali.net:8200")
	d := &meshDialer{dials: map[string]int{}, services: map[string]string{
		"monky.tenancy.deploy": hostOf(t, h.ten.URL),
		"openbao":              hostOf(t, h.bao.URL),
	}}
	text := strings.NewReplacer(
		h.ten.URL, "http://monky.tenancy.deploy:443",
		h.bao.URL, "http://bao.cbs.tikali.net:8200",
		"transport: system", "transport: sdk",
	).Replace(h.cfgText)
	var err error
	h.cfg, err = config.Parse([]byte(text), filepath.Join(h.dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return h, d
}

func meshOptions(h *harness, mode string) transport.Options {
	return transport.Options{
		Mode:             mode,
		TenancyService:   "monky.tenancy.deploy",
		BaoService:       "openbao",
		TenancyHostPort:  "monky.tenancy.deploy:443",
		BaoHostPort:      "bao.cbs.tikali.net:8200",
		TenancyProxyAddr: h.cfg.Tenancy.ProxyAddr,
		BaoProxyAddr:     h.cfg.Bao.ProxyAddr,
		Logger:           journal.Discard(),
	}
}

func freeLoopback(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProxy runs `monky-deployd proxy`'s daemon on free loopback ports with the mesh dialer and
// points the harness config at it.
func startProxy(t testing.TB, h *harness, d *meshDialer) {
	opts := meshOptions(h, transport.ModeSDK)
	opts.TenancyProxyAddr, opts.BaoProxyAddr = freeLoopback(t), freeLoopback(t)
	opts.Dialer = d
	h.cfg.Tenancy.ProxyAddr, h.cfg.Bao.ProxyAddr = opts.TenancyProxyAddr, opts.BaoProxyAddr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- transport.RunProxy(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	})
	// Ready when both listeners accept.
	for _, addr := range []string{opts.TenancyProxyAddr, opts.BaoProxyAddr} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("proxy never listened on %s: %v", addr, err)
			}
			runtimeYield()
		}
	}
}

func runtimeYield() { time.Sleep(5 * time.Millisecond) }

// The whole tick — bootstrap, check-in, bundle, lease, KV reads, reports — through each
// transport: the config names only the production intercept addresses.
func TestTickThroughEachTransport(t *testing.T) {
	for _, mode := range []string{transport.ModeSDK, transport.ModeProxy, transport.ModeSystem} {
		t.Run(mode, func(t *testing.T) {
			var h *harness
			var d *meshDialer
			if mode == transport.ModeSystem {
				h = newHarness(t) // ziti-edge-tunnel's intercept is the plain loopback address here
			} else {
				h, d = meshHarness(t)
			}
			opts := meshOptions(h, mode)
			switch mode {
			case transport.ModeSDK:
				opts.Dialer = d
			case transport.ModeProxy:
				startProxy(t, h, d)
				opts = meshOptions(h, mode)
			}
			tr, err := transport.New(opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tr.Close() })
			h.httpTransport = func() *http.Transport {
				ht := tr.HTTPTransport()
				// No idle keep-alive streams for the proxy to drain at the end of the test.
				ht.DisableKeepAlives = true
				return ht
			}
			h.desire(bundleSpec{})
			h.expectExit(tick.ExitOK)
			h.expectExit(tick.ExitOK)
			if r := h.lastReport(); r.Result != "healthy" {
				t.Errorf("report = %+v", r)
			}
			if d != nil && (d.count("monky.tenancy.deploy") == 0 || d.count("openbao") == 0) {
				t.Errorf("the mesh was not used: %v", d.dials)
			}
		})
	}
}

// A target outside the transport's map is refused by name, never dialled directly.
func TestUnmappedTargetIsRefused(t *testing.T) {
	h, d := meshHarness(t)
	opts := meshOptions(h, transport.ModeSDK)
	opts.Dialer = d
	tr, err := transport.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	h.httpTransport = tr.HTTPTransport
	// Tenancy hands out an OpenBao address the mesh does not map.
	h.cfg.Bao.Addr = "http://elsewhere.example:8200"
	err = tick.New(h.cfg, h.deps(), tick.Options{}).Tick(context.Background())
	// Not temporary (75): retrying will not make the target mapped.
	if code := tick.ExitCode(err); code != tick.ExitFailed || !strings.Contains(err.Error(), "elsewhere.example:8200") {
		t.Errorf("exit %d, error %v", code, err)
	}
}

// BenchmarkConvergedTickTransport compares a converged tick (check-in → none → ps → report)
// through the proxy with the same tick through `system`. Both boxes tick in turn inside one
// loop, so drift of the machine weighs on both alike; the figure of record is
// proxy-minus-system-ms, what the proxy adds to one tick (target: under 1 ms).
func BenchmarkConvergedTickTransport(b *testing.B) {
	boxes := map[string]*harness{}
	for _, mode := range []string{transport.ModeSystem, transport.ModeProxy} {
		var h *harness
		if mode == transport.ModeSystem {
			h = newHarness(b)
		} else {
			var d *meshDialer
			h, d = meshHarness(b)
			startProxy(b, h, d)
		}
		tr, err := transport.New(meshOptions(h, mode))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { tr.Close() })
		h.httpTransport = tr.HTTPTransport
		h.desire(bundleSpec{})
		if code := h.tick(); code != tick.ExitOK {
			b.Fatalf("%s: apply: exit %d\n%s", mode, code, h.logs.String())
		}
		boxes[mode] = h
	}
	var spent [2]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j, mode := range []string{transport.ModeSystem, transport.ModeProxy} {
			start := time.Now()
			if code := boxes[mode].tick(); code != tick.ExitOK {
				b.Fatalf("%s: tick: exit %d", mode, code)
			}
			spent[j] += time.Since(start)
		}
	}
	perTick := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(perTick(spent[0]), "system-ms/tick")
	b.ReportMetric(perTick(spent[1]), "proxy-ms/tick")
	b.ReportMetric(perTick(spent[1]-spent[0]), "proxy-minus-system-ms")
}
