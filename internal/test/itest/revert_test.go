//go:build integration

package itest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// endBackoff makes the box's failing sha due now, as if its backoff had run out: the real
// binary reads the wall clock, and the test will not wait 2 minutes for it.
func (b *box) endBackoff() {
	b.t.Helper()
	path := filepath.Join(b.dir, "state", "state.json")
	st := b.state()
	if st.Backoff == nil {
		b.t.Fatal("no backoff to end")
	}
	st.Backoff.NextAttemptAt = time.Now().Add(-time.Second).UTC()
	if err := state.Save(path, st); err != nil {
		b.t.Fatal(err)
	}
}

// v1 healthy → v2 never healthy → v1's containers are back (same image, new containers) and
// healthy, the report says failed + reverted_to; a tick within the backoff touches nothing;
// after the backoff, one more try.
func TestRevertAgainstRealEngine(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-i12-revert", "")
	sha1 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
	b.expect(0)
	v1 := b.containers()
	if v1["web"].Health != "healthy" || v1["worker"].Health != "healthy" {
		t.Fatalf("v1 = %+v", v1)
	}

	sha2 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v2", webHealthy: false, registry: true,
		agent: map[string]any{"healthy_timeout_s": 8}}))
	b.expect(1)
	r := b.report()
	if r.Result != "failed" || r.Sha != sha2 || r.RevertedTo != sha1 || r.RevertHealthy == nil || !*r.RevertHealthy {
		t.Fatalf("report = %+v, want failed %.12s reverted to %.12s (healthy)\n%s", r, sha2, sha1, b.last)
	}
	if !strings.Contains(r.Detail, "not healthy after 8s") || !strings.Contains(r.LogTail, "healthz: unhealthy") {
		t.Errorf("report detail %q, log tail %q: want v2's failure and logs", r.Detail, r.LogTail)
	}
	back := b.containers()
	for svc, before := range v1 {
		c := back[svc]
		if c.Image != w.images["v1"].Ref || c.State != "running" || c.Health != "healthy" {
			t.Errorf("%s after the revert = %v, want v1's image running healthy", svc, c)
		}
		if c.ID == before.ID {
			t.Errorf("%s is v1's old container %.12s: v2 replaced it, the revert must have made a new one", svc, c.ID)
		}
	}
	if v, _ := AppGet(t, back["web"].Name, "/version"); strings.TrimSpace(v) != w.images["v1"].Version {
		t.Errorf("web runs %q after the revert", v)
	}
	if got, err := AppGet(t, back["web"].Name, "/env?name=APP_SECRET"); err != nil || got != trickySecret {
		t.Errorf("the reverted web sees APP_SECRET %q (%v): v1's own .env was not used", got, err)
	}
	cur, _ := os.Readlink(filepath.Join(b.dir, "state", b.env, "current"))
	if cur != filepath.Join("releases", sha1) {
		t.Errorf("current → %s, want releases/%s", cur, sha1)
	}
	st := b.state()
	if st.AppliedSha != sha1 || st.Backoff == nil || st.Backoff.Sha != sha2 || st.Backoff.Attempts != 1 || st.Backoff.RevertPending {
		t.Fatalf("state: applied %.12s, backoff %+v", st.AppliedSha, st.Backoff)
	}
	if left := time.Until(st.Backoff.NextAttemptAt); left < time.Minute || left > 2*time.Minute {
		t.Errorf("next try in %s, want about 2m", left)
	}
	if !strings.Contains(b.last, "reverted to "+sha1[:12]+": healthy") {
		t.Errorf("the journal does not say the revert came up healthy:\n%s", b.last)
	}

	// Within the backoff: a heartbeat of v1, the containers untouched.
	fetches := len(w.ten.BundleFetches(b.env))
	b.expect(1)
	if !strings.Contains(b.last, "backoff: "+sha2[:12]+" failed 1×, reverted to "+sha1[:12]+" (healthy)") {
		t.Errorf("the journal does not say it backs off:\n%s", b.last)
	}
	if r := b.report(); r.Result != "healthy" || r.Sha != sha1 || !strings.Contains(r.Detail, "next try at") {
		t.Errorf("heartbeat in the backoff = %+v", r)
	}
	if n := len(w.ten.BundleFetches(b.env)); n != fetches {
		t.Errorf("the tick in the backoff fetched the bundle")
	}
	same := b.containers()
	for svc, c := range back {
		if s := same[svc]; s.ID != c.ID || s.StartedAt != c.StartedAt {
			t.Errorf("%s was touched in the backoff: %v → %v", svc, c, s)
		}
	}

	// After the backoff: one more try, reverted again, the next wait doubled.
	b.endBackoff()
	b.expect(1)
	if r := b.report(); r.Result != "failed" || r.Sha != sha2 || r.RevertedTo != sha1 {
		t.Errorf("report of the second try = %+v", r)
	}
	if !strings.Contains(b.last, "backoff over: trying "+sha2[:12]+" again (attempt 2)") {
		t.Errorf("the journal lacks the retry:\n%s", b.last)
	}
	st = b.state()
	if st.Backoff == nil || st.Backoff.Attempts != 2 || time.Until(st.Backoff.NextAttemptAt) < 3*time.Minute {
		t.Errorf("backoff after the second try = %+v", st.Backoff)
	}
	if c := b.containers()["web"]; c.Image != w.images["v1"].Ref || c.Health != "healthy" {
		t.Errorf("web after the second revert = %v", c)
	}
	if strings.Contains(b.stderr, trickySecret) {
		t.Error("a secret value is in the journal")
	}
}

