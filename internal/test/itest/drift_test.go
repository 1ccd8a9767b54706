//go:build integration

package itest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// endDriftBackoff makes the box's next drift correction due now, as if its backoff had run out.
func (b *box) endDriftBackoff() {
	b.t.Helper()
	st := b.state()
	if st.Drift == nil || st.Drift.NextAttemptAt == nil {
		b.t.Fatal("no drift correction backs off")
	}
	due := time.Now().Add(-time.Second).UTC()
	st.Drift.NextAttemptAt = &due
	if err := state.Save(filepath.Join(b.dir, "state", "state.json"), st); err != nil {
		b.t.Fatal(err)
	}
}

// corrected runs a tick and checks it brought the release back: exit 0, a healthy report naming
// what was corrected, every container of the release running healthy, nothing fetched or leased.
func (b *box) corrected(want ...string) protocol.Report {
	b.t.Helper()
	fetches, leases := len(b.w.ten.BundleFetches(b.env)), b.w.ten.LeasesGranted(b.env)
	b.expect(0)
	r := b.report()
	if r.Result != "healthy" || !slices.Equal(r.DriftCorrected, want) || r.Detail != "drift corrected: "+strings.Join(want, ", ") {
		b.t.Fatalf("report = %+v, want healthy correcting %q\n%s", r, want, b.last)
	}
	for svc, c := range b.containers() {
		if c.State != "running" || c.Health != "healthy" {
			b.t.Errorf("%s after the correction: %v", svc, c)
		}
	}
	if len(b.w.ten.BundleFetches(b.env)) != fetches || b.w.ten.LeasesGranted(b.env) != leases {
		b.t.Error("the correction fetched the bundle or leased")
	}
	if !strings.Contains(b.last, "drift corrected: "+strings.Join(want, ", ")+" (healthy)") {
		b.t.Errorf("the journal does not say what was corrected:\n%s", b.last)
	}
	return r
}

// The real engine: a container stopped by hand, one removed, and `up` of a hand-edited copy of
// the compose file are each brought back by the next tick, which reports what it corrected.
func TestDriftIsCorrectedAgainstRealEngine(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-i22-drift", "")
	sha := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
	b.expect(0)
	// The hashes learned from the apply's own `ps` are the labels compose put on the containers.
	mem := b.state().Drift
	if mem == nil || mem.Sha != sha || len(mem.Services) != 2 {
		t.Fatalf("drift memory after the apply: %+v", mem)
	}
	for svc, c := range b.containers() {
		label := strings.TrimSpace(docker(t, "", "inspect", "--format", "{{index .Config.Labels \"com.docker.compose.config-hash\"}}", c.ID))
		if mem.Services[svc].ConfigHash != label || mem.Services[svc].Containers != 1 {
			t.Errorf("%s: learned %+v, the container's label is %s", svc, mem.Services[svc], label)
		}
	}
	// A converged tick with nothing to correct runs no `up`.
	before := b.containers()
	b.expect(0)
	if r := b.report(); r.Result != "healthy" || r.DriftCorrected != nil {
		t.Fatalf("heartbeat = %+v", r)
	}
	for svc, c := range b.containers() {
		if c.ID != before[svc].ID || c.StartedAt != before[svc].StartedAt {
			t.Errorf("%s was touched by a converged tick", svc)
		}
	}

	t.Run("a container stopped by hand", func(t *testing.T) {
		docker(t, "", "stop", b.containers()["worker"].Name)
		b.corrected("worker: exited")
	})
	t.Run("a container removed", func(t *testing.T) {
		docker(t, "", "rm", "-f", b.containers()["web"].Name)
		b.corrected("web: missing")
	})
	t.Run("up of a hand-edited copy of the compose file", func(t *testing.T) {
		rel := filepath.Join(b.dir, "state", b.env, "releases", sha)
		raw, err := os.ReadFile(filepath.Join(rel, "docker-compose.yml"))
		if err != nil {
			t.Fatal(err)
		}
		edited := filepath.Join(t.TempDir(), "docker-compose.yml")
		text := strings.Replace(string(raw), `APP_HEALTHY: "true"`, `APP_HEALTHY: "true"`+"\n      HAND_EDIT: \"debugging\"", 1)
		if err := os.WriteFile(edited, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		c := Compose(t)
		if out, err := c.Run(t, rel, filepath.Join(b.dir, "state", "docker"), b.project, "--project-directory", rel, "-f", edited, "up", "-d"); err != nil {
			t.Fatalf("hand-edited up: %v\n%s", err, out)
		}
		if got, err := AppGet(t, b.containers()["web"].Name, "/env?name=HAND_EDIT"); err != nil || got != "debugging" {
			t.Fatalf("the hand edit did not take: %q %v", got, err)
		}
		b.corrected("web: config differs from the release")
		if got, err := AppGet(t, b.containers()["web"].Name, "/env?name=HAND_EDIT"); err == nil {
			t.Errorf("web still runs the hand edit (HAND_EDIT=%q)", got)
		}
		if got, err := AppGet(t, b.containers()["web"].Name, "/env?name=APP_SECRET"); err != nil || got != trickySecret {
			t.Errorf("the corrected web sees APP_SECRET %q (%v): not the release's .env", got, err)
		}
	})
	if n := b.state().Counters.DriftCorrections; n != 3 {
		t.Errorf("drift corrections counted: %d, want 3", n)
	}
	if strings.Contains(b.stderr, trickySecret) {
		t.Error("a secret value is in the journal")
	}
}

// A service that crash-loops (it exits at start once ./data/crash exists) is corrected once, then
// backs off: the ticks in the backoff touch nothing; after it, one more try; fixed, the next
// correction ends the backoff.
func TestACrashLoopBacksOffAgainstRealEngine(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-i22-crash", "")
	// 20 s: a loaded machine's healthchecks still pass in time, and the crash loop's waits stay short.
	sha := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, dataBind: true, crashIfData: true,
		agent: map[string]any{"healthy_timeout_s": 20}}))
	b.expect(0)
	crash := filepath.Join(b.dir, "state", b.env, "releases", sha, "data", "crash")
	if err := os.WriteFile(crash, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	docker(t, "", "stop", b.containers()["worker"].Name)

	b.expect(0)
	r := b.report()
	// The first look after `up` may catch worker running for the moment it lives ("ready, then
	// not 2s later"), or only exited ("not healthy after 20s"): a failed correction either way.
	if r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift correction did not end healthy: ") || !strings.Contains(r.Detail, "worker: exited; drift was") ||
		!slices.Equal(r.DriftCorrected, []string{"worker: exited"}) || !strings.Contains(r.Detail, "(1 failed)") {
		t.Fatalf("report = %+v\n%s", r, b.last)
	}
	st := b.state()
	if st.Drift.Attempts != 1 || time.Until(*st.Drift.NextAttemptAt) < time.Minute {
		t.Fatalf("drift backoff = %+v", st.Drift)
	}
	crashed := b.containers()["worker"]
	if crashed.State != "exited" || crashed.ExitCode != 3 {
		t.Fatalf("worker after the correction: %v", crashed)
	}

	// Inside the backoff: reported, not run again.
	for range 2 {
		b.expect(0)
		if r := b.report(); r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift: worker: exited; correction backs off until") {
			t.Errorf("a tick in the backoff reported %+v", r)
		}
		if c := b.containers()["worker"]; c.StartedAt != crashed.StartedAt {
			t.Errorf("worker was started again inside the backoff: %v → %v", crashed, c)
		}
	}

	// After the backoff: one more try, the wait doubled.
	b.endDriftBackoff()
	b.expect(0)
	if st := b.state(); st.Drift.Attempts != 2 || time.Until(*st.Drift.NextAttemptAt) < 3*time.Minute {
		t.Errorf("after the second failed correction: %+v", st.Drift)
	}
	if c := b.containers()["worker"]; c.StartedAt == crashed.StartedAt {
		t.Error("the correction after the backoff did not start worker")
	}

	// Fixed: the next correction ends healthy and ends the backoff.
	if err := os.Remove(crash); err != nil {
		t.Fatal(err)
	}
	b.endDriftBackoff()
	b.corrected("worker: exited")
	if st := b.state(); st.Drift.Attempts != 0 || st.Drift.NextAttemptAt != nil || st.AppliedSha != sha {
		t.Errorf("after the healthy correction: %+v", st.Drift)
	}
}

