//go:build integration

package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// timedDocker writes a docker_bin wrapper that appends one line per call to log: start and end
// (ns since the epoch) and the call's arguments (never a secret: the agent puts none in argv).
func timedDocker(t testing.TB, dir string) (bin, log string) {
	bin = filepath.Join(dir, "timed-docker")
	log = filepath.Join(dir, "docker-times")
	script := fmt.Sprintf(`#!/bin/bash
start=$(date +%%s%%N)
docker "$@"
rc=$?
echo "$start $(date +%%s%%N) $*" >> %q
exit $rc
`, log)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

// dockerCall is one line of the wrapper's log.
type dockerCall struct {
	start, end int64 // ns
	args       []string
}

func (c dockerCall) took() time.Duration { return time.Duration(c.end - c.start) }

// split is one apply's docker time: every call's wall time, and the health wait — from the end
// of `compose up` to the end of the last `compose ps` — minus the `ps` calls inside it, which
// is the agent sleeping between looks (compose.DefaultPollInterval), i.e. waiting on the
// containers' healthchecks, not working.
type split struct {
	docker, healthWait, healthSleep time.Duration
	calls                           int
}

func readCalls(log string) (split, error) {
	calls, err := readLog(log)
	if err != nil {
		return split{}, err
	}
	var s split
	s.calls = len(calls)
	up := -1
	for i, c := range calls {
		s.docker += c.took()
		if slices.Contains(c.args, "compose") && slices.Contains(c.args, "up") {
			up = i
		}
	}
	if up < 0 {
		return s, fmt.Errorf("no compose up among %d docker calls", len(calls))
	}
	last := -1
	var inside time.Duration
	for i := up + 1; i < len(calls); i++ {
		if slices.Contains(calls[i].args, "compose") && slices.Contains(calls[i].args, "ps") {
			last = i
		}
	}
	if last < 0 {
		return s, fmt.Errorf("no compose ps after compose up")
	}
	for i := up + 1; i <= last; i++ {
		inside += calls[i].took()
	}
	s.healthWait = time.Duration(calls[last].end - calls[up].end)
	s.healthSleep = s.healthWait - inside
	return s, nil
}

// readLog reads the wrapper's log and clears it for the next iteration.
func readLog(log string) ([]dockerCall, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(log); err != nil {
		return nil, err
	}
	var calls []dockerCall
	for i, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("docker-times line %d: %q", i+1, line)
		}
		start, err1 := strconv.ParseInt(f[0], 10, 64)
		end, err2 := strconv.ParseInt(f[1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("docker-times line %d: %q", i+1, line)
		}
		calls = append(calls, dockerCall{start, end, f[2:]})
	}
	return calls, nil
}

// overheadTargetMs is the figure: the agent's own work in a full apply.
const overheadTargetMs = 100

// BenchmarkApplyRealParts applies a new sha of a 2-service bundle whose images are already
// pulled (pull: missing) — a full apply, health wait included: both services keep their 1 s
// healthchecks — through the real binary, engine, compose plugin and OpenBao. Figures:
// agent-overhead-ms (the wall time minus the docker calls minus the agent's sleeps while it
// waits for the healthchecks; target < 100), compose-ms (the docker calls), health-wait-ms
// (from the end of `compose up` to the `compose ps` that saw every service healthy) and
// apply-wall-ms.
func BenchmarkApplyRealParts(b *testing.B) {
	w := newWorld(b)
	bx := w.newBox(b, "env-it-bench", "")
	bin, log := timedDocker(b, bx.dir)
	raw, _ := os.ReadFile(bx.cfg)
	os.WriteFile(bx.cfg, append(raw, []byte("docker_bin: "+bin+"\n")...), 0o640)
	// First apply pulls the images and leases; not measured.
	w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, pull: "missing"}))
	bx.expect(0)
	if _, err := readCalls(log); err != nil {
		b.Fatal(err)
	}

	var wall, dockerTime, healthWait, healthSleep time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, pull: "missing", extraEnvVar: fmt.Sprintf("ITER=%d\n", i)}))
		start := time.Now()
		bx.expect(0)
		wall += time.Since(start)
		s, err := readCalls(log)
		if err != nil {
			b.Fatal(err)
		}
		if r := bx.report(); r.Result != "applied" {
			b.Fatalf("iteration %d: report %+v", i, r)
		}
		dockerTime += s.docker
		healthWait += s.healthWait
		healthSleep += s.healthSleep
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / 1000 }
	overhead := ms(wall - dockerTime - healthSleep)
	b.ReportMetric(overhead, "agent-overhead-ms")
	b.ReportMetric(ms(dockerTime), "compose-ms")
	b.ReportMetric(ms(healthWait), "health-wait-ms")
	b.ReportMetric(ms(wall), "apply-wall-ms")
	if overhead > overheadTargetMs {
		b.Logf("agent-overhead-ms %.1f is ABOVE the %d ms target (apply wall %.0f ms, docker calls %.0f ms, health-wait sleeps %.0f ms)",
			overhead, overheadTargetMs, ms(wall), ms(dockerTime), ms(healthSleep))
	} else {
		b.Logf("agent-overhead-ms %.1f is within the %d ms target", overhead, overheadTargetMs)
	}
}

// TestSplitOfDockerCalls: the benchmark's arithmetic on a known log — the health wait runs from
// the end of `up` to the end of the last `ps`, and only the gaps between calls in it are sleep.
func TestSplitOfDockerCalls(t *testing.T) {
	log := filepath.Join(t.TempDir(), "docker-times")
	const ms = int64(time.Millisecond)
	lines := []string{
		fmt.Sprintf("%d %d info --format x", 0*ms, 50*ms),
		fmt.Sprintf("%d %d compose -p p -f f up -d --remove-orphans", 100*ms, 400*ms),
		fmt.Sprintf("%d %d compose -p p -f f ps -a --format json", 410*ms, 450*ms),
		fmt.Sprintf("%d %d compose -p p -f f ps -a --format json", 2450*ms, 2500*ms),
	}
	os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	s, err := readCalls(log)
	if err != nil {
		t.Fatal(err)
	}
	want := split{docker: 440 * time.Millisecond, healthWait: 2100 * time.Millisecond, healthSleep: 2010 * time.Millisecond, calls: 4}
	if s != want {
		t.Errorf("split = %+v, want %+v", s, want)
	}
	if _, err := os.Stat(log); !os.IsNotExist(err) {
		t.Error("the log was not cleared for the next iteration")
	}
	os.WriteFile(log, []byte(lines[0]+"\n"), 0o600)
	if _, err := readCalls(log); err == nil || !strings.Contains(err.Error(), "no compose up") {
		t.Errorf("a log without up: %v", err)
	}
}
