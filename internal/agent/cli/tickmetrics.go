package cli

import (
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/metrics"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// defaultTextfileDir is used for the default textfile_dir or an unreadable config (tests override).
var defaultTextfileDir = config.DefaultTextfileDir

// tickRecord is what runTick knows of a tick when it ends.
type tickRecord struct {
	cfg   *config.Config // nil: the config could not be loaded
	start time.Time
	// ran: the tick held the lock and ran; false with a nil err is a lock held by another tick.
	ran   bool
	err   error
	agent *tick.Agent // nil when the tick never got to build one
	disk  *diskspace.Meter
}

// writeTickMetrics never changes the exit: a failure is logged, and staleness alerts.
func writeTickMetrics(log *slog.Logger, rec tickRecord) {
	end := time.Now()
	t := metrics.Tick{
		Version: version.Version, Start: rec.start, End: end,
		ExitCode: tick.ExitCode(rec.err),
		LockHeld: rec.cfg != nil && !rec.ran && rec.err == nil,
	}
	dir := defaultTextfileDir
	if cfg := rec.cfg; cfg != nil {
		t.EnvID, t.DiskFloorBytes, t.Interval = cfg.EnvID, cfg.Disk.HeadroomBytes, cfg.Interval()
		if cfg.TextfileDir != config.DefaultTextfileDir {
			dir = cfg.TextfileDir
		}
		t.State = tickState(log, rec, end)
		t.IdentityCertNotAfter, t.IdentityCANotAfter, t.BaoCANotAfter = horizons(cfg)
	}
	if rec.agent != nil {
		obs := rec.agent.Observed()
		if obs.ReportResult != "" {
			t.Report = &metrics.Report{Result: obs.ReportResult, Delivered: obs.ReportDelivered}
		}
		t.Containers = obs.Containers
	}
	if st := t.State; st != nil && st.DockerRootDir != "" {
		meter := rec.disk
		if meter == nil {
			meter = &diskspace.Meter{}
		}
		if _, measured, err := meter.Tightest(rec.cfg.StoragePaths(st.DockerRootDir)); err == nil {
			for _, m := range measured {
				t.Disk = append(t.Disk, metrics.Disk{Path: m.Path, FreeBytes: m.Free})
			}
		}
	}
	path := filepath.Join(dir, config.TextfileName)
	switch err := metrics.WriteFile(path, t); {
	case errors.Is(err, metrics.ErrNoDir):
		log.Debug("metrics: no textfile directory; textfile not written", "dir", dir)
	case err != nil:
		log.Warn("metrics: textfile not written", "path", path, "error", err.Error())
	}
}

// tickState is what the textfile shows: the state the tick left (an exit-0 tick stamped its
// success and its exit code in its last write, see tick's saveFinal: a converged tick writes
// only the clock record beside state.json), else state.json as it is. A failed tick saved what it meant to keep; only
// its exit code (the next check-in's last_exit_code) is added to that.
func tickState(log *slog.Logger, rec tickRecord, end time.Time) *state.State {
	if rec.agent != nil && rec.agent.State() != nil {
		st := rec.agent.State()
		code := tick.ExitCode(rec.err)
		if rec.err == nil {
			if st.LastExitCode == nil || *st.LastExitCode != 0 || st.LastTickOKAt == nil {
				// The tick's last write did not carry its success (it failed): try once more.
				at := end.UTC()
				st.LastExitCode, st.LastTickOKAt = &code, &at
				if err := state.Save(rec.cfg.StatePath(), st); err != nil {
					log.Warn("state not saved", "error", err.Error())
				}
			}
			return st
		}
		if disk, err := state.Load(rec.cfg.StatePath()); err == nil {
			disk.LastExitCode = &code
			if err := state.Save(rec.cfg.StatePath(), disk); err != nil {
				log.Warn("state not saved", "error", err.Error())
			}
		}
		return st
	}
	st, err := state.Load(rec.cfg.StatePath())
	if err != nil {
		return nil
	}
	return st
}

// horizons reads the credential expiries the textfile shows; an unreadable one is left out.
func horizons(cfg *config.Config) (cert, ca, baoCA time.Time) {
	if f, err := (&identity.Renewer{Path: cfg.Identity}).Read(); err == nil {
		cert = f.Leaf().NotAfter
		if len(f.CA) > 0 {
			ca = f.CA.Earliest().NotAfter
		}
	}
	if raw, err := bao.ReadCAFile(cfg.Bao.CAFile); err == nil {
		if b, err := horizon.ParsePEM(raw); err == nil {
			baoCA = b.Earliest().NotAfter
		}
	}
	return cert, ca, baoCA
}