// A release whose file was edited on disk is never run: the drift is reported with why, and
// nothing is started.
func TestATamperedReleaseIsNotRunAgainstRealEngine(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-i22-tamper", "")
	sha := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
	b.expect(0)
	f := filepath.Join(b.dir, "state", b.env, "releases", sha, "docker-compose.yml")
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte(strings.Replace(string(raw), "  worker:\n", "  worker:\n    privileged: true\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	docker(t, "", "stop", b.containers()["worker"].Name)
	stopped := b.containers()["worker"]

	b.expect(0)
	r := b.report()
	if r.Result != "unhealthy" || !strings.Contains(r.Detail, "drift not corrected: release "+sha[:12]+" refused: changed on disk since it was applied") ||
		!strings.Contains(r.Detail, "drift: worker: exited") || r.DriftCorrected != nil {
		t.Fatalf("report = %+v\n%s", r, b.last)
	}
	if c := b.containers()["worker"]; c.State != "exited" || c.StartedAt != stopped.StartedAt {
		t.Errorf("the tampered release ran: worker %v", c)
	}
	if st := b.state(); st.Counters.DriftCorrections != 0 || st.Drift.Attempts != 1 {
		t.Errorf("state: %+v, %+v", st.Counters, st.Drift)
	}
}

// drift_correction: false only reports.
func TestDriftCorrectionOffOnlyReportsAgainstRealEngine(t *testing.T) {
	w := newWorld(t)
	b := w.newBox(t, "env-i22-off", "drift_correction: false")
	w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
	b.expect(0)
	docker(t, "", "stop", b.containers()["worker"].Name)
	stopped := b.containers()["worker"]
	b.expect(0)
	if r := b.report(); r.Result != "unhealthy" || r.Detail != "drift (not corrected: config drift_correction is false): worker: exited" {
		t.Errorf("report = %+v", r)
	}
	if c := b.containers()["worker"]; c.State != "exited" || c.StartedAt != stopped.StartedAt {
		t.Errorf("drift was corrected with drift_correction off: worker %v", c)
	}
}
