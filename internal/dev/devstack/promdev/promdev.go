// Package promdev runs the Prometheus side of the dev stack as real processes on loopback:
// Debian's node_exporter reading agents' textfiles, `fleetctl exporter` reading the stack's
// fleet, and a Prometheus server scraping both and evaluating the shipped alert rules. The demo
// and the integration tests use it; nothing here is a fake.
package promdev

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
)

// Where Debian's packages put the binaries (scripts/prometheus-deps.sh installs them).
const (
	PrometheusBin   = "/usr/bin/prometheus"
	NodeExporterBin = "/usr/bin/prometheus-node-exporter"
)

// Server is one process serving HTTP on loopback.
type Server struct {
	*process.Process
	// Addr is host:port.
	Addr string
}

// Scrape reads the /metrics page served at addr (host:port), whatever its status.
func Scrape(addr string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// start runs a server on a free loopback port, retrying when another process took the port
// between FreePort and the bind. args receives the port's host:port.
func start(ctx context.Context, name, logPath, bin, readyPath string, args func(addr string) []string) (*Server, error) {
	var lastErr error
	for range 3 {
		port, err := process.FreePort()
		if err != nil {
			return nil, err
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		p, err := process.Start(name, logPath, nil, nil, bin, args(addr)...)
		if err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err = p.WaitReady(rctx, func(ctx context.Context) (bool, error) {
			code, err := process.HTTPStatus(ctx, "http://"+addr+readyPath)
			return err == nil && code == http.StatusOK, err
		})
		cancel()
		if err == nil {
			return &Server{Process: p, Addr: addr}, nil
		}
		lastErr = fmt.Errorf("%w\n%s", err, p.LogTail())
		_ = p.Stop()
		if !errors.Is(err, process.ErrExited) {
			break
		}
	}
	return nil, fmt.Errorf("promdev: %s: %w", name, lastErr)
}

// StartNodeExporter runs node_exporter with only its textfile collector, reading dir.
func StartNodeExporter(ctx context.Context, bin, dir, logPath string) (*Server, error) {
	if bin == "" {
		bin = NodeExporterBin
	}
	return start(ctx, "node_exporter", logPath, bin, "/metrics", func(addr string) []string {
		return []string{"--web.listen-address=" + addr, "--collector.disable-defaults", "--collector.textfile",
			"--collector.textfile.directory=" + dir}
	})
}

// StartExporter runs `fleetctl --config CONFIG exporter` with extra flags (--stale, --refresh…).
func StartExporter(ctx context.Context, fleetctlBin, config, logPath string, flags ...string) (*Server, error) {
	return start(ctx, "fleetctl exporter", logPath, fleetctlBin, "/metrics", func(addr string) []string {
		return append([]string{"--config", config, "exporter", "--listen", addr}, flags...)
	})
}

// PrometheusOptions configure StartPrometheus.
type PrometheusOptions struct {
	Bin string // PrometheusBin when empty
	// Dir holds prometheus.yml and the TSDB.
	Dir string
	// Rules are rule files to evaluate (the shipped one).
	Rules []string
	// Jobs maps a scrape job name to its targets (host:port).
	Jobs map[string][]string
	// Interval is both the scrape and the rule evaluation interval.
	Interval time.Duration
}

// Prometheus is a running Prometheus server.
type Prometheus struct{ *Server }

// StartPrometheus writes its config and starts it.
func StartPrometheus(ctx context.Context, o PrometheusOptions) (*Prometheus, error) {
	if o.Bin == "" {
		o.Bin = PrometheusBin
	}
	// Prometheus reads a relative rule file against its config's directory, not ours.
	rules := make([]string, len(o.Rules))
	for i, r := range o.Rules {
		abs, err := filepath.Abs(r)
		if err != nil {
			return nil, fmt.Errorf("promdev: %w", err)
		}
		rules[i] = abs
	}
	o.Rules = rules
	iv := model(o.Interval)
	cfg := map[string]any{
		"global":     map[string]any{"scrape_interval": iv, "evaluation_interval": iv},
		"rule_files": o.Rules,
	}
	var jobs []map[string]any
	for name, targets := range o.Jobs {
		jobs = append(jobs, map[string]any{"job_name": name, "static_configs": []map[string]any{{"targets": targets}}})
	}
	cfg["scrape_configs"] = jobs
	raw, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, "prometheus.yml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return nil, fmt.Errorf("promdev: %w", err)
	}
	s, err := start(ctx, "prometheus", filepath.Join(o.Dir, "prometheus.log"), o.Bin, "/-/ready", func(addr string) []string {
		return []string{"--config.file=" + path, "--storage.tsdb.path=" + filepath.Join(o.Dir, "data"),
			"--web.listen-address=" + addr}
	})
	if err != nil {
		return nil, err
	}
	p := &Prometheus{s}
	if n, err := p.ruleCount(ctx); err != nil || n == 0 && len(o.Rules) > 0 {
		_ = p.Stop()
		return nil, fmt.Errorf("promdev: prometheus loaded %d rules from %v (%v):\n%s", n, o.Rules, err, p.LogTail())
	}
	return p, nil
}

// get decodes the data of a GET on the HTTP API.
func (p *Prometheus) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("promdev: %s: %w", path, err)
	}
	defer resp.Body.Close()
	body := struct {
		Status string `json:"status"`
		Data   any    `json:"data"`
	}{Data: data}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		return fmt.Errorf("promdev: %s: status %d %q: %v", path, resp.StatusCode, body.Status, err)
	}
	return nil
}

// ruleCount is how many rules Prometheus has loaded.
func (p *Prometheus) ruleCount(ctx context.Context) (int, error) {
	var data struct {
		Groups []struct {
			Rules []json.RawMessage `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", &data); err != nil {
		return 0, err
	}
	n := 0
	for _, g := range data.Groups {
		n += len(g.Rules)
	}
	return n, nil
}

// model writes a duration the way Prometheus' config reads it (whole seconds at least).
func model(d time.Duration) string {
	return strconv.Itoa(max(int(d/time.Second), 1)) + "s"
}

// Alert is one alert as GET /api/v1/alerts reports it.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// Alerts lists the pending and firing alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &data); err != nil {
		return nil, err
	}
	return data.Alerts, nil
}

// WaitFiring polls the alerts every second until one named name fires with every label in
// match, and returns it.
func (p *Prometheus) WaitFiring(ctx context.Context, name string, match map[string]string) (Alert, error) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var seen []string
	var lastErr error
	for {
		alerts, err := p.Alerts(ctx)
		lastErr = err
		if err == nil {
			seen = seen[:0]
			for _, a := range alerts {
				seen = append(seen, a.Labels["alertname"]+"/"+a.Labels["env"]+"/"+a.State)
				if a.Labels["alertname"] != name || a.State != "firing" {
					continue
				}
				ok := true
				for k, v := range match {
					ok = ok && a.Labels[k] == v
				}
				if ok {
					return a, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return Alert{}, fmt.Errorf("promdev: %s %v did not fire (alerts: %s; last error: %v): %w", name, match, strings.Join(seen, ", "), lastErr, ctx.Err())
		case <-tick.C:
		}
	}
}
