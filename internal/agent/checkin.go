package agent

import (
	"context"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/state"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/version"
)

// checkin tells tenancy what the box runs and asks what to do. It carries the telemetry fleetctl
// shows: among it the timer's state, so a box whose timer an upgrade disabled is seen for what
// it is while its last check-ins are still fresh.
func (a *Agent) checkin(ctx context.Context) (*protocol.CheckinResponse, error) {
	req := a.checkinRequest(ctx)
	var resp *protocol.CheckinResponse
	err := a.withAuth(ctx, "tenancy: checkin", func(tok secret.Value) error {
		var err error
		resp, err = a.deps.Tenancy.Checkin(ctx, tok, req)
		return err
	})
	if err != nil {
		return nil, err
	}
	a.log.Info("checkin: action=" + resp.Action + " desired=" + short(resp.DesiredSha) + " applied=" + short(a.st.AppliedSha))
	if a.st.PendingUpgradeFrom != "" {
		a.log.Info("first check-in since the upgrade", "upgraded_from", a.st.PendingUpgradeFrom, "version", version.Version)
	}
	a.st.CheckinSucceeded(a.deps.Now().UTC())
	return resp, a.saveState()
}

func (a *Agent) checkinRequest(ctx context.Context) protocol.CheckinRequest {
	var timer *protocol.Timer
	if a.deps.Timer != nil {
		timer = a.deps.Timer(ctx)
	}
	return CheckinRequest(a.cfg, a.st, Telemetry{Now: a.deps.Now(), Hostname: a.deps.Hostname, Timer: timer, Disk: a.deps.Disk})
}

// Telemetry is what a check-in reports beyond config and state.
type Telemetry struct {
	Now      time.Time
	Hostname string
	Timer    *protocol.Timer
	// Disk measures the image storage; nil leaves disk_free_bytes null.
	Disk interface {
		Tightest(paths []string) (int64, []diskspace.Measure, error)
	}
}

// CheckinRequest is the check-in a tick sends for cfg and st. `monky-deployd doctor` sends the
// same one, so that its check-in leaves tenancy's view of the box as the last tick left it.
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
	}
	if st.AppliedSha != "" {
		s := st.AppliedSha
		req.AppliedSha = &s
	}
	if tok := st.Token; tok != nil && tok.TTLSec > 0 {
		left := max(tok.TTLSec-int64(t.Now.Sub(tok.ObtainedAt)/time.Second), 0)
		req.TokenTTLSec = &left
	}
	// Disk and docker facts come from the last `docker info` the agent made (refreshed on every
	// apply): a converged tick stays one check-in, one `compose ps` and one report.
	if st.DockerRootDir != "" && t.Disk != nil {
		if free, _, err := t.Disk.Tightest(storagePaths(cfg, st.DockerRootDir)); err == nil {
			req.DiskFreeBytes = &free
		}
	}
	return req
}

// storagePaths are the filesystems a pull fills: docker's data-root and containerd's root.
func storagePaths(cfg *config.Config, dockerRoot string) []string {
	paths := []string{dockerRoot}
	if cfg.ContainerdRoot != "" && cfg.ContainerdRoot != dockerRoot {
		paths = append(paths, cfg.ContainerdRoot)
	}
	return paths
}

func short(sha string) string {
	if sha == "" {
		return "-"
	}
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
