package devstack

import (
	"context"
	"errors"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	fleetconfig "scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
)

// The stack never listens beyond loopback: every address it serves or hands out (to fleetctl's
// config and to a box's) is 127.0.0.1, and none of its ports answers on another address of this
// machine. The real OpenBao and the registry are separate processes; their listen addresses are
// tested in baodev and registrydev.
func TestEveryServerListensOnLoopbackOnly(t *testing.T) {
	s, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	served := map[string]string{
		"tenancy agent API":   s.Tenancy.URL,
		"admin API":           s.Admin.URL,
		"ziti management API": s.Ziti.URL,
		"OpenBao fake":        s.Bao.Addr(),
	}
	if s.Bao.Pid() != 0 {
		t.Fatalf("Options without BaoBin started %s", s.Bao.Kind())
	}

	fc, err := fleetconfig.Load(s.FleetctlConfig(), true, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.NewBox(BoxOptions{Env: "env-demo-01", Bin: "/bin/true", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	bc, err := config.Load(b.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	handedOut := map[string]string{
		"fleetctl ziti.url":    fc.Ziti.URL,
		"fleetctl tenancy.url": fc.Tenancy.URL,
		"box tenancy":          bc.TenancyURL(),
		"box bao.addr":         bc.Bao.Addr,
	}
	for what, raw := range handedOut {
		if !sameListener(raw, served) {
			t.Errorf("%s = %s, which is none of the stack's servers %v", what, raw, served)
		}
		assertLoopback(t, what, raw)
	}

	others := nonLoopbackIPv4(t)
	for what, raw := range served {
		u := assertLoopback(t, what, raw)
		if u == nil {
			continue
		}
		// The port must answer on loopback and be refused on every other address: a server on
		// 0.0.0.0 would accept both.
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Errorf("%s: %s does not answer: %v", what, u.Host, err)
			continue
		}
		c.Close()
		for _, ip := range others {
			addr := net.JoinHostPort(ip.String(), u.Port())
			// The timeout only bounds a firewall that drops instead of refusing.
			c, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial("tcp", addr)
			if err == nil {
				c.Close()
				t.Errorf("%s answers on %s: it listens beyond loopback", what, addr)
			} else if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Logf("%s: dialling %s: %v (not refused, but not accepted either)", what, addr, err)
			}
		}
	}
	if len(others) == 0 {
		t.Log("no non-loopback IPv4 address on this machine: only the URLs were checked")
	}
}

// assertLoopback checks that raw is an http(s) URL on 127.0.0.1 with a port.
func assertLoopback(t *testing.T, what, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() != "127.0.0.1" || u.Port() == "" {
		t.Errorf("%s = %q, want http(s)://127.0.0.1:PORT", what, raw)
		return nil
	}
	return u
}

func sameListener(raw string, served map[string]string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	for _, s := range served {
		if v, err := url.Parse(s); err == nil && v.Host == u.Host {
			return true
		}
	}
	return false
}

// nonLoopbackIPv4 lists this machine's IPv4 addresses other than loopback.
func nonLoopbackIPv4(t *testing.T) []net.IP {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			ips = append(ips, n.IP)
		}
	}
	return ips
}
