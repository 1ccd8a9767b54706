// Package tick is the tick, check-in to report in docs/PROTOCOL.md order. It decides; outside
// systems are injected interfaces declared here, so tests drive the whole tick against fakes.
package tick

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/registryauth"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// Tenancy is the control plane's agent API; errors match tenancy's sentinels or a *protocol.Refusal.
type Tenancy interface {
	Checkin(ctx context.Context, token secret.Value, req protocol.CheckinRequest) (*protocol.CheckinResponse, error)
	Bundle(ctx context.Context, token secret.Value, bundleURL string) (files map[string]string, headerSha string, err error)
	Lease(ctx context.Context, token secret.Value, envID, reason string) (*protocol.LeaseResponse, error)
	Report(ctx context.Context, token secret.Value, r protocol.Report) error
}

// Bao is one OpenBao server. Errors never carry a token or a secret value.
type Bao interface {
	token.Bao // login, lookup, renew, revoke
	ReadMany(ctx context.Context, token secret.Value, mount string, reqs []bao.KVRequest, limit int) (map[string]secret.Value, error)
}

// Docker is the docker CLI scoped to this env's project, always with the agent's DOCKER_CONFIG.
type Docker interface {
	Info(ctx context.Context) (compose.Info, error)
	// Config is `compose config --format json` of the release; output holds secrets, errors never.
	Config(ctx context.Context, dir, composeFile string) ([]byte, error)
	Pull(ctx context.Context, dir, composeFile, policy string) error
	Up(ctx context.Context, dir, composeFile string) error
	Ps(ctx context.Context, dir, composeFile string) ([]protocol.Container, error)
	WaitHealthy(ctx context.Context, dir, composeFile string, timeout time.Duration, sleep func(context.Context, time.Duration) error) (bool, []protocol.Container, error)
	Logs(ctx context.Context, dir, composeFile string, tail int) (string, error)
	Down(ctx context.Context, dir, composeFile string, volumes bool) error
	ImagePrune(ctx context.Context) error
}

// Deps is everything outside the agent's logic; the cli package and tests fill every field.
type Deps struct {
	Log     *slog.Logger
	Tenancy Tenancy
	// NewBao returns a client for an OpenBao address (config's, or a check-in's or lease's for a tick).
	NewBao func(addr string) (Bao, error)
	Docker Docker
	// Timer reads the agent's own systemd timer; fields are nil where systemd is absent.
	Timer func(ctx context.Context) *protocol.Timer
	Disk  *diskspace.Meter
	Now   func() time.Time
	// Sleep waits between looks at a starting project; nil is a real, cancellable sleep.
	Sleep    func(ctx context.Context, d time.Duration) error
	Hostname string
	// Step, when set, runs after each named step; its error aborts the tick like a crash (tests).
	Step func(name string) error

	// Identity keeps the ziti identity's certificate (identity.go); nil reads and renews nothing.
	Identity Identity
	// IsFile reports whether a host path is a regular file (the compose judgement's time zone
	// binds); nil asks the filesystem.
	IsFile func(path string) bool
	// Redact is the tick's redactor: every secret read is added to it, every journal line,
	// report and error passes it. Docker must hold the same one, so a failed command's output is
	// redacted before it is cut (compose.CmdError). Required.
	Redact *secret.Redactor
}

// errNoRedactor: Deps without a redactor would let a secret out; the tick does not start.
var errNoRedactor = errors.New("tick: no redactor in Deps")

// Options are the flags of one tick.
type Options struct {
	Prune bool
	// TickID names the tick in its check-in and report (the journal lines end in it too).
	TickID string
}

