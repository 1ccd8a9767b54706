//go:build integration

package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkConvergedTickMesh measures, side by side in one run against one real controller and
// router, the wall time of a converged tick (the whole `monky-deployd tick` process: check-in,
// heartbeat report, no docker change) in the three transports — `system` straight to loopback,
// `proxy` through the long-lived `monky-deployd proxy` daemon, `sdk` with the SDK embedded in the
// tick — and how many controller authentications (API sessions the controller creates for the
// agent's identity, from its own event log) each converged tick costs. Targets: the proxy adds < 20 ms to a tick and authenticates 0 times a tick.
func BenchmarkConvergedTickMesh(b *testing.B) {
	m := newMesh(b, "meshbench", attrAgent, attrBao)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := m.ctrl.EnableEvents(ctx); err != nil {
		b.Fatal(err)
	}
	auth := func() int {
		n, err := m.ctrl.APISessionsCreated(ctx, "monky-host."+m.env)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	sysCfg, err := os.ReadFile(m.box.ConfigPath) // the dev stack's own: transport system, loopback
	if err != nil {
		b.Fatal(err)
	}
	m.configure(b, "sdk", "")
	m.converge(b, 6)
	sdkCfg, err := os.ReadFile(m.box.ConfigPath)
	if err != nil {
		b.Fatal(err)
	}
	tenancyAddr, baoAddr := freeAddr(b), freeAddr(b)
	proxyCfg := strings.Replace(string(sdkCfg), "transport: sdk", "transport: proxy", 1)
	proxyCfg = strings.Replace(proxyCfg, "  port: 443\n", "  port: 443\n  proxy_addr: "+tenancyAddr+"\n", 1)
	proxyCfg = strings.Replace(proxyCfg, "  addr: "+m.baoAddr+"\n", "  addr: "+m.baoAddr+"\n  proxy_addr: "+baoAddr+"\n", 1)

	modes := []struct {
		name string
		cfg  string
	}{{"system", string(sysCfg)}, {"proxy", proxyCfg}, {"sdk", string(sdkCfg)}}
	spent := make([]time.Duration, len(modes))
	auths := make([]int, len(modes))
	for i, mode := range modes {
		if err := os.WriteFile(m.box.ConfigPath, []byte(mode.cfg), 0o640); err != nil {
			b.Fatal(err)
		}
		if mode.name == "proxy" {
			_, stop := m.proxyDaemon(b)
			defer stop() //nolint:errcheck // proxyDaemon's cleanup reports a failed stop
		}
		// Ticks outside the measurement until one succeeds: a proxy just started may not listen
		// yet (the tick exits 75 and the next one retries, as the timer would).
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			tk := m.tick(b)
			if tk.Exit == 0 {
				break
			}
			if tk.Exit != 75 || time.Now().After(deadline) {
				m.fatalWithJournals("%s: warm-up tick exited %d", mode.name, tk.Exit)
			}
		}
		before := auth()
		b.ResetTimer()
		for n := 0; n < b.N; n++ {
			tk := m.tick(b)
			if tk.Exit != 0 {
				m.fatalWithJournals("%s: converged tick exited %d", mode.name, tk.Exit)
			}
			spent[i] += tk.End.Sub(tk.Start)
		}
		b.StopTimer()
		auths[i] = auth() - before
	}
	perTick := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
	for i, mode := range modes {
		b.ReportMetric(perTick(spent[i]), mode.name+"-ms/tick")
		b.ReportMetric(float64(auths[i])/float64(b.N), mode.name+"-auths/tick")
	}
	b.ReportMetric(perTick(spent[1]-spent[0]), "proxy-minus-system-ms")
}
