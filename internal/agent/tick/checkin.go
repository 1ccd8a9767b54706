package tick

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// checkin tells tenancy what the box runs and asks what to do, with fleetctl's telemetry (the
// timer's state shows a box whose timer an upgrade disabled).
func (a *Agent) checkin(ctx context.Context) (*protocol.CheckinResponse, error) {
	a.refreshDockerFacts(ctx)
	req := a.checkinRequest(ctx)
	var resp *protocol.CheckinResponse
	err := a.tok.AuthCall(ctx, "tenancy: checkin", func(tok secret.Value) error {
		var err error
		resp, err = a.deps.Tenancy.Checkin(ctx, tok, req)
		return err
	})
	if a.cfg.LaptopMode && errors.Is(err, tenancy.ErrTemporary) {
		return nil, &token.OffMesh{Err: fmt.Errorf("%w: %w", err, ErrTemporary)}
	}
	if err = a.classify("tenancy: checkin", err); err != nil {
		return nil, err
	}
	a.log.Info("checkin: action=" + resp.Action + " desired=" + protocol.ShortSha(resp.DesiredSha) + " applied=" + protocol.ShortSha(a.st.AppliedSha))
	if a.st.PendingUpgradeFrom != "" {
		a.log.Info("first check-in since the upgrade", "upgraded_from", a.st.PendingUpgradeFrom, "version", version.Version)
	}
	reported := a.st.PendingUpgradeFrom != ""
	a.st.CheckinSucceeded(a.deps.Now().UTC())
	if reported {
		// The upgrade is told: saved now, so a tick that fails later does not tell it twice. The
		// check-in's time alone rides in the tick's next write (one write a converged tick). An
		// unsavable state (full disk) must not silence the box: the report names it, exit 1.
		_ = a.saveState()
	}
	return resp, nil
}

// dockerFactsMaxAge bounds the cached `docker info`: upgrades show within hours.
const dockerFactsMaxAge = 6 * time.Hour

// dockerInfoTimeout: a hung daemon must not hold up the liveness check-in.
const dockerInfoTimeout = 10 * time.Second

// dockerInfoRetry spaces retries of a failed `docker info`: a dockerless box must not warn each tick.
const dockerInfoRetry = time.Hour

// refreshDockerFacts runs `docker info` when the cache is empty or stale; failures wait a retry.
func (a *Agent) refreshDockerFacts(ctx context.Context) {
	now := a.deps.Now().UTC()
	if at := a.st.DockerInfoAt; a.st.DockerRootDir != "" && at != nil && now.Sub(*at) < dockerFactsMaxAge && !at.After(now) {
		return
	}
	if at := a.st.DockerInfoFailedAt; at != nil && now.Sub(*at) < dockerInfoRetry && !at.After(now) {
		return
	}
	ictx, cancel := context.WithTimeout(ctx, dockerInfoTimeout)
	defer cancel()
	info, err := a.deps.Docker.Info(ictx)
	if err != nil {
		level := slog.LevelWarn
		if a.cfg.LaptopMode {
			level = slog.LevelInfo // a laptop's docker may well be stopped; its ticks stay quiet
		}
		a.log.Log(ctx, level, "docker info failed; the check-in carries no fresh docker facts, next try in an hour", "error", a.redact.Redact(err.Error()))
		a.st.DockerInfoFailedAt = &now
		a.saveOrWarn()
		return
	}
	a.noteDockerInfo(info)
	// Saved now: a failed check-in must not leave the cache empty, rerunning `docker info` each tick.
	a.saveOrWarn()
}

// noteDockerInfo caches what `docker info` said, for check-ins.
func (a *Agent) noteDockerInfo(info compose.Info) {
	if info.DockerRootDir == "" {
		info.DockerRootDir = "/var/lib/docker" // an engine that does not say: its default
	}
	now := a.deps.Now().UTC()
	a.st.DockerRootDir = info.DockerRootDir
	a.st.DockerVersion = info.ServerVersion
	a.st.DockerInfoAt = &now
	a.st.DockerInfoFailedAt = nil
	a.dockerInfoFresh = true
}

func (a *Agent) checkinRequest(ctx context.Context) protocol.CheckinRequest {
	var timer *protocol.Timer
	if a.deps.Timer != nil {
		timer = a.deps.Timer(ctx)
	}
	req := tenancy.CheckinRequest(a.cfg, a.st, tenancy.Telemetry{Now: a.deps.Now(), Hostname: a.deps.Hostname, Timer: timer, Disk: a.deps.Disk, TickID: a.opt.TickID,
		IdentityNotAfter: a.identityNotAfter()})
	if h := req.Hold; h != nil {
		// Operator text: it leaves the box through the redactor, as every line does. A mask can
		// be longer than what it hides ("日本" → "***"), and fleetctl refuses a listing holding a
		// hold past the bounds: cut back to them.
		h.Reason = clip.Runes(a.redact.Redact(h.Reason), protocol.MaxHoldReason)
		h.By = clip.Runes(a.redact.Redact(h.By), protocol.MaxHoldBy)
	}
	return req
}