// revertSplit is one failed apply's revert, from the docker wrapper's log: from the end of the
// `compose ps` that declared v2 unhealthy (the last look before the second `compose up`) to the
// end of the last `compose ps` (the second look that confirms v1 healthy, one poll after the
// first); the docker calls in that window; and the agent's sleeps between looks.
type revertSplit struct {
	window, docker, healthSleep time.Duration
}

func readRevert(log string) (revertSplit, error) {
	calls, err := readLog(log)
	if err != nil {
		return revertSplit{}, err
	}
	is := func(c dockerCall, verb string) bool {
		return slices.Contains(c.args, "compose") && slices.Contains(c.args, verb)
	}
	var ups []int
	for i, c := range calls {
		if is(c, "up") {
			ups = append(ups, i)
		}
	}
	if len(ups) != 2 {
		return revertSplit{}, fmt.Errorf("%d compose up calls, want 2 (v2, then v1 back)", len(ups))
	}
	declared, last := -1, -1
	for i := ups[0] + 1; i < ups[1]; i++ {
		if is(calls[i], "ps") {
			declared = i
		}
	}
	for i := ups[1] + 1; i < len(calls); i++ {
		if is(calls[i], "ps") {
			last = i
		}
	}
	if declared < 0 || last < 0 {
		return revertSplit{}, fmt.Errorf("no compose ps around the revert's up")
	}
	var s revertSplit
	s.window = time.Duration(calls[last].end - calls[declared].end)
	var inside time.Duration
	for i := declared + 1; i <= last; i++ {
		s.docker += calls[i].took()
		if i > ups[1] {
			inside += calls[i].took()
		}
	}
	s.healthSleep = time.Duration(calls[last].end-calls[ups[1]].end) - inside
	return s, nil
}

// BenchmarkRevertRealParts: a v2 whose web never turns healthy (3 s health timeout) is applied
// over a healthy v1, images local, through the real binary, engine and compose plugin; each
// iteration is a new v2 sha, so no backoff holds it. Figures: revert-ms (from the `compose ps`
// that declared v2 unhealthy to the one that saw v1 healthy again), revert-compose-ms (docker
// calls in that window: logs, pull --policy missing, up, ps), revert-health-sleep-ms (the
// agent's sleeps while v1's healthchecks ran) and revert-agent-overhead-ms (the rest: the
// agent's own work — state, promote, report).
func BenchmarkRevertRealParts(b *testing.B) {
	w := newWorld(b)
	bx := w.newBox(b, "env-i12-revert-bench", "")
	bin, log := timedDocker(b, bx.dir)
	raw, _ := os.ReadFile(bx.cfg)
	os.WriteFile(bx.cfg, append(raw, []byte("docker_bin: "+bin+"\n")...), 0o640)
	sha1 := w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, pull: "missing"}))
	bx.expect(0)
	// Pull v2 once, unmeasured: the figure is about images already local.
	w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v2", webHealthy: false, registry: true, pull: "missing",
		agent: map[string]any{"healthy_timeout_s": 3}}))
	bx.expect(1)
	if _, err := readLog(log); err != nil {
		b.Fatal(err)
	}

	var window, dockerTime, sleep time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.ten.SetDesired(bx.env, w.bundle(bundleOpts{tag: "v2", webHealthy: false, registry: true, pull: "missing",
			agent: map[string]any{"healthy_timeout_s": 3}, extraEnvVar: fmt.Sprintf("ITER=%d\n", i)}))
		bx.expect(1)
		if r := bx.report(); r.RevertedTo != sha1 || r.RevertHealthy == nil || !*r.RevertHealthy {
			b.Fatalf("iteration %d: report %+v", i, r)
		}
		s, err := readRevert(log)
		if err != nil {
			b.Fatal(err)
		}
		window += s.window
		dockerTime += s.docker
		sleep += s.healthSleep
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / n / 1000 }
	b.ReportMetric(ms(window), "revert-ms")
	b.ReportMetric(ms(dockerTime), "revert-compose-ms")
	b.ReportMetric(ms(sleep), "revert-health-sleep-ms")
	b.ReportMetric(ms(window-dockerTime-sleep), "revert-agent-overhead-ms")
}

