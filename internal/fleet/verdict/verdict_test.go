package verdict

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func ago(d time.Duration) *time.Time { t := now.Add(-d); return &t }
func ptr[T any](v T) *T              { return &v }

// healthy is an agent and identity for which every rule is false.
func healthy() Input {
	return Input{
		Agent: &Agent{
			EnvID: "env-dev-08", Site: "cbs", Version: "0.2.0", LastCheckin: ago(30 * time.Second),
			Interval: time.Minute, DesiredSha: "7a10b2c3d4e5", DesiredAt: ago(time.Hour), AppliedSha: "7a10b2c3d4e5",
			LastResult: "healthy", TimerEnabled: ptr(true),
		},
		Mesh: &Mesh{Name: "monky-host.env-dev-08", Online: ptr(true)},
	}
}

// backingOff makes the desired sha one that failed 3 times and waits 8 more minutes, the box
// reverted to its applied sha (revertHealthy nil: the revert has not ended).
func backingOff(in *Input, revertHealthy *bool) {
	a := in.Agent
	a.DesiredSha, a.DesiredAt = "9f3e21d07a1b", ago(40*time.Minute)
	next := now.Add(8 * time.Minute)
	a.Backoff = &Backoff{FailedSha: a.DesiredSha, Attempts: 3, NextAttemptAt: &next, RevertedTo: a.AppliedSha, RevertHealthy: revertHealthy}
}

// held puts a hold of alice's on the agent, ending d from now.
func held(in *Input, d time.Duration) {
	in.Agent.Hold = &Hold{Reason: "debugging the db\nby hand", By: "alice", Since: now.Add(-time.Hour), Until: now.Add(d)}
}

