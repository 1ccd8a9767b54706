//go:build integration

package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/promdev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// TestAlertsFromARealPrometheus: the dev stack's fleet, two real agents ticking, one stopped on
// a host that stays on the mesh (the demo's SILENT box). Debian's node_exporter serves a box's
// textfile, `fleetctl exporter` serves the fleet, and a real Prometheus on loopback scrapes both
// and evaluates the shipped rules: MonkyAgentSilent fires for the stopped box, and for it alone.
//
// No image is deployed (the agents report, honestly, that they cannot pull): silence is about
// check-ins, and this test needs neither OpenBao's server nor the registry.
func TestAlertsFromARealPrometheus(t *testing.T) {
	itest.Require(t, itest.PartGo, itest.PartPrometheus, itest.PartNodeExporter)
	bins := build(t)
	root := itest.ModuleRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	const interval = 2 * time.Second
	w, err := devstack.NewWorld(ctx, devstack.WorldOptions{Dir: dir, AgentBin: bins.agent[oldVersion], FleetctlBin: bins.fleetctl, Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer ccancel()
		if err := w.Close(cctx); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	silent, ticking := "env-alert-01", "env-alert-02"
	var boxes []*devstack.Box
	for _, env := range []string{silent, ticking} {
		b, err := w.AddBox(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Deploy(env, "hello"); err != nil {
			t.Fatal(err)
		}
		boxes = append(boxes, b)
	}
	for _, b := range boxes {
		b.Start(ctx)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	if _, err := w.WaitReports(wctx, []string{silent, ticking}, nil); err != nil {
		t.Fatal(err)
	}
	wcancel()

	// node_exporter reads the ticking box's textfile.
	ne, err := promdev.StartNodeExporter(ctx, "", boxes[1].TextfileDir, filepath.Join(dir, "node-exporter.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer ne.Stop()
	page, err := promdev.Scrape(ne.Addr)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`monky_deployd_last_tick_timestamp_seconds{env="` + ticking + `"}`, `monky_deployd_info{applied_sha=`, "node_textfile_scrape_error 0"} {
		if !strings.Contains(page, want) {
			t.Errorf("node_exporter's /metrics lacks %s:\n%s", want, page)
		}
	}

	ex, err := promdev.StartExporter(ctx, bins.fleetctl, w.Stack.FleetctlConfig(), filepath.Join(dir, "exporter.log"),
		"--stale", (3 * interval).String(), "--refresh", "1s")
	if err != nil {
		t.Fatal(err)
	}
	exporterStopped := false
	defer func() {
		if !exporterStopped {
			ex.Stop()
		}
	}()
	prom, err := promdev.StartPrometheus(ctx, promdev.PrometheusOptions{
		Dir:      t.TempDir(),
		Rules:    []string{filepath.Join(root, "packaging", "prometheus", "monky-deployd.rules.yml")},
		Jobs:     map[string][]string{"monky-fleet": {ex.Addr}, "node": {ne.Addr}},
		Interval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prom.Stop()

	// The demo's breakage: the timer stops, the host stays on the mesh.
	w.Stack.SetOnline(silent, true)
	boxes[0].Stop()
	start := time.Now()
	fctx, fcancel := context.WithTimeout(ctx, 4*time.Minute)
	alert, err := prom.WaitFiring(fctx, "MonkyAgentSilent", map[string]string{"env": silent})
	fcancel()
	if err != nil {
		t.Fatalf("%v\nexporter log:\n%s", err, ex.LogTail())
	}
	t.Logf("MonkyAgentSilent fired %s after the box stopped: %s", time.Since(start).Round(time.Second), alert.Annotations["summary"])
	if want := silent + ": agent silent on a live host: fleetctl describe " + silent + " gives the next step from its last check-in (timer, last exit code, a running apply)"; alert.Annotations["summary"] != want {
		t.Errorf("summary %q, want %q", alert.Annotations["summary"], want)
	}
	alerts, err := prom.Alerts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if a.Labels["env"] == ticking && (a.Labels["alertname"] == "MonkyAgentSilent" || a.Labels["alertname"] == "MonkyDeploydTickStale") {
			t.Errorf("the ticking box raised %s", a.Labels["alertname"])
		}
		if a.Labels["alertname"] == "MonkyFleetExporterDown" {
			t.Errorf("the exporter was judged down: %+v", a)
		}
	}

	// SIGTERM stops the exporter cleanly.
	exporterStopped = true
	if err := ex.Stop(); err != nil {
		t.Errorf("stopping the exporter: %v", err)
	}
	if !strings.Contains(ex.LogTail(), "fleetctl exporter: stopped") {
		t.Errorf("the exporter did not say it stopped:\n%s", ex.LogTail())
	}
}