// TestRevertSplitOfDockerCalls: the benchmark's arithmetic on a known log.
func TestRevertSplitOfDockerCalls(t *testing.T) {
	log := filepath.Join(t.TempDir(), "docker-times")
	const ms = int64(time.Millisecond)
	lines := []string{
		fmt.Sprintf("%d %d compose -p p -f f up -d --remove-orphans", 0*ms, 300*ms),
		fmt.Sprintf("%d %d compose -p p -f f ps -a --format json", 310*ms, 350*ms),
		fmt.Sprintf("%d %d compose -p p -f f ps -a --format json", 3000*ms, 3050*ms), // v2 declared unhealthy
		fmt.Sprintf("%d %d compose -p p -f f logs --no-color --tail 50", 3060*ms, 3160*ms),
		fmt.Sprintf("%d %d compose -p p -f f pull --policy missing", 3200*ms, 3400*ms),
		fmt.Sprintf("%d %d compose -p p -f f up -d --remove-orphans", 3410*ms, 4410*ms),
		fmt.Sprintf("%d %d compose -p p -f f ps -a --format json", 4420*ms, 4470*ms),
		fmt.Sprintf("%d %d compose -p p -f f ps -a --format json", 6470*ms, 6520*ms), // v1 healthy
	}
	os.WriteFile(log, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
	s, err := readRevert(log)
	if err != nil {
		t.Fatal(err)
	}
	want := revertSplit{window: 3470 * time.Millisecond, docker: 1400 * time.Millisecond, healthSleep: 2010 * time.Millisecond}
	if s != want {
		t.Errorf("split = %+v, want %+v", s, want)
	}
	os.WriteFile(log, []byte(lines[0]+"\n"+lines[1]+"\n"), 0o600)
	if _, err := readRevert(log); err == nil || !strings.Contains(err.Error(), "want 2") {
		t.Errorf("a log with one up: %v", err)
	}
}

// A release whose app writes into its own directory (worker's writable bind of ./data) is
// reverted to with the real engine: the revert reads back only the files the agent staged.
func TestRevertToAReleaseWhoseAppWroteData(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-i12-data", "")
	sha1 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, dataBind: true}))
	b.expect(0)
	written := workerWritesData(t, b, sha1)

	sha2 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v2", webHealthy: false, registry: true, dataBind: true,
		agent: map[string]any{"healthy_timeout_s": 8}}))
	b.expect(1)
	r := b.report()
	if r.Result != "failed" || r.Sha != sha2 || r.RevertedTo != sha1 || r.RevertHealthy == nil || !*r.RevertHealthy {
		t.Fatalf("report = %+v, want failed %.12s reverted to %.12s (healthy)\n%s", r, sha2, sha1, b.last)
	}
	if c := b.containers()["worker"]; c.Image != w.images["v1"].Ref || c.Health != "healthy" {
		t.Errorf("worker after the revert = %v", c)
	}
	if got, err := os.ReadFile(written); err != nil || string(got) != "the app's own data\n" {
		t.Errorf("the app's data after the revert: %q, %v", got, err)
	}
}

// A rollback to a sha still on disk re-stages its release in place, with the real engine: what
// its app wrote through a writable bind of ./data is still there, and the app sees it again.
func TestRollbackKeepsTheDataItsAppWrote(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-stage-data", "")
	v1 := bundleOpts{tag: "v1", webHealthy: true, registry: true, dataBind: true, agent: map[string]any{"allow_rollback": true}}
	sha1 := w.ten.SetDesired(b.env, w.bundle(v1))
	b.expect(0)
	written := workerWritesData(t, b, sha1)

	sha2 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v2", webHealthy: true, registry: true, dataBind: true}))
	b.expect(0)
	if r := b.report(); r.Sha != sha2 || r.Result != "applied" {
		t.Fatalf("report after v2 = %+v", r)
	}
	if again := w.ten.SetDesired(b.env, w.bundle(v1)); again != sha1 {
		t.Fatalf("the same bundle has sha %.12s, then %.12s", sha1, again)
	}
	b.expect(0)
	if r := b.report(); r.Sha != sha1 || r.Result != "applied" {
		t.Fatalf("report after the rollback = %+v\n%s", r, b.last)
	}
	if got, err := os.ReadFile(written); err != nil || string(got) != "the app's own data\n" {
		t.Errorf("the app's data after the rollback: %q, %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst := filepath.Join(t.TempDir(), "back")
	if out, err := runDocker(ctx, "", nil, "cp", b.containers()["worker"].Name+":/data/x", dst); err != nil {
		t.Fatalf("docker cp back: %v: %s", err, out)
	}
	if got, err := os.ReadFile(dst); err != nil || string(got) != "the app's own data\n" {
		t.Errorf("the app sees %q, %v after the rollback", got, err)
	}
}

// workerWritesData has the worker of release sha (bundleOpts.dataBind) write /data/x through its
// bind, as the app itself would (`docker cp` into the container), and returns where that landed
// in the release directory.
func workerWritesData(t *testing.T, b *box, sha string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(src, []byte("the app's own data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := runDocker(ctx, "", nil, "cp", src, b.containers()["worker"].Name+":/data/x"); err != nil {
		t.Fatalf("docker cp: %v: %s", err, out)
	}
	written := filepath.Join(b.dir, "state", b.env, "releases", sha, "data", "x")
	if _, err := os.Stat(written); err != nil {
		t.Fatalf("the app's write did not land in the release directory: %v", err)
	}
	return written
}
