//go:build integration

package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// BenchmarkConvergedTickMesh measures, side by side in one run against one real controller and
// router, the wall time of a converged tick (the whole `monky-deployd tick` process: check-in,
// heartbeat report, no docker change) in the three transports — `system` straight to loopback,
// `proxy` through the long-lived `monky-deployd proxy` daemon, `sdk` with the SDK embedded in the
// tick — and how many controller authentications (new API sessions of the agent's identity) each
// converged tick costs. Targets: the proxy adds < 20 ms to a tick and authenticates 0 times a tick.
func BenchmarkConvergedTickMesh(b *testing.B) {
	m := newMesh(b, "meshbench", attrAgent, attrBao)
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
	identity := "monky-host." + m.env
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
		// One tick outside the measurement: the proxy's first dial, a renewed token.
		if tk := m.tick(b); tk.Exit != 0 {
			m.fatalWithJournals("%s: warm-up tick exited %d", mode.name, tk.Exit)
		}
		before := m.apiSessions(b, identity)
		b.ResetTimer()
		for n := 0; n < b.N; n++ {
			tk := m.tick(b)
			if tk.Exit != 0 {
				m.fatalWithJournals("%s: converged tick exited %d", mode.name, tk.Exit)
			}
			spent[i] += tk.End.Sub(tk.Start)
		}
		b.StopTimer()
		auths[i] = m.apiSessions(b, identity) - before
	}
	perTick := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) / 1000 }
	for i, mode := range modes {
		b.ReportMetric(perTick(spent[i]), mode.name+"-ms/tick")
		b.ReportMetric(float64(auths[i])/float64(b.N), mode.name+"-auths/tick")
	}
	b.ReportMetric(perTick(spent[1]-spent[0]), "proxy-minus-system-ms")
}
