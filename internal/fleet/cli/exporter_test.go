package cli

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/promdev"
)

// scrape reads the /metrics page served at addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	page, err := promdev.Scrape(addr)
	if err != nil {
		t.Fatal(err)
	}
	return page
}

// The exporter serves the demo fleet's series on the listener it was given, reads tenancy once
// however often it is scraped, keeps the secrets it read out of everything it serves, and
// returns 0 when its context ends (SIGTERM and Ctrl-C end it through Main's context).
func TestExporterServesTheFleet(t *testing.T) {
	h := newHarness(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w := h.deps()
	var asked string
	w.Listen = func(network, addr string) (net.Listener, error) {
		asked = addr
		return ln, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"exporter", "--refresh", "1h"}, w) }()

	url := "http://" + ln.Addr().String() + "/metrics"
	var page string
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(page, "monky_fleet_exporter_views_total 1") {
		if time.Now().After(deadline) {
			t.Fatalf("no view after 30s; last page:\n%s\nstderr: %s", page, h.stderr.String())
		}
		page = scrape(t, ln.Addr().String())
	}
	if asked != DefaultExporterListen {
		t.Errorf("listened on %q, want the default %s", asked, DefaultExporterListen)
	}
	lists := func() int {
		n := 0
		for _, r := range h.f.a.Requests() {
			if r.Path == "/v1/admin/agents" {
				n++
			}
		}
		return n
	}
	before := lists()
	for range 10 {
		page = scrape(t, ln.Addr().String())
	}
	if lists() != before {
		t.Errorf("10 scrapes made %d more listings of tenancy, want none", lists()-before)
	}
	for _, want := range []string{
		`monky_fleet_env_verdict{env="env-dev-01",site="cbs",verdict="SILENT"} 1`,
		`monky_fleet_exporter_source_up{source="tenancy"} 1`,
		`monky_fleet_exporter_source_up{source="ziti controller"} 1`,
		`monky_fleet_exporter_view_fresh 1`,
	} {
		if !strings.Contains(page, want+"\n") {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, secret := range []string{zitiPassword, adminToken} {
		if strings.Contains(page, secret) || strings.Contains(h.stderr.String(), secret) {
			t.Errorf("secret %q served or logged", secret)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 || !strings.Contains(h.stderr.String(), "fleetctl exporter: stopped") {
			t.Errorf("exit %d, stderr %q", code, h.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the exporter did not stop with its context")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("still serving after stopping")
	}
}

// The listen address comes from --listen, FLEETCTL_EXPORTER_LISTEN or exporter.listen, in
// that order; a port already taken is an error, not a silent exit.
func TestExporterListenSettings(t *testing.T) {
	h := newHarness(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	h.env["FLEETCTL_EXPORTER_LISTEN"] = taken.Addr().String()
	if code := h.run(context.Background(), "exporter"); code != 1 || !strings.Contains(h.stderr.String(), "address already in use") {
		t.Errorf("a taken port: exit %d, stderr %q", code, h.stderr.String())
	}
	if code := h.run(context.Background(), "exporter", "--listen", "nowhere"); code != 2 || !strings.Contains(h.stderr.String(), `exporter.listen "nowhere" (from flag --listen)`) {
		t.Errorf("a bad flag beats the env: exit %d, stderr %q", code, h.stderr.String())
	}
	h.env["FLEETCTL_EXPORTER_LISTEN"] = "127.0.0.1:99999"
	if code := h.run(context.Background(), "exporter"); code != 2 || !strings.Contains(h.stderr.String(), "env FLEETCTL_EXPORTER_LISTEN") {
		t.Errorf("a bad port from the env: exit %d, stderr %q", code, h.stderr.String())
	}
}

// A source that dies: the next reading fails, and source_up says so for that source — the
// controller is still read fine — while the last good view stays served (view_fresh 0).
func TestExporterSourceUpWhenASourceDies(t *testing.T) {
	for _, tc := range []struct {
		dead, alive string
		kill        func(f *fakes)
	}{
		{sourceTenancy, sourceZiti, func(f *fakes) { f.a.Close() }},
		{sourceZiti, sourceTenancy, func(f *fakes) { f.z.Close() }},
		// Both die: each is down, not only the one whose failure came first.
		{sourceZiti + "," + sourceTenancy, "", func(f *fakes) { f.z.Close(); f.a.Close() }},
	} {
		t.Run(tc.dead, func(t *testing.T) {
			h := newHarness(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			w := h.deps()
			w.Listen = func(string, string) (net.Listener, error) { return ln, nil }
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan int, 1)
			go func() { done <- run(ctx, []string{"exporter", "--refresh", "1s", "--timeout", "20s"}, w) }()
			waitFor := func(want ...string) string {
				t.Helper()
				var page string
				deadline := time.Now().Add(60 * time.Second)
				for {
					page = scrape(t, ln.Addr().String())
					ok := true
					for _, s := range want {
						ok = ok && strings.Contains(page, s+"\n")
					}
					if ok {
						return page
					}
					if time.Now().After(deadline) {
						t.Fatalf("after 60s the page lacks %q:\n%s\nstderr: %s", want, page, h.stderr.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			up := func(v string) []string {
				var out []string
				for _, d := range strings.Split(tc.dead, ",") {
					out = append(out, `monky_fleet_exporter_source_up{source="`+d+`"} `+v)
				}
				return out
			}
			waitFor(append(up("1"), `monky_fleet_exporter_view_fresh 1`)...)
			tc.kill(h.f)
			// The first reading that fails already tells the truth of every source.
			page := waitFor(`monky_fleet_exporter_view_fresh 0`)
			for _, want := range up("0") {
				if !strings.Contains(page, want+"\n") {
					t.Errorf("the first failed reading does not say %s:\n%s", want, page)
				}
			}
			if tc.alive != "" && !strings.Contains(page, `monky_fleet_exporter_source_up{source="`+tc.alive+`"} 1`+"\n") {
				t.Errorf("the source that still answers is not up:\n%s", page)
			}
			if !strings.Contains(page, `monky_fleet_env_verdict{env="env-dev-01",site="cbs",verdict="SILENT"} 1`) {
				t.Errorf("the last good view is no longer served")
			}
			cancel()
			<-done
		})
	}
}