func TestEvaluate(t *testing.T) {
	v020 := mustVersion(t, "0.2.0")
	for _, tc := range []struct {
		name        string
		edit        func(*Input)
		th          Thresholds
		want        Verdict
		wantReasons []Verdict
		stepHas     []string
		stepLacks   []string
		cause       string // checked when set
	}{
		{name: "ok", edit: func(*Input) {}, want: OK},
		{name: "held", edit: func(in *Input) { held(in, 3*time.Hour) },
			want: Held, wantReasons: []Verdict{Held}, stepHas: []string{"held by alice until 2026-12-02T13:00Z (in 3h): debugging the db", "monky-deployd unhold"}},
		{name: "held, desired differs: HELD, not DRIFT", edit: func(in *Input) {
			held(in, time.Hour)
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(time.Hour)
		}, want: Held, wantReasons: []Verdict{Held, Drift}},
		{name: "a hold over by tenancy's clock is no hold", edit: func(in *Input) { held(in, -time.Minute) }, want: OK},
		{name: "held and failing: FAILING first", edit: func(in *Input) { held(in, time.Hour); in.Agent.LastResult = "unhealthy" },
			want: Failing, wantReasons: []Verdict{Failing, Held}},
		{name: "held and silent: SILENT first", edit: func(in *Input) { held(in, time.Hour); in.Agent.LastCheckin = ago(10 * time.Minute) },
			want: Silent, wantReasons: []Verdict{Silent, Held}},
		{name: "held and backing off: BACKOFF first", edit: func(in *Input) { held(in, time.Hour); backingOff(in, ptr(true)) },
			want: BackingOff, wantReasons: []Verdict{BackingOff, Held, Drift}},
		{name: "deferred", edit: func(in *Input) {
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(2*time.Hour)
			in.Agent.DeferredUntil = ptr(now.Add(15 * time.Hour))
		}, want: Deferred, wantReasons: []Verdict{Deferred, Drift},
			stepHas: []string{"desired 9f3e21d0 waits for the box's apply window until 2026-12-03T01:00Z (in 15h)", "ignore_window"}},
		{name: "deferred, fresh desired: DEFERRED without DRIFT", edit: func(in *Input) {
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(time.Minute)
			in.Agent.DeferredUntil = ptr(now.Add(time.Hour))
		}, want: Deferred, wantReasons: []Verdict{Deferred}},
		{name: "a deferral whose window has opened is DRIFT again", edit: func(in *Input) {
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(2*time.Hour)
			in.Agent.DeferredUntil = ago(time.Minute)
		}, want: Drift},
		{name: "a deferral of what is applied is nothing", edit: func(in *Input) { in.Agent.DeferredUntil = ptr(now.Add(time.Hour)) }, want: OK},
		{name: "held and deferred: HELD", edit: func(in *Input) {
			held(in, time.Hour)
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(time.Minute)
			in.Agent.DeferredUntil = ptr(now.Add(time.Hour))
		}, want: Held, wantReasons: []Verdict{Held, Deferred}},
		{name: "no identity", edit: func(in *Input) { in.Mesh = nil },
			want: NoIdentity, stepHas: []string{"fleetctl onboard env-dev-08 --site cbs"}},
		{name: "attrs missing: openbao-client", edit: func(in *Input) { in.Mesh.MissingAttributes = []string{"openbao-client"} },
			want: AttrsMissing, stepHas: []string{"#openbao-client", "fleetctl repair-attrs env-dev-08"}},
		{name: "attrs missing: both", edit: func(in *Input) {
			in.Mesh.MissingAttributes = []string{"monky-deploy-agent", "openbao-client"}
		}, want: AttrsMissing, stepHas: []string{"#monky-deploy-agent and #openbao-client"}},
		{name: "never checked in", edit: func(in *Input) { in.Agent.LastCheckin = nil; in.Agent.Version = "" },
			want: NeverCheckedIn, stepHas: []string{"install kit not run, or the first tick is failing"}},
		{name: "silent: the 0.1.8 upgrade signature", edit: func(in *Input) {
			in.Agent.LastCheckin = ago(29 * time.Minute)
			in.Agent.Version = "0.1.8"
			in.Agent.TimerEnabled = ptr(false)
		}, want: Silent, stepHas: []string{"systemctl enable --now monky-deployd.timer", "timer reported disabled", "last ran 0.1.8"}},
		{name: "silent, timer said enabled", edit: func(in *Input) { in.Agent.LastCheckin = ago(10 * time.Minute) },
			want: Silent, cause: CauseTicksNotLanded, stepHas: []string{"the timer ran at its last check-in, but no tick has reached tenancy since", "journalctl -u monky-deployd -n 30 and monky-deployd doctor", "last ran 0.2.0"},
			stepLacks: []string{"timer reported disabled", "exited"}},
		{name: "silent, timer enabled and active, its ticks failing", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Agent.TimerActive, in.Agent.LastExitCode = ago(10*time.Minute), ptr(true), ptr(78)
		}, want: Silent, cause: CauseTicksNotLanded, stepHas: []string{"no tick has reached tenancy", "exited 78 (config rejected"}},
		{name: "silent, timer enabled but inactive", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Agent.TimerActive = ago(10*time.Minute), ptr(false)
		}, want: Silent, cause: CauseTimerInactive, stepHas: []string{"systemctl start monky-deployd.timer"}, stepLacks: []string{"enable --now"}},
		{name: "silent, timer state unknown", edit: func(in *Input) { in.Agent.LastCheckin = ago(10 * time.Minute); in.Agent.TimerEnabled = nil },
			want: Silent, cause: CauseTimerUnknown, stepHas: []string{"timer state never reported", "systemctl status monky-deployd.timer", "systemctl enable --now monky-deployd.timer"}, stepLacks: []string{"timer reported disabled"}},
		{name: "silent during an apply within its timeout", edit: func(in *Input) {
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(20*time.Minute)
			in.Agent.LastCheckin, in.Agent.LastAction, in.Agent.LastResultAt = ago(12*time.Minute), "apply", ago(13*time.Minute)
			in.Agent.ApplyTimeout = time.Hour
		}, want: Silent, cause: CauseApplying, stepHas: []string{"applying 9f3e21d0 since its last check-in 12m ago (a tick may run 1h): wait", "journalctl -u monky-deployd -f"},
			stepLacks: []string{"systemctl enable"}},
		{name: "silent after an apply that outlived its timeout", edit: func(in *Input) {
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f3e21d07a1b", ago(2*time.Hour)
			in.Agent.LastCheckin, in.Agent.LastAction = ago(70*time.Minute), "apply"
		}, want: Silent, cause: CauseApplyOverdue, stepHas: []string{"an apply of 9f3e21d0 started 1h10m ago, past the tick's 1h timeout", "systemctl status monky-deployd.service"}},
		{name: "silent, the apply reported: not applying", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Agent.LastAction, in.Agent.LastResultAt = ago(12*time.Minute), "apply", ago(11*time.Minute)
			in.Agent.TimerEnabled = ptr(false)
		}, want: Silent, cause: CauseTimerDisabled, stepHas: []string{"systemctl enable --now monky-deployd.timer"}},
		{name: "offline", edit: func(in *Input) { in.Agent.LastCheckin = ago(2 * time.Hour); in.Mesh.Online = ptr(false) },
			want: Offline, cause: CauseHostDown, stepHas: []string{"host or tunneller down", "2h ago"}},
		{name: "offline, transport proxy", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Mesh.Online, in.Agent.Transport = ago(2*time.Hour), ptr(false), "proxy"
		}, want: Offline, stepHas: []string{"host or proxy down: mesh offline, last check-in 2h ago", "systemctl status monky-deployd-proxy"}},
		{name: "offline, transport system", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Mesh.Online, in.Agent.Transport = ago(2*time.Hour), ptr(false), "system"
		}, want: Offline, stepHas: []string{"systemctl status ziti-edge-tunnel"}},
		{name: "offline, transport sdk", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Mesh.Online, in.Agent.Transport = ago(2*time.Hour), ptr(false), "sdk"
		}, want: Offline, stepHas: []string{"only a running tick is on the mesh", "journalctl -u monky-deployd"}},
		{name: "offline during an apply", edit: func(in *Input) {
			in.Agent.LastCheckin, in.Mesh.Online, in.Agent.LastAction = ago(20*time.Minute), ptr(false), "apply"
		}, want: Offline, cause: CauseApplying, stepHas: []string{"wait"}},
		{name: "stale, mesh state unknown, is offline", edit: func(in *Input) { in.Agent.LastCheckin = ago(time.Hour); in.Mesh.Online = nil },
			want: Offline},
		{name: "offline but fresh is not offline", edit: func(in *Input) { in.Mesh.Online = ptr(false) }, want: OK},
		{name: "failing: failed", edit: func(in *Input) {
			in.Agent.LastResult = "failed"
			in.Agent.LastDetail = "pull: harbor.tikali.net/monky/api:1.4\nunauthorized: authentication required"
		}, want: Failing, stepHas: []string{"failed: pull: harbor.tikali.net/monky/api:1.4 unauthorized"}},
		{name: "failing: refused, the detail whole", edit: func(in *Input) {
			in.Agent.LastResult = "refused"
			in.Agent.LastDetail = "DISK_INSUFFICIENT: " + strings.Repeat("x", 200) + " end"
		}, want: Failing, stepHas: []string{"refused: DISK_INSUFFICIENT: xxx", "x end"}, stepLacks: []string{"…"}},
		{name: "backoff names the reason of the last failure", edit: func(in *Input) {
			backingOff(in, ptr(true))
			in.Agent.LastFailure = &Failure{Sha: in.Agent.DesiredSha, Code: "UNHEALTHY", Detail: "not healthy after 5m0s:\napi: exited", Attempts: 3}
		}, want: BackingOff, stepHas: []string{"9f3e21d0 failed 3× (UNHEALTHY: not healthy after 5m0s: api: exited), reverted to 7a10b2c3 (healthy)"}},
		{name: "a last failure of another sha is not this backoff's reason", edit: func(in *Input) {
			backingOff(in, ptr(true))
			in.Agent.LastFailure = &Failure{Sha: "0000", Code: "PULL_FAILED", Attempts: 1}
		}, want: BackingOff, stepLacks: []string{"PULL_FAILED"}},
		{name: "drift names the desired sha's failure", edit: func(in *Input) {
			in.Agent.DesiredSha, in.Agent.DesiredAt = "9f8e7d6c5b4a", ago(42*time.Minute)
			in.Agent.LastFailure = &Failure{Sha: "9f8e7d6c5b4a", Code: "PRIVILEGED_REFUSED", Detail: "x: privileged", Attempts: 1}
		}, want: Drift, stepHas: []string{"desired 9f8e7d6c not applied for 42m: it failed (PRIVILEGED_REFUSED: x: privileged)"}},
		{name: "failing: unhealthy", edit: func(in *Input) { in.Agent.LastResult = "unhealthy" }, want: Failing, stepHas: []string{"unhealthy: (no detail)"}},
		{name: "backoff: serving the previous release", edit: func(in *Input) {
			backingOff(in, ptr(true))
		}, want: BackingOff, wantReasons: []Verdict{BackingOff, Drift},
			stepHas: []string{"9f3e21d0 failed 3×, reverted to 7a10b2c3 (healthy), next try in 8m", "serves the previous release"}},
		{name: "backoff: the failure report with a healthy revert", edit: func(in *Input) {
			backingOff(in, ptr(true))
			in.Agent.LastResult, in.Agent.LastDetail = "failed", "not healthy after 5m0s: api"
		}, want: BackingOff, stepHas: []string{"reverted to 7a10b2c3 (healthy)"}},
		{name: "backoff whose revert is unhealthy is failing", edit: func(in *Input) {
			backingOff(in, ptr(false))
			in.Agent.LastResult, in.Agent.LastDetail = "unhealthy", "api: running/unhealthy"
		}, want: Failing, wantReasons: []Verdict{Failing, Drift},
			stepHas: []string{"unhealthy: api: running/unhealthy; 9f3e21d0 failed 3×, reverted to 7a10b2c3 (unhealthy), next try in 8m"}},
		// A deploy that failed and a revert that is unhealthy, or has not ended: nothing is known
		// to serve, so FAILING, never BACKOFF's "serves the previous release".
		{name: "failed deploy whose revert is unhealthy is failing", edit: func(in *Input) {
			backingOff(in, ptr(false))
			in.Agent.LastResult, in.Agent.LastDetail = "failed", "not healthy after 5m0s: api"
		}, want: Failing, wantReasons: []Verdict{Failing, Drift},
			stepHas:   []string{"failed: not healthy after 5m0s: api; 9f3e21d0 failed 3×, reverted to 7a10b2c3 (unhealthy)"},
			stepLacks: []string{"serves the previous release"}},
		{name: "failed deploy whose revert has not ended is failing", edit: func(in *Input) {
			backingOff(in, nil)
			in.Agent.LastResult, in.Agent.LastDetail = "failed", "not healthy after 5m0s: api"
		}, want: Failing, wantReasons: []Verdict{Failing, Drift},
			stepHas: []string{"9f3e21d0 failed 3×, reverting to 7a10b2c3"}, stepLacks: []string{"serves the previous release"}},
		{name: "backoff without a revert is failing", edit: func(in *Input) {
			backingOff(in, nil)
			in.Agent.Backoff.RevertedTo = ""
			in.Agent.LastResult = "failed"
		}, want: Failing, stepHas: []string{"9f3e21d0 failed 3×, not reverted, next try in 8m"}},
		{name: "backoff of a first deploy: nothing serves", edit: func(in *Input) {
			backingOff(in, nil)
			in.Agent.AppliedSha, in.Agent.Backoff.RevertedTo = "", ""
			in.Agent.LastResult, in.Agent.LastDetail = "healthy", "nothing deployed"
		}, want: Failing, stepHas: []string{"no release serves: 9f3e21d0 failed 3×, not reverted, next try in 8m"}},
		{name: "backoff due", edit: func(in *Input) {
			backingOff(in, ptr(true))
			in.Agent.Backoff.NextAttemptAt = ago(time.Second)
		}, want: BackingOff, stepHas: []string{"next try due"}},
		{name: "backoff of a sha no longer desired is ignored", edit: func(in *Input) {
			backingOff(in, ptr(true))
			in.Agent.DesiredSha = in.Agent.AppliedSha
		}, want: OK},
		{name: "down is not failing", edit: func(in *Input) { in.Agent.LastResult = "down" }, want: OK},
		{name: "drift", edit: func(in *Input) { in.Agent.DesiredSha = "9f8e7d6c5b4a"; in.Agent.DesiredAt = ago(42 * time.Minute) },
			want: Drift, stepHas: []string{"desired 9f8e7d6c not applied for 42m"}},
		{name: "recent desired is not drift yet", edit: func(in *Input) { in.Agent.DesiredSha = "9f8e7d6c5b4a"; in.Agent.DesiredAt = ago(5 * time.Minute) },
			want: OK},
		// The 15 min default, at its edge: one second short is not drift, one second past is.
		{name: "drift default: 15 min is not drift yet", edit: func(in *Input) {
			in.Agent.DesiredSha = "9f8e7d6c5b4a"
			in.Agent.DesiredAt = ago(15 * time.Minute)
		}, want: OK},
		{name: "drift default: 15 min 1 s is drift", edit: func(in *Input) {
			in.Agent.DesiredSha = "9f8e7d6c5b4a"
			in.Agent.DesiredAt = ago(15*time.Minute + time.Second)
		}, want: Drift, stepHas: []string{"not applied for 15m"}},
		{name: "drift threshold flag", edit: func(in *Input) { in.Agent.DesiredSha = "9f8e7d6c5b4a"; in.Agent.DesiredAt = ago(5 * time.Minute) },
			th: Thresholds{Drift: 2 * time.Minute}, want: Drift},
		{name: "never applied is drift", edit: func(in *Input) { in.Agent.AppliedSha = "" }, want: Drift},
		{name: "outdated", edit: func(in *Input) { in.Agent.Version = "0.1.9" }, th: Thresholds{MinVersion: &v020},
			want: Outdated, stepHas: []string{"0.1.9 < 0.2.0"}},
		{name: "pre-release is older", edit: func(in *Input) { in.Agent.Version = "0.2.0-rc.1" }, th: Thresholds{MinVersion: &v020}, want: Outdated},
		{name: "newer is fine", edit: func(in *Input) { in.Agent.Version = "0.10.0" }, th: Thresholds{MinVersion: &v020}, want: OK},
		{name: "unknown version is outdated", edit: func(in *Input) { in.Agent.Version = "garbage" }, th: Thresholds{MinVersion: &v020}, want: Outdated},
		{name: "no min version, no outdated", edit: func(in *Input) { in.Agent.Version = "0.0.1" }, want: OK},
		{name: "orphan identity", edit: func(in *Input) { in.Agent = nil }, want: OrphanIdentity,
			stepHas: []string{"tenancy has no backend for identity monky-host.env-dev-08"}},
		{name: "all reasons listed in table order", edit: func(in *Input) {
			in.Mesh.MissingAttributes = []string{"openbao-client"}
			in.Agent.LastCheckin = ago(time.Hour)
			in.Agent.LastResult = "failed"
			in.Agent.DesiredSha = "ffff"
			in.Agent.Version = "0.1.8"
		}, th: Thresholds{MinVersion: &v020}, want: AttrsMissing,
			wantReasons: []Verdict{AttrsMissing, Silent, Failing, Drift, Outdated}},
		{name: "no identity and stale: offline too", edit: func(in *Input) { in.Mesh = nil; in.Agent.LastCheckin = ago(time.Hour) },
			want: NoIdentity, wantReasons: []Verdict{NoIdentity, Offline}},
		{name: "stale default is 3 min at a 60 s interval", edit: func(in *Input) { in.Agent.LastCheckin = ago(3*time.Minute + time.Second) },
			want: Silent},
		{name: "exactly the threshold is not stale", edit: func(in *Input) { in.Agent.LastCheckin = ago(3 * time.Minute) }, want: OK},
		{name: "stale scales with the interval", edit: func(in *Input) {
			in.Agent.Interval = 5 * time.Minute
			in.Agent.LastCheckin = ago(14 * time.Minute)
		}, want: OK},
		{name: "stale flag overrides", edit: func(in *Input) { in.Agent.Interval = 5 * time.Minute; in.Agent.LastCheckin = ago(14 * time.Minute) },
			th: Thresholds{Stale: 10 * time.Minute}, want: Silent},
		{name: "check-in ahead of tenancy's clock is fresh", edit: func(in *Input) { in.Agent.LastCheckin = ago(-2 * time.Minute) }, want: OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.edit(&in)
			got := Evaluate(in, now, tc.th)
			if got.Verdict != tc.want {
				t.Fatalf("verdict %s (reasons %v, step %q), want %s", got.Verdict, got.Reasons, got.NextStep, tc.want)
			}
			if tc.cause != "" && got.Cause != tc.cause {
				t.Errorf("cause %q, want %q", got.Cause, tc.cause)
			}
			if (got.Verdict == Silent || got.Verdict == Offline) != (got.Cause != "") && got.Verdict != NoIdentity && got.Verdict != AttrsMissing {
				t.Errorf("verdict %s with cause %q", got.Verdict, got.Cause)
			}
			if tc.wantReasons != nil && !slices.Equal(got.Reasons, tc.wantReasons) {
				t.Errorf("reasons %v, want %v", got.Reasons, tc.wantReasons)
			}
			if tc.want == OK && (len(got.Reasons) != 0 || got.NextStep != "") {
				t.Errorf("OK with reasons %v / step %q", got.Reasons, got.NextStep)
			}
			if tc.want != OK && (len(got.Reasons) == 0 || got.Reasons[0] != tc.want || got.NextStep == "") {
				t.Errorf("reasons %v, step %q", got.Reasons, got.NextStep)
			}
			for _, s := range tc.stepHas {
				if !strings.Contains(got.NextStep, s) {
					t.Errorf("next step %q lacks %q", got.NextStep, s)
				}
			}
			for _, s := range tc.stepLacks {
				if strings.Contains(got.NextStep, s) {
					t.Errorf("next step %q has %q", got.NextStep, s)
				}
			}
			if strings.Contains(got.NextStep, "\n") {
				t.Errorf("next step spans lines: %q", got.NextStep)
			}
		})
	}
}

