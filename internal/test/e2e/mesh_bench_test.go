//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/gitbuild"
)

// BenchmarkConvergedTickMesh measures, side by side in one run against one real controller and
// router (`ziti edge quickstart`: one process, whose CPU is read from /proc), the cost of a
// converged tick (the whole `monky-deployd tick` process: check-in, heartbeat report, no docker
// change) in every transport: `system` straight to loopback (no mesh: the floor), `proxy`
// through the long-lived `monky-deployd proxy` daemon, `sdk` of the tree before issue 24 (a new
// controller session every tick; built from git history, gitbuild.Before) and `sdk` of this tree
// (the session kept in state_dir between ticks). Per transport: the tick's wall time (median),
// the controller's and router's CPU per tick, and the controller authentications per tick (API
// sessions the controller created for the agent's identity, from its own event log). Issue 24's
// targets: controller + router CPU ≤ 12 ms a tick in every transport, 0 authentications.
func BenchmarkConvergedTickMesh(b *testing.B) {
	m := newMesh(b, "meshbench", attrAgent, attrBao)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := m.ctrl.EnableEvents(ctx); err != nil {
		b.Fatal(err)
	}
	auth := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // each: the run outlasts any one bound
		defer cancel()
		n, err := m.ctrl.APISessionsCreated(ctx, "monky-host."+m.env)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	ctrlCPU := func() time.Duration {
		d, err := processCPU(m.ctrl.Pid())
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	thisBin := m.box.Bin()
	beforeBin := filepath.Join(b.TempDir(), "monky-deployd-before")
	gitbuild.Build(b, gitbuild.Rev(gitbuild.Before), "./cmd/deployd", beforeBin)

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
		name, cfg, bin string
	}{
		{"direct", string(sysCfg), thisBin},
		{"proxy", proxyCfg, thisBin},
		{"sdk-before", string(sdkCfg), beforeBin},
		{"sdk", string(sdkCfg), thisBin},
	}
	type result struct {
		walls []time.Duration
		cpu   time.Duration
		auths int
	}
	results := make([]result, len(modes))
	for i, mode := range modes {
		if err := os.WriteFile(m.box.ConfigPath, []byte(mode.cfg), 0o640); err != nil {
			b.Fatal(err)
		}
		m.box.SetBin(mode.bin)
		if mode.name == "proxy" {
			_, stop := m.proxyDaemon(b)
			defer stop() //nolint:errcheck // proxyDaemon's cleanup reports a failed stop
		}
		// Ticks outside the measurement until one succeeds: a proxy just started may not listen
		// yet (the tick exits 75 and the next one retries, as the timer would). The sdk's first
		// tick authenticates and keeps the session for the measured ones.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			tk := m.tick(b)
			if tk.Exit == 0 {
				break
			}
			if tk.Exit != 75 || time.Now().After(deadline) {
				m.fatalWithJournals("%s: warm-up tick exited %d", mode.name, tk.Exit)
			}
		}
		before, cpu0 := auth(), ctrlCPU()
		b.ResetTimer()
		for n := 0; n < b.N; n++ {
			tk := m.tick(b)
			if tk.Exit != 0 {
				m.fatalWithJournals("%s: converged tick exited %d", mode.name, tk.Exit)
			}
			results[i].walls = append(results[i].walls, tk.End.Sub(tk.Start))
		}
		b.StopTimer()
		results[i].cpu = ctrlCPU() - cpu0
		results[i].auths = auth() - before
	}
	m.box.SetBin(thisBin)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	table := "\n| transport | tick wall (median) | controller + router CPU per converged tick | authentications per tick |\n|---|---|---|---|\n"
	for i, mode := range modes {
		r := results[i]
		cpuPerTick := ms(r.cpu) / float64(b.N)
		authsPerTick := float64(r.auths) / float64(b.N)
		b.ReportMetric(ms(median(r.walls)), mode.name+"-ms/tick")
		b.ReportMetric(cpuPerTick, mode.name+"-ctrl-cpu-ms/tick")
		b.ReportMetric(authsPerTick, mode.name+"-auths/tick")
		table += fmt.Sprintf("| %s | %.0f ms | %.1f ms | %.2f |\n", mode.name, ms(median(r.walls)), cpuPerTick, authsPerTick)
	}
	b.Logf("%d converged ticks each, load %s%s", b.N, loadAvg(), table)
}

// processCPU is a process's user + system CPU (all its threads), from /proc/PID/stat.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: the fields that follow start after its ')'.
	fields := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(fields[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, fields[11], fields[12])
	}
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clkTck, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// loadAvg is the machine's load (1, 5, 15 min) for the figures' context.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
