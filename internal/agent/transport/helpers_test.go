package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"
)

// testPKI is a throw-away CA issuing client and server certificates.
type testPKI struct {
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
	caPEM []byte
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	ca := testpki.NewCA(t, "test CA")
	return &testPKI{ca: ca.Cert, key: ca.Key, caPEM: ca.PEM}
}

// leaf issues a certificate for dnsNames (a server) or, with none, a client certificate.
func (p *testPKI) leaf(t testing.TB, dnsNames ...string) (certPEM, keyPEM []byte, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "leaf"},
		NotBefore:    time.Unix(0, 0),
		NotAfter:     time.Unix(1<<33, 0),
		DNSNames:     dnsNames,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keyPEM, pair
}

// identityJSON renders a ziti identity file the way ziti-edge-tunnel writes one.
func identityJSON(t testing.TB, ztAPI, cert, key, ca string) []byte {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"ztAPI":       ztAPI,
		"configTypes": nil,
		"id":          map[string]string{"cert": cert, "key": key, "ca": ca},
		"enableHa":    false,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validIdentity returns a well-formed identity whose controller URL points at ztAPI.
func validIdentity(t testing.TB, ztAPI string) []byte {
	p := newPKI(t)
	cert, key, _ := p.leaf(t)
	return identityJSON(t, ztAPI, "pem:"+string(cert), "pem:"+string(key), "pem:"+string(p.caPEM))
}

// fakeFS is an injected readFile: files by path, errors by path, everything else ErrNotExist.
type fakeFS struct {
	files map[string][]byte
	errs  map[string]error
}

func (f fakeFS) read(path string) ([]byte, error) {
	if err, ok := f.errs[path]; ok {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	if b, ok := f.files[path]; ok {
		return b, nil
	}
	return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
}

// fakeDialer maps ziti service names to TCP addresses and answers the rest the way the SDK
// does ("service 'x' not found"). It can fail its first dials, or fail a service with a set
// error, and refuses to dial once closed.
type fakeDialer struct {
	routes    map[string]string
	errFor    map[string]error
	failFirst int

	mu     sync.Mutex
	dials  int
	closed bool
}

var errEdgeReset = errors.New("edge router connection reset")

func (f *fakeDialer) DialService(ctx context.Context, service string) (net.Conn, error) {
	f.mu.Lock()
	f.dials++
	n, closed := f.dials, f.closed
	f.mu.Unlock()
	switch {
	case closed:
		return nil, errors.New("ziti context closed")
	case n <= f.failFirst:
		return nil, fmt.Errorf("unable to dial service '%s' (%w)", service, errEdgeReset)
	}
	if err, ok := f.errFor[service]; ok {
		return nil, err
	}
	addr, ok := f.routes[service]
	if !ok {
		return nil, fmt.Errorf("service '%s' not found", service)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	return &fakeEdgeConn{Conn: c}, nil
}

// fakeEdgeConn stands for the SDK's edge conn: a net.Conn that half-closes but is not a
// *net.TCPConn, so the proxy copies it the way it copies a real ziti stream.
type fakeEdgeConn struct{ net.Conn }

func (c *fakeEdgeConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

func (f *fakeDialer) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("fake dialer closed twice")
	}
	f.closed = true
	return nil
}

func (f *fakeDialer) count() (dials int, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dials, f.closed
}

func newTestLogger(level slog.Level) (*slog.Logger, *syncbuf.Buffer) {
	b := &syncbuf.Buffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level})), b
}

// echoServer accepts TCP connections on loopback and echoes each until the client half-closes.
func echoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
				c.(*net.TCPConn).CloseWrite()
			}()
		}
	}()
	return ln.Addr().String()
}

// startProxy runs RunProxy in the background and returns the bound address of each service's
// listener, and a stop function that cancels it and returns RunProxy's error.
func startProxy(t testing.TB, opts Options) (addrs map[string]string, stop func() error) {
	t.Helper()
	if opts.hooks == nil {
		opts.hooks = &proxyHooks{}
	}
	bound := make(chan [2]string, 2)
	prev := opts.hooks.onListen
	opts.hooks.onListen = func(service string, addr net.Addr) {
		if prev != nil {
			prev(service, addr)
		}
		bound <- [2]string{service, addr.String()}
	}
	want := 0
	for _, a := range []string{opts.TenancyProxyAddr, opts.BaoProxyAddr} {
		if a != "" {
			want++
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunProxy(ctx, opts) }()
	addrs = map[string]string{}
	for len(addrs) < want {
		select {
		case b := <-bound:
			addrs[b[0]] = b[1]
		case err := <-done:
			cancel()
			t.Fatalf("RunProxy returned before listening: %v", err)
		}
	}
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	return addrs, stop
}