// The verdict sees one clock, the one it is given: tenancy's. The same answer judged at the
// same tenancy `now` gives the same verdict whatever time the operator's laptop thinks it is;
// judged by a clock 10 minutes ahead, a fresh agent would turn SILENT.
func TestVerdictFollowsTheGivenClockOnly(t *testing.T) {
	in := healthy()
	in.Agent.LastCheckin = ago(2 * time.Minute)
	if got := Evaluate(in, now, Thresholds{}); got.Verdict != OK || *got.Age != 2*time.Minute {
		t.Fatalf("at tenancy's now: %s age %v", got.Verdict, got.Age)
	}
	if got := Evaluate(in, now.Add(10*time.Minute), Thresholds{}); got.Verdict != Silent {
		t.Fatalf("a skewed clock must be kept out of Evaluate: it changes the verdict to %s", got.Verdict)
	}
}

func TestStaleAfter(t *testing.T) {
	for _, tc := range []struct{ interval, want time.Duration }{
		{0, 3 * time.Minute}, {30 * time.Second, 3 * time.Minute}, {time.Minute, 3 * time.Minute},
		{2 * time.Minute, 6 * time.Minute}, {15 * time.Minute, 45 * time.Minute},
	} {
		if got := StaleAfter(tc.interval); got != tc.want {
			t.Errorf("StaleAfter(%v) = %v, want %v", tc.interval, got, tc.want)
		}
	}
}

