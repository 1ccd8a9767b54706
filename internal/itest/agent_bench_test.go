//go:build integration

package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// timedDocker writes a docker_bin wrapper that appends each call's wall time (ns) to log.
func timedDocker(t testing.TB, dir string) (bin, log string) {
	bin = filepath.Join(dir, "timed-docker")
	log = filepath.Join(dir, "docker-times")
	script := fmt.Sprintf(`#!/bin/bash
start=$(date +%%s%%N)
docker "$@"
rc=$?
echo $(( $(date +%%s%%N) - start )) >> %q
exit $rc
`, log)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func sumAndClear(log string) time.Duration {
	b, _ := os.ReadFile(log)
	os.Remove(log)
	var total time.Duration
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.ParseInt(f, 10, 64)
		total += time.Duration(n)
	}
	return total
}

// BenchmarkApplyRealParts applies a new sha of a 2-service bundle whose images are already
// pulled (pull: missing, no healthcheck, so no polling), through the real binary, engine, compose
// plugin and OpenBao. Figures: agent-overhead-ms (everything but the docker CLI; target < 100)
// and compose-ms (the docker calls).
func BenchmarkApplyRealParts(b *testing.B) {
	w := newWorld(b)
	bx := w.newBox(b, "env-it-bench", "")
	bin, log := timedDocker(b, bx.dir)
	raw, _ := os.ReadFile(bx.cfg)
	os.WriteFile(bx.cfg, append(raw, []byte("docker_bin: "+bin+"\n")...), 0o640)
	// First apply pulls the images and leases; not measured.
	w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, noHealth: true, pull: "missing"}))
	bx.expect(0)
	sumAndClear(log)

	var wall, dockerTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, noHealth: true, pull: "missing", extraEnvVar: fmt.Sprintf("ITER=%d\n", i)}))
		start := time.Now()
		bx.expect(0)
		wall += time.Since(start)
		dockerTime += sumAndClear(log)
	}
	n := float64(b.N)
	b.ReportMetric(float64((wall-dockerTime).Microseconds())/n/1000, "agent-overhead-ms")
	b.ReportMetric(float64(dockerTime.Microseconds())/n/1000, "compose-ms")
	b.ReportMetric(float64(wall.Microseconds())/n/1000, "apply-wall-ms")
}
