package cli

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/promdev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/fleettest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
)

// Budgets of `fleetctl status -o json` over 10,000 envs with a controller and a tenancy that
// each take 50 ms per page.
const (
	benchEnvs      = 10_000
	benchLatency   = 50 * time.Millisecond
	benchPageSize  = 500 // tenancy's pages; the controller's are 500 too (its maximum)
	budgetWall     = 1500 * time.Millisecond
	budgetRSSBytes = 150 << 20
)

// BenchmarkStatusJSON10k runs the fleetctl binary (the test binary under that name, as the
// scripts do) against both fakes, through fleetctl-probe, so that wall time and peak RSS are
// those of the fleetctl process alone.
// ns/op is the default, concurrent paging; serial-ms/op is the same run with
// --ziti-concurrency 1.
//
// Tenancy's cursor chains its pages (20 × 50 ms), so it sets the floor of ~1 s whatever the
// controller does; the controller's pages after the first go out together. The figures show
// how much of the controller's 20 × 50 ms the concurrency hides behind tenancy's chain.
func BenchmarkStatusJSON10k(b *testing.B) {
	bin, f := benchFleet(b, "fleetctl-probe")
	f.z.Fail(zititest.OpList, zititest.Failure{Delay: benchLatency})
	f.z.Fail(zititest.OpAuthenticators, zititest.Failure{Delay: benchLatency})
	f.a.Fail(admintest.OpList, admintest.Failure{Delay: benchLatency})

	work := b.TempDir()
	if err := os.WriteFile(filepath.Join(work, "ziti-ca.pem"), f.z.CAPEM(), 0o644); err != nil {
		b.Fatal(err)
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work}
	for k, v := range f.env(work) {
		env = append(env, k+"="+v)
	}
	runOnce := func(extra ...string) (time.Duration, int64) {
		cmd := exec.Command(bin, append([]string{"status", "-o", "json"}, extra...)...)
		cmd.Env = env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("fleetctl %v: %v\n%s", extra, err, stderr.String())
		}
		if !bytes.Contains(stdout.Bytes(), []byte(`"OK": 10000`)) {
			b.Fatalf("not 10,000 OK envs:\n%.400s", stdout.String())
		}
		var wallNS, rssKB int64
		if _, err := fmt.Sscanf(lastLine(stderr.String()), "fleetctl-probe: wall_ns=%d maxrss_kb=%d", &wallNS, &rssKB); err != nil {
			b.Fatalf("probe report %q: %v", stderr.String(), err)
		}
		return time.Duration(wallNS), rssKB * 1024
	}

	runOnce() // the fakes' first answers warm their caches, not fleetctl's
	var serial, concurrent time.Duration
	var peak int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, rss := runOnce("--ziti-concurrency", "1")
		serial += w
		peak = max(peak, rss)
		b.StartTimer()
		w, rss = runOnce()
		concurrent += w
		peak = max(peak, rss)
	}
	b.StopTimer()
	perOp := concurrent / time.Duration(b.N)
	b.ReportMetric(float64(perOp.Milliseconds()), "concurrent-ms/op")
	b.ReportMetric(float64((serial / time.Duration(b.N)).Milliseconds()), "serial-ms/op")
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	// The figures are reported against their targets, not asserted: wall time on a shared
	// 2-core machine is a measurement, not a test.
	b.Logf("status over %d envs: %v (target %v), peak RSS %d MiB (target %d MiB)", benchEnvs, perOp, budgetWall, peak>>20, budgetRSSBytes>>20)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// benchFleet finds the binary TestMain installed under name and starts the fakes, seeded with
// benchEnvs envs and listed in pages of benchPageSize; they close when the run ends.
func benchFleet(b *testing.B, name string) (string, *fakes) {
	bin, err := exec.LookPath(name)
	if err != nil {
		b.Fatalf("%s is not on PATH (TestMain installs it): %v", name, err)
	}
	f, err := startFakes()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.close)
	fleettest.Seed(fleettest.Large(fleettest.Now, benchEnvs), f.z, f.a)
	f.a.SetPageSize(benchPageSize)
	return bin, f
}

// BenchmarkExporter10k runs `fleetctl exporter` (the test binary under that name) over the
// fakes seeded with 10,000 envs and scrapes it: ns/op is one scrape of /metrics, served from
// the cached view, over loopback HTTP (the whole body read); peak-rss-MiB is the exporter
// process's own high-water mark (VmHWM, read from /proc before it is stopped), after its first
// reading and every scrape.
func BenchmarkExporter10k(b *testing.B) {
	bin, f := benchFleet(b, "fleetctl")
	work := b.TempDir()
	if err := os.WriteFile(filepath.Join(work, "ziti-ca.pem"), f.z.CAPEM(), 0o644); err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "exporter", "--listen", addr, "--refresh", "1h")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + work}
	for k, v := range f.env(work) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	scrape := func() []byte {
		page, _ := promdev.Scrape(addr) // not up yet: an empty page
		return []byte(page)
	}
	deadline := time.Now().Add(2 * time.Minute)
	var first time.Duration
	start := time.Now()
	for !bytes.Contains(scrape(), []byte("monky_fleet_exporter_views_total 1\n")) {
		if time.Now().After(deadline) {
			b.Fatalf("no view of 10,000 envs after 2 minutes:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond) // polling a child process for readiness: it has no other way to say so
	}
	first = time.Since(start)
	page := scrape()
	if !bytes.Contains(page, []byte(`monky_fleet_envs{verdict="OK"} 10000`)) {
		b.Fatalf("not 10,000 OK envs:\n%.400s", page)
	}
	b.SetBytes(int64(len(page)))
	b.ResetTimer()
	for b.Loop() {
		if len(scrape()) != len(page) {
			b.Fatal("a scrape differs from the cached view")
		}
	}
	b.StopTimer()
	hwm, err := vmHWM(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(first.Milliseconds()), "first-view-ms")
	b.Logf("exporter over %d envs: %d series bytes, first view after %v, peak RSS %d MiB", benchEnvs, len(page), first, hwm>>20)
}

// vmHWM is a process's peak resident set, from /proc/<pid>/status.
func vmHWM(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}
