package demo

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/promdev"
)

// monitoring is the demo's Prometheus side: `fleetctl exporter` over the demo's fleet and, when
// Debian's prometheus is installed, a Prometheus server evaluating the shipped rules.
type monitoring struct {
	dir      string
	exporter *promdev.Server
	prom     *promdev.Prometheus // nil: no Prometheus (why says so)
	why      string
}

func startMonitoring(ctx context.Context, w *devstack.World, o Options, stale time.Duration) (m *monitoring, err error) {
	m = &monitoring{dir: filepath.Join(o.Dir, "monitoring")}
	defer func() {
		if err != nil {
			m.stop()
		}
	}()
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if m.exporter, err = promdev.StartExporter(ctx, w.Fleetctl.Bin, w.Stack.FleetctlConfig(), filepath.Join(m.dir, "exporter.log"),
		"--stale", stale.String(), "--refresh", "1s"); err != nil {
		return nil, err
	}
	if err := w.Stack.AddPid(m.exporter.Pid()); err != nil {
		return nil, err
	}
	bin := o.PrometheusBin
	if bin == "" {
		bin = promdev.PrometheusBin
	}
	if _, serr := os.Stat(bin); serr != nil {
		m.why = "no Prometheus here (" + bin + "; `make prometheus-deps` installs Debian's): no alert is evaluated, the rules still ship in the package"
		return m, nil
	}
	if _, serr := os.Stat(o.RulesFile); o.RulesFile == "" || serr != nil {
		m.why = "no alert rules file given (--rules): no alert is evaluated"
		return m, nil
	}
	promDir := filepath.Join(m.dir, "prometheus")
	if err := os.MkdirAll(promDir, 0o700); err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	if m.prom, err = promdev.StartPrometheus(ctx, promdev.PrometheusOptions{
		Bin: bin, Dir: promDir, Rules: []string{o.RulesFile},
		Jobs: map[string][]string{"monky-fleet": {m.exporter.Addr}}, Interval: time.Second,
	}); err != nil {
		return nil, err
	}
	if err := w.Stack.AddPid(m.prom.Pid()); err != nil {
		return nil, err
	}
	return m, nil
}

// envCounts are the exporter's monky_fleet_envs lines that are not zero, once it has read the
// fleet (it reads at start, and its /metrics answers before that reading is done).
func (m *monitoring) envCounts(ctx context.Context) []string {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for range 40 {
		if out := m.scrapeEnvs(ctx); len(out) > 0 {
			return out
		}
		select {
		case <-ctx.Done():
			return []string{ctx.Err().Error()}
		case <-tick.C:
		}
	}
	return []string{"(the exporter has no view yet)"}
}

func (m *monitoring) scrapeEnvs(ctx context.Context) []string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.exporter.Addr+"/metrics", nil)
	if err != nil {
		return []string{err.Error()}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "monky_fleet_envs{") && !strings.HasSuffix(l, " 0") {
			out = append(out, l)
		}
	}
	return out
}

// stop ends both servers and removes their files.
func (m *monitoring) stop() {
	if m.prom != nil {
		_ = m.prom.Stop()
	}
	if m.exporter != nil {
		_ = m.exporter.Stop()
	}
	_ = os.RemoveAll(m.dir)
}