func TestHuman(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"}, {45 * time.Second, "45s"}, {12*time.Minute + 30*time.Second, "12m"}, {3 * time.Hour, "3h"},
		{3*time.Hour + 5*time.Minute, "3h5m"}, {50 * time.Hour, "2d2h"}, {72 * time.Hour, "3d"},
	} {
		if got := Human(tc.d); got != tc.want {
			t.Errorf("Human(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func mustVersion(t *testing.T, s string) Version {
	t.Helper()
	v, err := ParseVersion(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"0.2.0", "0.2.0", 0}, {"0.1.9", "0.2.0", -1}, {"0.10.0", "0.9.9", 1}, {"1.0.0", "0.99.99", 1},
		{"0.2.0-dev", "0.2.0", -1}, {"0.2.0-rc.1", "0.2.0-rc.2", -1}, {"0.2.0-rc.10", "0.2.0-rc.2", 1},
		{"0.2.0-1", "0.2.0-alpha", -1}, {"0.2.0-alpha", "0.2.0-alpha.1", -1}, {"v0.2.0", "0.2.0", 0},
		{"0.2.0+deb12", "0.2.0", 0}, {"0.2.0-rc.1+deb12", "0.2.0-rc.1", 0}, {"0.1.9", "0.2.0-rc.1", -1},
		{"0.2.0-rc.1", "0.1.10", 1},
	} {
		got := mustVersion(t, tc.a).Compare(mustVersion(t, tc.b))
		if got != tc.want {
			t.Errorf("%s vs %s = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestParseVersionRejects(t *testing.T) {
	for _, s := range []string{"", "v", "1", "1.2", "1.2.3.4", "a.b.c", "1.2.3-", "1.2.3+", "1.2.3-a..b", "-1.2.3", "1.2.3-a b", "99999999999999999999.0.0", "01.2.3", "vv1.2.3", "0.2.0~rc1", "1.2.3+a+b"} {
		if _, err := ParseVersion(s); err == nil {
			t.Errorf("ParseVersion(%q) accepted", s)
		}
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"0.2.0", "v1.2.3-rc.1+b", "0.2.0-dev", "1.2", "x"} {
		f.Add(s, "0.2.0")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		va, errA := ParseVersion(a)
		vb, errB := ParseVersion(b)
		if errA != nil || errB != nil {
			return
		}
		if va.Compare(vb) != -vb.Compare(va) {
			t.Fatalf("Compare not antisymmetric for %q, %q", a, b)
		}
		if va.Compare(va) != 0 {
			t.Fatalf("%q not equal to itself", a)
		}
		if va.String() != a {
			t.Fatalf("String %q != %q", va.String(), a)
		}
	})
}