// Agent runs ticks for one config.
type Agent struct {
	cfg  *config.Config
	deps Deps
	log  *slog.Logger
	opt  Options
	// baseLog is deps.Log with the env; log is it behind the tick's redactor.
	baseLog *slog.Logger

	// per-tick
	st  *state.State
	tok *token.Session
	// dockerInfoFresh: `docker info` already ran this tick (the cache in st is current).
	dockerInfoFresh bool
	redact          *secret.Redactor
	vault           protocol.Vault
	// stateErr is the last failed state.json write (full disk): reported, exit 1; nil once one succeeds.
	stateErr error
	// attempt is the apply under way, nil outside one (see revert.go).
	attempt *applyAttempt
	// failedThisTick: this tick's apply entered the backoff, which a later re-bootstrap must not undo.
	failedThisTick bool
	// finalSaved: saveFinal wrote this tick's success stamp; nothing is left to write at its end.
	finalSaved bool
	// observed is what the tick saw for the box's metrics (metrics.go).
	observed Observed
}

// New returns an Agent for cfg.
func New(cfg *config.Config, deps Deps, opt Options) *Agent {
	base := deps.Log.With("env", cfg.EnvID)
	return &Agent{cfg: cfg, deps: deps, log: base, baseLog: base, opt: opt}
}

// Sentinel errors the exit code is decided from (see ExitCode).
var (
	// ErrFailed: the tick reported failed; the detail was logged and reported.
	ErrFailed = errors.New("failed")
	// ErrRefused: the tick refused the bundle; nothing was leased, read or started.
	ErrRefused = errors.New("refused")
	// ErrNeedsKit: no usable token and no bootstrap grant on disk.
	ErrNeedsKit = token.ErrNeedsKit
	// ErrEnvMismatch: the token belongs to another env than config's env_id.
	ErrEnvMismatch = errors.New("stopping: fix env_id in the config or re-issue the identity")
	// ErrTemporary: the mesh, tenancy or OpenBao could not be reached, or answered 5xx.
	ErrTemporary = token.ErrTemporary
)

func (a *Agent) step(name string) error {
	if a.deps.Step == nil {
		return nil
	}
	if err := a.deps.Step(name); err != nil {
		return &stepStop{name: name, err: err}
	}
	return nil
}

// stepStop is a tick stopped by Deps.Step; like a crash, it records nothing on its way out.
type stepStop struct {
	name string
	err  error
}

func (e *stepStop) Error() string { return "step " + e.name + ": " + e.err.Error() }
func (e *stepStop) Unwrap() error { return e.err }

// WithLock runs fn holding the tick lock; if another tick holds it, fn does not run (nil).
func WithLock(cfg *config.Config, log *slog.Logger, fn func() error) error {
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	release, ok, err := state.TryLock(cfg.LockPath())
	if err != nil {
		return err
	}
	if !ok {
		log.Info("another tick is running; nothing to do")
		return nil
	}
	defer release()
	return fn()
}

// Tick takes the lock and runs one tick; ExitCode(err) decides the exit.
func (a *Agent) Tick(ctx context.Context) error {
	return WithLock(a.cfg, a.log, func() error { return a.Run(ctx) })
}

// Run runs one tick; the caller holds the lock (WithLock).
func (a *Agent) Run(ctx context.Context) error {
	if err := a.step("lock"); err != nil {
		return err
	}
	if a.deps.Redact == nil {
		return errNoRedactor
	}
	var err error
	a.redact = a.deps.Redact
	// Every journal line of the tick passes the redactor, whoever wrote it.
	a.log = slog.New(secret.LogHandler(a.baseLog.Handler(), a.redact))
	a.dockerInfoFresh = false
	a.stateErr = nil
	a.removeLeftovers()
	a.attempt = nil
	a.failedThisTick = false
	a.finalSaved = false
	a.observed = Observed{}
	a.st, err = a.loadState()
	if err != nil {
		return err
	}
	a.seedHoldRedactor()
	a.noteVersion()
	if err := a.recoverIdentity(ctx); err != nil {
		return err
	}
	a.adoptVault(protocol.Vault{}) // the config's OpenBao until a check-in says otherwise
	a.tok = a.tokenSession()
	if err := a.tok.RecoverSwap(); err != nil {
		return err
	}
	a.tok.Tidy()

	err = a.redacted(a.run(ctx))
	if rerr := a.renewIdentity(ctx, err); rerr != nil {
		return rerr
	}
	var off *token.OffMesh
	if errors.As(err, &off) {
		// PROTOCOL step 2: only the check-in's transport failure is off-mesh; others keep exit 75.
		a.log.Info("laptop mode: tenancy unreachable; nothing to do", "why", a.redact.Redact(off.Err.Error()))
		err = nil
	}
	if err == nil && a.stateErr == nil && !a.finalSaved {
		_ = a.saveFinal()
	}
	if err == nil && a.stateErr != nil {
		// Work done and reported; only memory is behind, and the atomic write left the old state whole.
		a.log.Error("state.json not saved; the report went out, the next tick retries", "error", a.stateErr.Error())
		return fmt.Errorf("%w: %w", ErrFailed, a.stateErr)
	}
	return err
}

