package tenancy

import (
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// Telemetry is what a check-in reports beyond config and state.
type Telemetry struct {
	Now      time.Time
	Hostname string
	Timer    *protocol.Timer
	// TickID names the tick (journal lines end in tick_id=…); "" for doctor's check-in.
	TickID string
	// Disk measures the image storage; nil leaves disk_free_bytes null.
	Disk interface {
		Tightest(paths []string) (int64, []diskspace.Measure, error)
	}
}

// CheckinRequest is the check-in for cfg and st, shared by tick and doctor so both look the same.
func CheckinRequest(cfg *config.Config, st *state.State, t Telemetry) protocol.CheckinRequest {
	req := protocol.CheckinRequest{
		EnvID:         cfg.EnvID,
		AgentVersion:  version.Version,
		Transport:     cfg.Transport,
		Hostname:      t.Hostname,
		LastResult:    st.LastResult,
		UpgradedFrom:  st.PendingUpgradeFrom,
		Timer:         t.Timer,
		DockerVersion: st.DockerVersion,
		TokenTTLSec:   st.Token.TTLLeft(t.Now),
	}
	if st.AppliedSha != "" {
		s := st.AppliedSha
		req.AppliedSha = &s
	}
	if bo := st.Backoff; bo != nil {
		req.FailedSha, req.Attempts = bo.Sha, bo.Attempts
		req.NextAttemptAt = bo.NextAttemptAt.UTC().Format(time.RFC3339)
		req.RevertedTo, req.RevertHealthy = bo.RevertedTo, bo.RevertHealthy
	}
	// What fleetctl decides a silent box's next step from, and why the last deploy failed.
	req.TickID, req.ApplyTimeoutS = t.TickID, protocol.TickTimeoutS
	if c := st.LastExitCode; c != nil {
		v := *c
		req.LastExitCode = &v
	}
	if f := st.LastFailure; f != nil {
		req.LastFailure = &protocol.Failure{Sha: f.Sha, Code: f.Code, Detail: f.Detail,
			At: f.At.UTC().Format(time.RFC3339), Attempts: f.Attempts}

	}
	if h := st.Hold; h.Active(t.Now) {
		req.Hold = &protocol.Hold{Reason: h.Reason, By: h.By, Since: h.Since.UTC().Format(time.RFC3339), Until: h.Until.UTC().Format(time.RFC3339)}
	}
	if d := st.Deferred; d != nil {
		req.DeferredUntil = d.Until.UTC().Format(time.RFC3339)
	}
	// Disk and docker facts come from the last `docker info` the agent made, cached in st.
	if st.DockerRootDir != "" && t.Disk != nil {
		if free, _, err := t.Disk.Tightest(cfg.StoragePaths(st.DockerRootDir)); err == nil {
			req.DiskFreeBytes = &free
		}
	}
	return req
}
