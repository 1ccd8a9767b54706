package agent

import (
	"context"
	"time"

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
	req := protocol.CheckinRequest{
		EnvID:        a.cfg.EnvID,
		AgentVersion: version.Version,
		Transport:    a.cfg.Transport,
		Hostname:     a.deps.Hostname,
		LastResult:   a.st.LastResult,
		UpgradedFrom: a.st.PendingUpgradeFrom,
	}
	if a.st.AppliedSha != "" {
		s := a.st.AppliedSha
		req.AppliedSha = &s
	}
	if a.deps.Timer != nil {
		req.Timer = a.deps.Timer(ctx)
	}
	if t := a.st.Token; t != nil && t.TTLSec > 0 {
		left := t.TTLSec - int64(a.deps.Now().Sub(t.ObtainedAt)/time.Second)
		if left < 0 {
			left = 0
		}
		req.TokenTTLSec = &left
	}
	// Disk and docker facts come from the last `docker info` the agent made (refreshed on every
	// apply): a converged tick stays one check-in, one `compose ps` and one report.
	if a.st.DockerRootDir != "" {
		if free, _, err := a.deps.Disk.Tightest(a.storagePaths(a.st.DockerRootDir)); err == nil {
			req.DiskFreeBytes = &free
		}
	}
	req.DockerVersion = a.st.DockerVersion
	return req
}

func (a *Agent) storagePaths(dockerRoot string) []string {
	paths := []string{dockerRoot}
	if a.cfg.ContainerdRoot != "" && a.cfg.ContainerdRoot != dockerRoot {
		paths = append(paths, a.cfg.ContainerdRoot)
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