// redacted returns err with its text redacted, keeping its chain for errors.Is/As and ExitCode.
func (a *Agent) redacted(err error) error {
	if err == nil {
		return nil
	}
	return &redactedError{err: err, msg: a.redact.Redact(err.Error())}
}

type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// judgeHost is the box as the compose judgement sees it: its intercept range and files.
func (a *Agent) judgeHost() bundle.Host {
	isFile := a.deps.IsFile
	if isFile == nil {
		isFile = func(p string) bool {
			fi, err := os.Stat(p)
			return err == nil && fi.Mode().IsRegular()
		}
	}
	return bundle.Host{InterceptRange: a.cfg.InterceptPrefix, IsFile: isFile}
}

// removeLeftovers deletes temp files of killed writes in state_dir: they may hold a token.
func (a *Agent) removeLeftovers() {
	// One listing of each directory for all of them (state_dir's was read once a path).
	removed, err := atomicfile.RemoveLeftoversAll(a.cfg.StatePath(), a.cfg.StatePath()+state.ReserveSuffix, a.cfg.TokenPath(), a.files().Staged, a.files().Grant, filepath.Join(a.cfg.DockerConfigDir(), registryauth.ConfigFile), a.cfg.ZitiSessionPath())
	if err != nil {
		a.log.Warn("temp files of a killed tick could not be removed", "error", err.Error())
	}
	if len(removed) > 0 {
		a.log.Info("removed temp files a killed tick left", "removed", strings.Join(removed, ","))
	}
}

func (a *Agent) run(ctx context.Context) error {
	if err := a.tok.ForCheckin(ctx); err != nil {
		return err
	}
	if err := a.step("token"); err != nil {
		return err
	}
	a.expireHold()
	resp, err := a.checkin(ctx)
	if err != nil {
		return err
	}
	if err := a.step("checkin"); err != nil {
		return err
	}
	a.adoptVault(resp.Vault)
	if a.heldNow() {
		return a.heldTick(ctx, resp)
	}
	if a.st.Applying != nil {
		if resp.Action == protocol.ActionDown {
			a.st.Applying = nil // the retire takes the project down, whatever it was doing
		} else {
			return a.finishKilledApply(ctx)
		}
	}
	if bo := a.st.Backoff; bo != nil && bo.RevertPending && resp.Action != protocol.ActionDown {
		if err := a.finishRevert(ctx); err != nil {
			return err
		}
	}
	a.forgetBackoff(resp)
	switch resp.Action {
	case protocol.ActionNone:
		a.endDeferral("tenancy has nothing to apply")
		return a.heartbeat(ctx, resp, "")
	case protocol.ActionApply:
		if a.holdBackoff(resp) {
			return a.backingOff(ctx, resp)
		}
		if until, wait := a.deferral(resp); wait {
			return a.deferred(ctx, resp, until)
		}
		a.endDeferral("applying now")
		return a.apply(ctx, resp)
	case protocol.ActionDown:
		if until, wait := a.deferral(resp); wait {
			return a.deferred(ctx, resp, until)
		}
		a.endDeferral("retiring now")
		return a.down(ctx, resp)
	default:
		return fmt.Errorf("tenancy: checkin: action %q is not one of apply, none, down", resp.Action)
	}
}

