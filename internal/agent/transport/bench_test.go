package transport

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkProxyOverhead times the same small request through system (straight to the loopback
// server) and through the proxy (loopback listener → proxy → server), interleaved so both see
// the same machine load, and reports what the proxy adds per request.
func BenchmarkProxyOverhead(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"action":"none"}`))
	}))
	defer srv.Close()
	addrs, stop := startProxy(b, Options{
		Dialer:         &fakeDialer{routes: map[string]string{tenancySvc: srv.Listener.Addr().String()}},
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
	})
	defer stop()
	sys, err := New(Options{Mode: ModeSystem})
	if err != nil {
		b.Fatal(err)
	}
	prx, err := New(Options{Mode: ModeProxy, TenancyService: tenancySvc, TenancyHostPort: tenancyHP, TenancyProxyAddr: addrs[tenancySvc]})
	if err != nil {
		b.Fatal(err)
	}

	for _, keepAlive := range []bool{false, true} {
		name := "new-connection"
		if keepAlive {
			name = "keep-alive"
		}
		b.Run(name, func(b *testing.B) {
			client := func(t *Transport) *http.Client {
				ht := t.HTTPTransport()
				ht.DisableKeepAlives = !keepAlive
				b.Cleanup(ht.CloseIdleConnections)
				return &http.Client{Transport: ht}
			}
			sysClient, prxClient := client(sys), client(prx)
			get := func(c *http.Client, url string) time.Duration {
				start := time.Now()
				resp, err := c.Post(url, "application/json", strings.NewReader(`{"env_id":"env-dev-08"}`))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return time.Since(start)
			}
			var sysTotal, prxTotal time.Duration
			n := 0
			for b.Loop() {
				sysTotal += get(sysClient, srv.URL+"/v1/agent/checkin")
				prxTotal += get(prxClient, "http://"+tenancyHP+"/v1/agent/checkin")
				n++
			}
			us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
			b.ReportMetric(us(sysTotal), "system-µs/req")
			b.ReportMetric(us(prxTotal), "proxy-µs/req")
			b.ReportMetric(us(prxTotal-sysTotal), "added-µs/req")
		})
	}
}

// BenchmarkProxy200Streams opens 200 streams through the proxy at once, each carrying a round
// trip so it is live end to end, and reports the process's resident memory while all are open,
// and the file descriptors each stream holds (what a box's LimitNOFILE must allow: here the
// client's, the proxy's two ends, the echo server's and the pipe Go's splice copy holds). Both
// are upper bounds for the proxy: this process also runs the echo server and the 200 clients.
func BenchmarkProxy200Streams(b *testing.B) {
	const streams = 200
	echo := echoServer(b)
	addrs, stop := startProxy(b, Options{
		Dialer:         &fakeDialer{routes: map[string]string{tenancySvc: echo}},
		TenancyService: tenancySvc, TenancyProxyAddr: "127.0.0.1:0",
	})
	defer stop()
	msg := bytes.Repeat([]byte("x"), 1024)
	runtime.GC()
	baseRSS, err := readRSS()
	if err != nil {
		b.Fatal(err)
	}
	baseFDs, err := openFDs()
	if err != nil {
		b.Fatal(err)
	}
	var peakRSS, peakHeap uint64
	var peakGoroutines, peakFDs int
	for b.Loop() {
		conns := make([]net.Conn, 0, streams)
		for range streams {
			c, err := net.Dial("tcp", addrs[tenancySvc])
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
		}
		buf := make([]byte, len(msg))
		for _, c := range conns {
			if _, err := c.Write(msg); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(c, buf); err != nil {
				b.Fatal(err)
			}
		}
		rss, err := readRSS()
		if err != nil {
			b.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		peakRSS = max(peakRSS, rss)
		peakHeap = max(peakHeap, ms.HeapInuse)
		peakGoroutines = max(peakGoroutines, runtime.NumGoroutine())
		fds, err := openFDs()
		if err != nil {
			b.Fatal(err)
		}
		peakFDs = max(peakFDs, fds)
		for _, c := range conns {
			c.Close()
		}
	}
	b.ReportMetric(float64(peakRSS)/(1<<20), "rss-MiB")
	b.ReportMetric(float64(baseRSS)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(float64(peakHeap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(peakGoroutines), "goroutines")
	b.ReportMetric(float64(peakFDs-baseFDs)/streams, "fds/stream")
}

// openFDs counts this process's open file descriptors.
func openFDs() (int, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	return len(fds), err
}

// readRSS returns this process's resident set size from /proc/self/status.
func readRSS() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) != 2 || fields[1] != "kB" {
				return 0, fmt.Errorf("unexpected VmRSS line %q", sc.Text())
			}
			kb, err := strconv.ParseUint(fields[0], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/self/status: %v", sc.Err())
}
