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
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/gitbuild"
)

// Budgets of `fleetctl status -o json` over 10,000 envs with a controller and a tenancy that
// each take 50 ms per page (issue 24: 0.5 s; it was 1.5 s).
const (
	benchEnvs      = 10_000
	benchLatency   = 50 * time.Millisecond
	budgetWall     = 500 * time.Millisecond
	budgetRSSBytes = 150 << 20
)

// BenchmarkStatusJSON10k runs fleetctl against both fakes through fleetctl-probe, so that wall
// time and peak RSS are those of the fleetctl process alone, side by side with the fleetctl of
// the tree before issue 24 (gitbuild.Before, built from git history) in the same run: ns/op and
// after-ms/op are this tree's, before-ms/op the earlier one's. Both are built as make build
// builds them (gitbuild.BuildTree for this tree). The fake tenancy serves pages of
// up to 5,000 when asked (limit) and 500 when not, as FLEET-API says; the controller's pages are
// 500 (its maximum), the pages after the first fetched --ziti-concurrency at a time.
func BenchmarkStatusJSON10k(b *testing.B) {
	bin, f := benchFleet(b, "fleetctl-probe")
	f.z.Fail(zititest.OpList, zititest.Failure{Delay: benchLatency})
	f.z.Fail(zititest.OpAuthenticators, zititest.Failure{Delay: benchLatency})
	f.a.Fail(admintest.OpList, admintest.Failure{Delay: benchLatency})

	work := b.TempDir()
	if err := os.WriteFile(filepath.Join(work, "ziti-ca.pem"), f.z.CAPEM(), 0o644); err != nil {
		b.Fatal(err)
	}
	beforeDir := filepath.Join(work, "before")
	if err := os.Mkdir(beforeDir, 0o755); err != nil {
		b.Fatal(err)
	}
	gitbuild.Build(b, gitbuild.Rev(gitbuild.Before), "./cmd/fleetctl", filepath.Join(beforeDir, "fleetctl"))
	afterDir := filepath.Join(work, "after")
	if err := os.Mkdir(afterDir, 0o755); err != nil {
		b.Fatal(err)
	}
	gitbuild.BuildTree(b, "./cmd/fleetctl", filepath.Join(afterDir, "fleetctl"))
	env := []string{"HOME=" + work}
	for k, v := range f.env(work) {
		env = append(env, k+"="+v)
	}
	// runOnce runs the probe, which runs the first fleetctl on PATH: this tree's or the earlier
	// tree's.
	runOnce := func(path string) (wall, cpu time.Duration, rss int64) {
		cmd := exec.Command(bin, "status", "-o", "json")
		cmd.Env = append([]string{"PATH=" + path + os.Getenv("PATH")}, env...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			b.Fatalf("fleetctl (PATH %s…): %v\n%s", path, err, stderr.String())
		}
		if !bytes.Contains(stdout.Bytes(), []byte(`"OK": 10000`)) {
			b.Fatalf("not 10,000 OK envs:\n%.400s", stdout.String())
		}
		var wallNS, cpuNS, rssKB int64
		if _, err := fmt.Sscanf(lastLine(stderr.String()), "fleetctl-probe: wall_ns=%d cpu_ns=%d maxrss_kb=%d", &wallNS, &cpuNS, &rssKB); err != nil {
			b.Fatalf("probe report %q: %v", stderr.String(), err)
		}
		return time.Duration(wallNS), time.Duration(cpuNS), rssKB * 1024
	}

	runOnce(afterDir + ":") // the fakes' first answers warm their caches, not fleetctl's
	runOnce(beforeDir + ":")
	var before, after, cpuBefore, cpuAfter time.Duration
	var peak, peakBefore int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		w, c, rss := runOnce(beforeDir + ":")
		before += w
		cpuBefore += c
		peakBefore = max(peakBefore, rss)
		b.StartTimer()
		w, c, rss = runOnce(afterDir + ":")
		after += w
		cpuAfter += c
		peak = max(peak, rss)
	}
	b.StopTimer()
	perOp := after / time.Duration(b.N)
	b.ReportMetric(float64(perOp.Milliseconds()), "after-ms/op")
	b.ReportMetric(float64((before / time.Duration(b.N)).Milliseconds()), "before-ms/op")
	b.ReportMetric(float64((cpuAfter / time.Duration(b.N)).Milliseconds()), "after-cpu-ms/op")
	b.ReportMetric(float64((cpuBefore / time.Duration(b.N)).Milliseconds()), "before-cpu-ms/op")
	b.ReportMetric(float64(peak)/(1<<20), "after-peak-rss-MiB")
	b.ReportMetric(float64(peakBefore)/(1<<20), "before-peak-rss-MiB")
	// CPU (user + system) is reported beside the wall time: on a loaded 2-core machine the wall
	// time is mostly the run queue, and CPU plus the pages' latency is what an idle one waits.
	// The figures are reported against their targets, not asserted: wall time on a shared
	// 2-core machine is a measurement, not a test.
	b.Logf("status over %d envs: %v (target %v; before %v), peak RSS %d MiB (target %d MiB)", benchEnvs, perOp, budgetWall,
		before/time.Duration(b.N), peak>>20, budgetRSSBytes>>20)
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
	f.a.SetPageSize(protocol.MaxAgentsPageLimit) // pages as large as asked; 500 when not asked
	return bin, f
}