// loadState reads state.json; an unparseable one is moved aside, not trusted or overwritten: a
// guessed applied sha could refuse a legitimate deploy as a rollback.
func (a *Agent) loadState() (*state.State, error) {
	st, err := state.Load(a.cfg.StatePath())
	var corrupt *state.CorruptError
	switch {
	case err == nil:
	case errors.As(err, &corrupt):
		aside := a.cfg.StatePath() + ".corrupt-" + a.deps.Now().UTC().Format("20060102T150405Z")
		if rerr := os.Rename(a.cfg.StatePath(), aside); rerr != nil {
			return nil, fmt.Errorf("state: %v; and moving it aside failed: %w", err, rerr)
		}
		a.log.Warn("state unreadable; moved aside, starting fresh", "error", err.Error(), "moved_to", aside)
		st = &state.State{}
	default:
		return nil, err
	}
	if st.FromReserve() {
		a.log.Warn("state.json is behind: the last save met a full disk and was kept in its reserve; read from there",
			"reserve", a.cfg.StatePath()+state.ReserveSuffix)
	}
	if st.EnvID == "" {
		st.EnvID = a.cfg.EnvID
	}
	return st, nil
}

// noteVersion records the agent's version, keeping the previous until sent as upgraded_from (how
// fleetctl's gate sees an upgrade). For the Python agent the postinst's upgraded-from names it.
func (a *Agent) noteVersion() {
	a.st.NoteAgentVersion(version.Version)
	if a.st.PendingUpgradeFrom != state.PriorVersionUnknown {
		return
	}
	path := filepath.Join(a.cfg.StateDir, state.UpgradedFromFile)
	b, err := capread.File(path, 4<<10, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	prior := ""
	if err == nil {
		prior, err = state.ParseUpgradedFrom(b)
	}
	if err != nil {
		a.log.Warn("the package's upgraded-from file is unusable; reporting the upgrade as from unknown", "path", path, "error", err.Error())
		return
	}
	a.st.NameUnknownPrior(prior)
}

// saveState writes state.json and keeps a failure in stateErr for the report and exit code.
func (a *Agent) saveState() error {
	a.stateErr = state.Save(a.cfg.StatePath(), a.st)
	return a.stateErr
}

// saveFinal is the last write of a tick that ends with exit 0: it carries the success stamp
// (last_tick_ok_at, the textfile's last success) and last_exit_code 0 with everything else, so a
// tick writes state.json once at most, and a converged one, whose check-in time and stamp alone
// moved, writes only the clock record (state.ClockSuffix). A failed write leaves the stamp as it
// was: that tick did not succeed.
func (a *Agent) saveFinal() error {
	prev, prevCode := a.st.LastTickOKAt, a.st.LastExitCode
	at, code := a.deps.Now().UTC(), 0
	a.st.LastTickOKAt, a.st.LastExitCode = &at, &code // the next check-in's last_exit_code
	if err := a.saveState(); err != nil {
		a.st.LastTickOKAt, a.st.LastExitCode = prev, prevCode
		return err
	}
	a.finalSaved = true
	return nil
}

// saveOrWarn is saveState for a tick that goes on whatever: a failure is warned about.
func (a *Agent) saveOrWarn() {
	if err := a.saveState(); err != nil {
		a.log.Warn("state not saved", "error", err.Error())
	}
}

// adoptVault takes the check-in's OpenBao coordinates for this tick; an empty v sets the config's.
func (a *Agent) adoptVault(v protocol.Vault) {
	a.vault = protocol.Vault{
		Addr:      a.cfg.Bao.Addr,
		Mount:     a.cfg.Bao.KVMount,
		Prefix:    a.cfg.EnvID + "/see",
		AuthMount: a.cfg.Bao.AuthMount,
		AuthRole:  a.cfg.Bao.Role,
	}
	adopt := func(name string, dst *string, v string) {
		if v != "" && v != *dst {
			a.log.Info("adopting OpenBao setting from tenancy for this tick", "setting", name, "value", v)
			*dst = v
		}
	}
	adopt("addr", &a.vault.Addr, v.Addr)
	adopt("mount", &a.vault.Mount, v.Mount)
	adopt("prefix", &a.vault.Prefix, v.Prefix)
	adopt("auth_mount", &a.vault.AuthMount, v.AuthMount)
	adopt("auth_role", &a.vault.AuthRole, v.AuthRole)
}
