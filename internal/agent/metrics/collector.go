package metrics

import (
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// collect turns one Tick into series; the set varies per tick. Every series carries the env (one
// value per box) when there is one.
func collect(t Tick, p *page) {
	env := t.EnvID
	gauge := func(name, help string, v float64, labels ...string) {
		p.add(gaugeType, name, help, v, env, labels...)
	}
	counter := func(name, help string, v int64) {
		p.add(counterType, name, help, float64(v), env)
	}
	seconds := func(at time.Time) float64 { return float64(at.UnixNano()) / 1e9 }
	boolean := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}

	gauge("last_tick_timestamp_seconds", "When the last tick ended (Unix time).", seconds(t.End))
	gauge("last_tick_duration_seconds", "How long the last tick took.", max(t.End.Sub(t.Start).Seconds(), 0))
	gauge("last_tick_exit_code", "Exit code of the last tick: 0 ok, 1 failed or refused, 75 temporary, 78 config.", float64(t.ExitCode))
	gauge("last_tick_lock_held", "1 when the last tick found another tick holding the lock and did nothing.", boolean(t.LockHeld))
	if t.Interval > 0 {
		gauge("interval_seconds", "The timer's interval (interval_s): a tick is due this often.", t.Interval.Seconds())
	}
	gauge("info", "The agent's version and the release it runs (applied_sha empty when none).", 1,
		"version", t.Version, "applied_sha", appliedSha(t))

	if r := t.Report; r != nil {
		gauge("last_report_delivered", "1 when tenancy accepted the last report the tick sent, 0 when it could not be delivered.", boolean(r.Delivered))
	}
	if t.Containers != nil {
		counts := map[string]int{}
		for _, ct := range t.Containers {
			counts[containerState(ct)]++
		}
		for _, s := range ContainerStates {
			gauge("containers", "Containers of the env's compose project by state, as the last report saw them.", float64(counts[s]), "state", s)
		}
	}
	for _, d := range t.Disk {
		gauge("disk_free_bytes", "Free space on each filesystem a pull fills (docker's data-root, containerd's root).", float64(d.FreeBytes), "path", d.Path)
	}
	if t.DiskFloorBytes > 0 {
		gauge("disk_required_bytes", "The free space no apply goes under (disk.headroom_bytes); a bundle's size adds to it.", float64(t.DiskFloorBytes))
	}

	for _, h := range []struct {
		name, help string
		at         time.Time
	}{
		{"identity_cert_expiry_timestamp_seconds", "When the ziti identity's client certificate expires (Unix time); the agent renews it within identity_renew_below_s.", t.IdentityCertNotAfter},
		{"identity_ca_expiry_timestamp_seconds", "When the first certificate of the CA bundle in the ziti identity (id.ca) expires (Unix time).", t.IdentityCANotAfter},
		{"bao_ca_expiry_timestamp_seconds", "When the first certificate of bao.ca_file expires (Unix time).", t.BaoCANotAfter},
	} {
		if !h.at.IsZero() {
			gauge(h.name, h.help, seconds(h.at))
		}
	}

	st := t.State
	if st == nil {
		return
	}
	if st.Identity != nil {
		failures := 0
		if r := st.Identity.Renewal; r != nil {
			failures = r.Failures
		}
		gauge("identity_renewal_failures", "Failed renewals of the identity's certificate in a row (0: none failing).", float64(failures))
	}
	if st.LastTickOKAt != nil {
		gauge("last_success_timestamp_seconds", "When the last tick that did its work and exited 0 ended (Unix time).", seconds(*st.LastTickOKAt))
	}
	for _, r := range Results {
		gauge("last_result", "1 for the result the agent last recorded (and reported), 0 for the others.", boolean(st.LastResult == r), "result", r)
	}
	if st.LastResult == protocol.ResultFailed || st.LastResult == protocol.ResultRefused {
		gauge("failing_info", "The sha the last failed or refused attempt was for.", 1, "sha", shaLabel(st.LastSha), "result", st.LastResult)
	}
	if tok := st.Token; tok != nil && tok.TTLSec > 0 && !tok.ObtainedAt.IsZero() {
		left := time.Duration(tok.TTLSec)*time.Second - t.End.Sub(tok.ObtainedAt)
		gauge("token_ttl_seconds", "Seconds the agent's OpenBao token has left, by where it came from (bootstrap or lease).", max(left.Seconds(), 0), "source", sourceLabel(tok.Source))
	}
	until := 0.0
	if b := st.LeaseBackoff; b.Holds(t.End) {
		until = seconds(b.Until)
	}
	gauge("lease_backoff_until_timestamp_seconds", "Until when no new lease is asked for after OpenBao refused a lease login (0: no back-off).", until)
	counter("applies_total", "Releases applied.", st.Counters.Applies)
	counter("failures_total", "Attempts reported failed.", st.Counters.Failures)
	counter("refusals_total", "Bundles refused.", st.Counters.Refusals)
	counter("leases_total", "Deploy grants leased from tenancy.", st.Counters.Leases)
	counter("drift_corrections_total", "Drift corrections that ran compose up of the applied release (a container stopped, removed or replaced by hand).", st.Counters.DriftCorrections)
	holdUntil, deferredUntil := 0.0, 0.0
	if h := st.Hold; h.Active(t.End) {
		holdUntil = seconds(h.Until)
	}
	if d := st.Deferred; d != nil {
		deferredUntil = seconds(d.Until)
	}
	gauge("hold_until_timestamp_seconds", "Until when a human's hold (monky-deployd hold) keeps the agent from changing anything (0: not held).", holdUntil)
	gauge("deferred_until_timestamp_seconds", "Until when a change to the running release waits for its apply window (0: nothing waits).", deferredUntil)
	if b := st.Backoff; b != nil && b.Sha != "" {
		gauge("deploy_backoff_attempts", "Failed applies of the desired sha the agent is backing off from.", float64(b.Attempts), "sha", shaLabel(b.Sha))
		gauge("deploy_backoff_next_attempt_timestamp_seconds", "When the backing-off sha is tried next (Unix time).", seconds(b.NextAttemptAt), "sha", shaLabel(b.Sha))
		gauge("deploy_reverted_healthy", "1 when the release brought back after the failure came up healthy, 0 when none was or it did not.",
			boolean(b.RevertedTo != "" && b.RevertHealthy != nil && *b.RevertHealthy))
	}
}

func appliedSha(t Tick) string {
	if t.State == nil {
		return ""
	}
	return shaLabel(t.State.AppliedSha)
}

// shaLabel: anything but a plain hex sha is "invalid", so a damaged state.json cannot inject labels.
func shaLabel(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 64 {
		return "invalid"
	}
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return "invalid"
		}
	}
	return s
}

// sourceLabel bounds the token source to the values the agent writes.
func sourceLabel(s string) string {
	switch s {
	case state.SourceBootstrap, state.SourceLease:
		return s
	}
	return "unknown"
}