// BenchmarkExporter10k runs `fleetctl exporter` (this tree's, built as make build builds it) over the
// fakes seeded with 10,000 envs and scrapes it: ns/op is one scrape of /metrics, served from
// the cached view, over loopback HTTP (the whole body read); after-peak-rss-MiB is the exporter
// process's own high-water mark (VmHWM, read from /proc before it is stopped), after its first
// reading and every scrape (issue 24's target: 64 MiB). The exporter of the tree before issue 24
// (gitbuild.Before) runs first in the same run, its first view and five scrapes, for
// before-peak-rss-MiB and before-first-view-ms.
func BenchmarkExporter10k(b *testing.B) {
	_, f := benchFleet(b, "fleetctl")
	work := b.TempDir()
	if err := os.WriteFile(filepath.Join(work, "ziti-ca.pem"), f.z.CAPEM(), 0o644); err != nil {
		b.Fatal(err)
	}
	beforeBin := filepath.Join(work, "fleetctl-before")
	gitbuild.Build(b, gitbuild.Rev(gitbuild.Before), "./cmd/fleetctl", beforeBin)
	bin := filepath.Join(work, "fleetctl-after")
	gitbuild.BuildTree(b, "./cmd/fleetctl", bin)

	// start runs an exporter and waits for its first view; stop ends it and gives its VmHWM.
	start := func(bin string) (scrape func() []byte, first time.Duration, stop func() int64) {
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
		stop = func() int64 {
			hwm, err := vmHWM(cmd.Process.Pid)
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if err != nil {
				b.Fatal(err)
			}
			return hwm
		}
		scrape = func() []byte {
			page, _ := promdev.Scrape(addr) // not up yet: an empty page
			return []byte(page)
		}
		deadline := time.Now().Add(2 * time.Minute)
		t0 := time.Now()
		for !bytes.Contains(scrape(), []byte("monky_fleet_exporter_views_total 1\n")) {
			if time.Now().After(deadline) {
				stop()
				b.Fatalf("%s: no view of 10,000 envs after 2 minutes:\n%s", bin, stderr.String())
			}
			time.Sleep(50 * time.Millisecond) // polling a child process for readiness: it has no other way to say so
		}
		first = time.Since(t0)
		if page := scrape(); !bytes.Contains(page, []byte(`monky_fleet_envs{verdict="OK"} 10000`)) {
			stop()
			b.Fatalf("%s: not 10,000 OK envs:\n%.400s", bin, page)
		}
		return scrape, first, stop
	}

	scrapeBefore, firstBefore, stopBefore := start(beforeBin)
	for range 5 {
		scrapeBefore()
	}
	hwmBefore := stopBefore()

	scrape, first, stop := start(bin)
	page := scrape()
	b.SetBytes(int64(len(page)))
	b.ResetTimer()
	for b.Loop() {
		if len(scrape()) != len(page) {
			b.Fatal("a scrape differs from the cached view")
		}
	}
	b.StopTimer()
	hwm := stop()
	b.ReportMetric(float64(hwm)/(1<<20), "after-peak-rss-MiB")
	b.ReportMetric(float64(first.Milliseconds()), "after-first-view-ms")
	b.ReportMetric(float64(hwmBefore)/(1<<20), "before-peak-rss-MiB")
	b.ReportMetric(float64(firstBefore.Milliseconds()), "before-first-view-ms")
	b.Logf("exporter over %d envs: %d series bytes, first view after %v (before %v), peak RSS %d MiB (before %d MiB)",
		benchEnvs, len(page), first, firstBefore, hwm>>20, hwmBefore>>20)
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
