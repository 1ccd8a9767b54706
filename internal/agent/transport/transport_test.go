package transport

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	tenancySvc = "monky.tenancy.deploy"
	tenancyHP  = "monky.tenancy.deploy:443"
	baoSvc     = "openbao"
	baoHP      = "bao.cbs.tikali.net:8200"
)

func TestNewRejectsBadOptions(t *testing.T) {
	fd := func() ServiceDialer { return &fakeDialer{} }
	cases := []struct {
		name string
		opts Options
		want string
	}{
		{"unknown mode", Options{Mode: "tunnel"}, `unknown mode "tunnel"`},
		{"empty mode", Options{}, `unknown mode ""`},
		{"sdk with no routes", Options{Mode: ModeSDK, Dialer: fd()}, "no host:port to route"},
		{"sdk host:port without port", Options{Mode: ModeSDK, Dialer: fd(), TenancyService: tenancySvc, TenancyHostPort: "monky.tenancy.deploy"}, `tenancy host:port "monky.tenancy.deploy": not host:port`},
		{"sdk bad port", Options{Mode: ModeSDK, Dialer: fd(), BaoService: baoSvc, BaoHostPort: "bao:99999"}, `port "99999" is not 1-65535`},
		{"sdk host:port without service", Options{Mode: ModeSDK, Dialer: fd(), TenancyHostPort: tenancyHP}, "tenancy.service is empty"},
		{"same host:port twice", Options{Mode: ModeSDK, Dialer: fd(), TenancyService: tenancySvc, TenancyHostPort: tenancyHP, BaoService: baoSvc, BaoHostPort: "MONKY.tenancy.deploy:443"}, "tenancy and bao both use monky.tenancy.deploy:443"},
		{"proxy without proxy addr", Options{Mode: ModeProxy, TenancyService: tenancySvc, TenancyHostPort: tenancyHP}, "tenancy.proxy_addr is empty"},
		{"proxy with a LAN proxy addr", Options{Mode: ModeProxy, TenancyService: tenancySvc, TenancyHostPort: tenancyHP, TenancyProxyAddr: "192.168.1.5:18443"}, `tenancy.proxy_addr "192.168.1.5:18443" is not a loopback address`},
		{"proxy with port 0", Options{Mode: ModeProxy, BaoService: baoSvc, BaoHostPort: baoHP, BaoProxyAddr: "127.0.0.1:0"}, `bao.proxy_addr "127.0.0.1:0": bad port`},
		{"sdk without identity", Options{Mode: ModeSDK, TenancyService: tenancySvc, TenancyHostPort: tenancyHP}, "is not configured (config key `identity`)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.opts)
			if err == nil {
				tr.Close()
				t.Fatal("New accepted bad options")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
}

func TestSDKDialRouting(t *testing.T) {
	tenancy := echoServer(t)
	fd := &fakeDialer{
		routes: map[string]string{tenancySvc: tenancy},
		errFor: map[string]error{"hostless": errors.New("unable to dial service 'hostless' (service hostless has no terminators)")},
	}
	tr, err := New(Options{Mode: ModeSDK, Dialer: fd,
		TenancyService: tenancySvc, TenancyHostPort: tenancyHP, BaoService: baoSvc, BaoHostPort: baoHP})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("mapped, any case", func(t *testing.T) {
		for _, addr := range []string{tenancyHP, "MONKY.Tenancy.Deploy:443", "monky.tenancy.deploy.:443"} {
			c, err := tr.DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatalf("dial %s: %v", addr, err)
			}
			assertEcho(t, c, "ping "+addr)
		}
	})
	t.Run("unmapped is refused and named", func(t *testing.T) {
		for _, addr := range []string{"evil.example:443", "monky.tenancy.deploy:80", "127.0.0.1:8081", "garbage"} {
			before, _ := fd.count()
			_, err := tr.DialContext(ctx, "tcp", addr)
			if !errors.Is(err, ErrUnmapped) || !strings.Contains(err.Error(), "refusing "+addr) ||
				!strings.Contains(err.Error(), "mapped: bao.cbs.tikali.net:8200, monky.tenancy.deploy:443") {
				t.Errorf("dial %s: %v", addr, err)
			}
			if after, _ := fd.count(); after != before {
				t.Errorf("dial %s reached the ziti dialer", addr)
			}
		}
	})
	t.Run("udp is refused", func(t *testing.T) {
		if _, err := tr.DialContext(ctx, "udp", tenancyHP); err == nil || !strings.Contains(err.Error(), "only tcp") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("service not visible", func(t *testing.T) {
		_, err := tr.DialContext(ctx, "tcp", baoHP)
		var se *ServiceError
		if !errors.As(err, &se) || se.Service != baoSvc || !errors.Is(err, ErrServiceNotVisible) {
			t.Fatalf("got %v", err)
		}
		if want := "ziti service openbao: not visible to this identity: check #openbao-client"; err.Error() != want {
			t.Fatalf("got %q, want %q", err, want)
		}
	})
	t.Run("classification", func(t *testing.T) {
		cases := []struct {
			svc  serviceInfo
			err  error
			kind error
			want string
		}{
			{tenancyInfo(tenancySvc), errors.New("service 'monky.tenancy.deploy' not found"), ErrServiceNotVisible,
				"ziti service monky.tenancy.deploy: not visible to this identity: check #monky-deploy-agent"},
			{tenancyInfo(tenancySvc), errors.New("unable to dial service 'monky.tenancy.deploy' (edge: service X has no terminators)"), ErrNoTerminators,
				"ziti service monky.tenancy.deploy: has no terminators: tenancy's sidecar is not hosting it"},
			{baoInfo(baoSvc), errors.New("failed to dial: no apiSession, authentication attempt failed: connection refused"), nil,
				"ziti service openbao: dial failed: failed to dial: no apiSession"},
		}
		for _, tc := range cases {
			err := classifyDialError(ctx, tc.svc, tc.err)
			if !strings.HasPrefix(err.Error(), tc.want) || (tc.kind != nil && !errors.Is(err, tc.kind)) || !errors.Is(err, tc.err) {
				t.Errorf("classify(%v) = %v, want %q", tc.err, err, tc.want)
			}
		}
	})
	t.Run("close", func(t *testing.T) {
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		if err := tr.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		if _, closed := fd.count(); !closed {
			t.Fatal("Close did not close the injected dialer")
		}
		if _, err := tr.DialContext(ctx, "tcp", tenancyHP); !errors.Is(err, ErrClosed) {
			t.Fatalf("dial after Close: %v", err)
		}
	})
}

// TestSDKRealContext drives the real SDK: a valid identity whose controller refuses
// connections. New must not touch the network, and the dial must come back as a ServiceError
// naming the service — no exit, no panic.
func TestSDKRealContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctrlAddr := ln.Addr().String()
	ln.Close() // nothing listens there now
	path := filepath.Join(t.TempDir(), "id.json")
	if err := os.WriteFile(path, validIdentity(t, "https://"+ctrlAddr+"/edge/client/v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	logger, _ := newTestLogger(-8)
	tr, err := New(Options{Mode: ModeSDK, IdentityFile: path, Logger: logger,
		TenancyService: tenancySvc, TenancyHostPort: tenancyHP})
	if err != nil {
		t.Fatalf("New with a valid identity: %v", err)
	}
	// The SDK would wait for the controller forever; the dial must give up with ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = tr.DialContext(ctx, "tcp", tenancyHP)
	var se *ServiceError
	if !errors.As(err, &se) || se.Service != tenancySvc {
		t.Fatalf("dial through a dead controller: %v", err)
	}
	t.Logf("dial through a dead controller: %v", err)
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestProxyModeDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hangUp := ln.Addr().String()
	go func() { // a proxy that could not reach the mesh: accept, then hang up
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	tr, err := New(Options{Mode: ModeProxy,
		TenancyService: tenancySvc, TenancyHostPort: tenancyHP, TenancyProxyAddr: hangUp,
		BaoService: baoSvc, BaoHostPort: baoHP, BaoProxyAddr: deadAddr})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()

	t.Run("unmapped", func(t *testing.T) {
		_, err := tr.DialContext(ctx, "tcp", "registry.example:443")
		if !errors.Is(err, ErrUnmapped) || !strings.Contains(err.Error(), "transport proxy: refusing registry.example:443") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("proxy not running", func(t *testing.T) {
		_, err := tr.DialContext(ctx, "tcp", baoHP)
		var se *ServiceError
		if !errors.As(err, &se) || se.Service != baoSvc || !errors.Is(err, ErrProxyUnreachable) ||
			!strings.Contains(err.Error(), "monky-deployd-proxy.service") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("proxy hangs up without a reply", func(t *testing.T) {
		client := &http.Client{Transport: tr.HTTPTransport()}
		_, err := client.Get("http://" + tenancyHP + "/v1/agent/checkin")
		var se *ServiceError
		if !errors.As(err, &se) || se.Service != tenancySvc || !strings.Contains(err.Error(), "closed the stream without a reply") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestSystemModeDialsDirectly(t *testing.T) {
	tr, err := New(Options{Mode: ModeSystem})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	addr := echoServer(t)
	c, err := tr.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	assertEcho(t, c, "direct")
	if tr.HTTPTransport().Proxy != nil {
		t.Fatal("HTTPTransport honours HTTP(S)_PROXY")
	}
}

// TestEndToEnd reaches one loopback HTTP server through each mode, as the agent would: the
// tenancy URL http://monky.tenancy.deploy:443 in sdk and proxy modes, the server's own
// address in system mode.
func TestEndToEnd(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Write([]byte(r.Method + " " + r.URL.Path + " " + string(body)))
	}))
	defer srv.Close()
	srvAddr := srv.Listener.Addr().String()

	proxyAddrs, stop := startProxy(t, Options{
		Dialer:         &fakeDialer{routes: map[string]string{tenancySvc: srvAddr}},
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
	})

	cases := []struct {
		name string
		opts Options
		base string
	}{
		{"system", Options{Mode: ModeSystem}, srv.URL},
		{"sdk", Options{Mode: ModeSDK, Dialer: &fakeDialer{routes: map[string]string{tenancySvc: srvAddr}},
			TenancyService: tenancySvc, TenancyHostPort: tenancyHP}, "http://" + tenancyHP},
		{"proxy", Options{Mode: ModeProxy, TenancyService: tenancySvc, TenancyHostPort: tenancyHP,
			TenancyProxyAddr: proxyAddrs[tenancySvc]}, "http://" + tenancyHP},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			ht := tr.HTTPTransport()
			defer ht.CloseIdleConnections() // lets the proxy drain at once when it stops
			client := &http.Client{Transport: ht, Timeout: 10 * time.Second}
			for i := 0; i < 3; i++ { // the later requests reuse the kept-alive stream
				resp, err := client.Post(tc.base+"/v1/agent/checkin", "application/json", strings.NewReader(`{"env_id":"env-dev-08"}`))
				if err != nil {
					t.Fatal(err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if want := `POST /v1/agent/checkin {"env_id":"env-dev-08"}`; string(got) != want {
					t.Fatalf("got %q, want %q", got, want)
				}
			}
			if tc.opts.Mode != ModeSystem {
				_, err := client.Get("http://elsewhere.example:80/")
				if !errors.Is(err, ErrUnmapped) || !strings.Contains(err.Error(), "elsewhere.example:80") {
					t.Fatalf("unmapped request: %v", err)
				}
			}
		})
	}
	if err := stop(); err != nil {
		t.Fatalf("RunProxy: %v", err)
	}
}

func FuzzCheckLoopback(f *testing.F) {
	for _, s := range []string{"127.0.0.1:18443", "[::1]:18200", "localhost:1", "0.0.0.0:1", ":1",
		"[::]:1", "10.0.0.1:1", "127.0.0.1", "[::1%lo]:1", "127.1:1", "[::ffff:127.0.0.1]:1", "example.com:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, addr string) {
		if checkLoopback("k", addr, true) != nil {
			return
		}
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("accepted %q which is not host:port", addr)
		}
		if host == "localhost" {
			return
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() {
			t.Fatalf("accepted non-loopback %q", addr)
		}
	})
}

func TestCheckLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:18443": true, "127.0.0.2:1": true, "[::1]:18200": true, "localhost:18443": true,
		"0.0.0.0:18443": false, ":18443": false, "[::]:18200": false, "10.1.2.3:1": false,
		"example.com:1": false, "127.0.0.1": false, "127.0.0.1:x": false, "": false,
	} {
		if err := checkLoopback("tenancy.proxy_addr", addr, false); (err == nil) != ok {
			t.Errorf("checkLoopback(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

func assertEcho(t testing.TB, c net.Conn, msg string) {
	t.Helper()
	defer c.Close()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatalf("echo got %q, want %q", got, msg)
	}
}
