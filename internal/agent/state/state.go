// Package state keeps what the agent remembers between ticks (releases applied, last outcome,
// token origin, agent version) and the tick lock; internal/agent/token owns the token record.
package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
)

// Token sources.
const (
	SourceBootstrap = "bootstrap" // minted from the one-time bootstrap grant
	SourceLease     = "lease"     // minted from a grant leased from tenancy
)

// PriorVersionUnknown: the previous agent (Python, ≤ 0.1.9) recorded no version.
const PriorVersionUnknown = "unknown"

// State is <state_dir>/state.json; the zero value is a box that never ran the agent.
type State struct {
	EnvID      string `json:"env_id,omitempty"`
	AppliedSha string `json:"applied_sha,omitempty"`
	// History: every sha ever applied, oldest first, each once, so the tail is the newest N (pruning
	// must never delete the release running after a rollback).
	History    []string `json:"history,omitempty"`
	LastResult string   `json:"last_result,omitempty"`
	// LastDetail is the detail of the last report (the Python agent called it last_error).
	LastDetail string     `json:"last_detail,omitempty"`
	LastSha    string     `json:"last_sha,omitempty"`
	Token      *TokenMeta `json:"token,omitempty"`
	// AgentVersion is the last agent version run, so the next can send `upgraded_from`.
	AgentVersion string `json:"agent_version,omitempty"`
	// PendingUpgradeFrom is cleared only once a check-in carrying it succeeded.
	PendingUpgradeFrom string `json:"pending_upgrade_from,omitempty"`
	// LastCheckinAt and LastApplyAt are nil until the first check-in / apply.
	LastCheckinAt *time.Time `json:"last_checkin_at,omitempty"`
	LastApplyAt   *time.Time `json:"last_apply_at,omitempty"`
	// DockerRootDir and DockerVersion cache the last `docker info` for converged ticks.
	DockerRootDir string     `json:"docker_root_dir,omitempty"`
	DockerVersion string     `json:"docker_version,omitempty"`
	DockerInfoAt  *time.Time `json:"docker_info_at,omitempty"`
	// PendingLease: a grant whose OpenBao login failed temporarily (grant in lease.jwt); the next tick
	// logs in with it rather than leasing again, as tenancy allows 5 leases an hour (seed 0.1.6).
	// Cleared in the same write that records the resulting token.
	PendingLease *PendingLease `json:"pending_lease,omitempty"`
	// PreviousToken is set during a bao.token.new swap; a tick finding it finishes or forgets the swap.
	PreviousToken *TokenMeta `json:"previous_token,omitempty"`
	// LeaseBackoff holds off leasing after a login refusal retrying does not cure, so ticks do not
	// spend tenancy's 5 leases an hour on the same refusal.
	LeaseBackoff *LeaseBackoff `json:"lease_backoff,omitempty"`
	// DockerInfoFailedAt is when the last pre-check-in `docker info` failed; retries wait an hour.
	DockerInfoFailedAt *time.Time `json:"docker_info_failed_at,omitempty"`
	// Backoff is a failing desired sha: not retried before NextAttemptAt; nil when none is failing.
	Backoff *DeployBackoff `json:"deploy_backoff,omitempty"`
	// Applying is saved before `compose up`, cleared with the outcome: found set, Sha counts as failed.
	Applying *ApplyInProgress `json:"applying,omitempty"`
	// Counters persist the metrics counters: every tick is its own process.
	Counters Counters `json:"counters,omitzero"`
	// LastTickOKAt is when the last tick that exited 0 ended (the textfile's last success).
	LastTickOKAt *time.Time `json:"last_tick_ok_at,omitempty"`
	// Refused remembers the last refused bundle so ticks told to apply it again neither fetch, judge
	// nor lease for it (the disk verdict is re-measured each tick).
	Refused *RefusedSha `json:"refused_sha,omitempty"`
	// AppliedFiles lists the applied release's staged files, all a revert reads back (the sha covers
	// them, not ./data). Nil from an older agent: read the whole release directory strictly.
	AppliedFiles *ReleaseFiles `json:"applied_files,omitempty"`

	// Identity is the ziti identity's certificate as last read and its renewal (identity.go).
	Identity *IdentityCert `json:"identity,omitempty"`
	// Operator truth (issue 20): what the next check-ins tell tenancy, and fleetctl the operator.
	// LastFailure is the last failed or refused deploy, kept until it no longer matters (see
	// ClearFailure's callers): the reason a deploy failed must outlive the tick that failed.
	LastFailure *Failure `json:"last_failure,omitempty"`
	// LastExitCode is the exit code of the last tick that ran (nil until one was recorded).
	LastExitCode *int `json:"last_exit_code,omitempty"`
	// Issue 22: a human's hold, a change waiting for its apply window, what drift correction knows.
	// Hold is `monky-deployd hold`: until it ends (unhold, or Until passes) ticks check in and report
	// but apply, retire, revert and correct nothing.
	Hold *Hold `json:"hold,omitempty"`
	// Deferred is an apply or retire of the running release waiting for its apply window.
	Deferred *Deferral `json:"deferred,omitempty"`
	// Drift is what drift correction knows of the applied release; nil until learned.
	Drift *DriftMemory `json:"drift,omitempty"`

	// extra keeps unknown fields, so a downgrade or newer writer loses nothing on save.
	extra map[string]json.RawMessage
	// onDisk is the file's content as last loaded or saved (at onDiskPath): Save skips a write that
	// would not change it, so every field (any issue's) rides in the tick's one write.
	onDisk     []byte
	onDiskPath string
	// diskClock are onDisk's clocks; clockFile the clock file's as last read or written, clockSeen
	// whether one exists (clock.go).
	diskClock, clockFile  clocks
	clockSeen, clockWhole bool
	// snapshot is a deep copy of the State onDisk decodes to (clock.go's saveClockOnly).
	snapshot *State
	// fromReserve: Load read the reserve (reserve.go), the disk refused the last save.
	fromReserve bool
}

// TokenMeta describes the token in bao.token; never the token itself.
type TokenMeta struct {
	Source     string    `json:"source"`
	Accessor   string    `json:"accessor,omitempty"`
	ObtainedAt time.Time `json:"obtained_at,omitzero"`
	TTLSec     int64     `json:"ttl_s,omitempty"`
	// Addr is the OpenBao that minted the token ("" from older agents: the tick's is assumed).
	Addr string `json:"addr,omitempty"`

	extra map[string]json.RawMessage
}

// TTLLeft is token_ttl_s: recorded TTL less time since obtained, ≥ 0; nil without a TTL.
func (m *TokenMeta) TTLLeft(now time.Time) *int64 {
	if m == nil || m.TTLSec <= 0 {
		return nil
	}
	left := max(m.TTLSec-int64(now.Sub(m.ObtainedAt)/time.Second), 0)
	return &left
}

// PendingLease is where the leased grant in lease.jwt logs in, and until when it is valid.
type PendingLease struct {
	Addr      string    `json:"addr"`
	Mount     string    `json:"mount"`
	Role      string    `json:"role"`
	ExpiresAt time.Time `json:"expires_at"`
	// BearerAccessor is the accessor of the token that leased the grant: once that token is dropped
	// (a kit re-reveal supersedes older grants) the grant is never logged in with.
	BearerAccessor string `json:"bearer_accessor,omitempty"`
}

// RefusedSha is a refused bundle; another AgentVersion may judge by another policy, so re-judges.
type RefusedSha struct {
	Sha          string    `json:"sha"`
	Code         string    `json:"code"`
	Detail       string    `json:"detail"` // `CODE: detail`, as reported (redacted, capped)
	At           time.Time `json:"at"`
	AgentVersion string    `json:"agent_version"`
	// Disk (DISK_INSUFFICIENT only) is the free space measured at judgement, RequiredBytes the need;
	// the refusal stands while DiskChanged finds nothing changed.
	Disk          []DiskFree `json:"disk,omitempty"`
	RequiredBytes int64      `json:"required_bytes,omitempty"`
	// NeedBytes is the bundle's disk_need_bytes, so a changed disk config is noticed without a fetch.
	NeedBytes int64 `json:"need_bytes,omitempty"`
}

// DiskFree is one filesystem the disk check measured: the path asked about and bytes free.
type DiskFree struct {
	Path      string `json:"path"`
	FreeBytes int64  `json:"free_bytes"`
}

// DiskSlack is the least move of free space that re-judges a disk refusal: free space drifts
// constantly, so max(1% of the free space measured, 64 MiB).
func DiskSlack(free int64) int64 {
	return max(free/100, 64<<20)
}

// DiskChanged says why a disk refusal no longer stands (paths, or a move past DiskSlack), else "".
func (r *RefusedSha) DiskChanged(now []DiskFree) string {
	if len(r.Disk) == 0 {
		return "no measure was kept with the refusal"
	}
	then := map[string]int64{}
	for _, d := range r.Disk {
		then[d.Path] = d.FreeBytes
	}
	if len(now) != len(then) {
		return "the filesystems measured changed"
	}
	for _, d := range now {
		was, ok := then[d.Path]
		if !ok {
			return "the filesystems measured changed"
		}
		if diff := d.FreeBytes - was; diff > DiskSlack(was) || -diff > DiskSlack(was) {
			return fmt.Sprintf("free space on %s moved from %d MiB to %d MiB", d.Path, was>>20, d.FreeBytes>>20)
		}
	}
	return ""
}

// ReleaseFiles lists the bundle paths ('/'-separated, .env apart) staged for release Sha.
type ReleaseFiles struct {
	Sha   string   `json:"sha"`
	Files []string `json:"files"`
}

// StagedFiles returns the files staged for sha, nil when unknown (older agent, other sha).
func (s *State) StagedFiles(sha string) []string {
	if f := s.AppliedFiles; f != nil && sha != "" && f.Sha == sha {
		return f.Files
	}
	return nil
}

// RefusedFor returns the remembered refusal of sha by agent version v, if there is one.
func (s *State) RefusedFor(sha, v string) (*RefusedSha, bool) {
	if r := s.Refused; r != nil && sha != "" && r.Sha == sha && r.AgentVersion == v {
		return r, true
	}
	return nil, false
}

// checkRefused rejects a refused_sha no agent writes, naming the field.
func checkRefused(r *RefusedSha) error {
	if r.RequiredBytes < 0 {
		return errors.New("refused_sha: required_bytes: negative")
	}
	if r.NeedBytes < 0 {
		return errors.New("refused_sha: need_bytes: negative")
	}
	seen := map[string]bool{}
	for i, d := range r.Disk {
		switch {
		case d.Path == "":
			return fmt.Errorf("refused_sha: disk[%d]: path: empty", i)
		case seen[d.Path]:
			return fmt.Errorf("refused_sha: disk[%d]: path: %q listed twice", i, d.Path)
		case d.FreeBytes < 0:
			return fmt.Errorf("refused_sha: disk[%d]: free_bytes: negative", i)
		}
		seen[d.Path] = true
	}
	return nil
}

// checkReleaseFiles rejects an applied_files no agent writes, naming the field.
func checkReleaseFiles(f *ReleaseFiles) error {
	if f.Sha == "" {
		return errors.New("applied_files: sha: empty")
	}
	if len(f.Files) == 0 {
		return errors.New("applied_files: files: empty")
	}
	seen := map[string]bool{}
	for i, p := range f.Files {
		switch {
		case p == "":
			return fmt.Errorf("applied_files: files[%d]: empty", i)
		case seen[p]:
			return fmt.Errorf("applied_files: files[%d]: %q listed twice", i, p)
		case !fs.ValidPath(p) || p == "." || strings.ContainsRune(p, '\\') || p == ".env":
			// A bundle path as Stage writes it: relative, clean, '/'-separated, never .env.
			return fmt.Errorf("applied_files: files[%d]: %q is no staged bundle path", i, p)
		}
		seen[p] = true
	}
	return nil
}

// Failure is a deploy that failed or was refused (the check-in's last_failure).
type Failure struct {
	Sha string `json:"sha"`
	// Code is the refusal code or the step that failed (protocol.Fail*).
	Code string `json:"code"`
	// Detail is the reported detail: redacted, at most protocol.MaxDetail bytes.
	Detail   string    `json:"detail"`
	At       time.Time `json:"at"`
	Attempts int       `json:"attempts"`
}

// checkFailure rejects a last_failure no agent writes, naming the field.
func checkFailure(f *Failure) error {
	switch {
	case f.Sha == "":
		return errors.New("last_failure: sha: empty")
	case f.Code == "":
		return errors.New("last_failure: code: empty")
	case f.Attempts < 1:
		return errors.New("last_failure: attempts: want at least 1")
	case f.At.IsZero():
		return errors.New("last_failure: at: missing")
	}
	return nil
}

// NoteFailure records a failure of sha; attempts counts it as one more of the same sha and code.
func (s *State) NoteFailure(sha, code, detail string, at time.Time) *Failure {
	n := 1
	if p := s.LastFailure; p != nil && p.Sha == sha && p.Code == code {
		n = p.Attempts + min(1, math.MaxInt-p.Attempts)
	}
	s.LastFailure = &Failure{Sha: sha, Code: code, Detail: detail, At: at.UTC(), Attempts: n}
	return s.LastFailure
}

// LeaseBackoff is a hold on new leases until Until, after OpenBao refused a lease login.
type LeaseBackoff struct {
	Until time.Time `json:"until"`
	// Reason is the refused login's error (never a token or grant).
	Reason string `json:"reason,omitempty"`
}

// MaxLeaseBackoff is the longest hold on leases a refused lease login starts.
const MaxLeaseBackoff = time.Hour

// Holds reports whether no lease may be taken at now: Until is ahead, and no further ahead than
// MaxLeaseBackoff. One further came from a clock that ran ahead or a hand edit; held, it would
// stop every lease until then, and the token would expire into "re-run the install kit".
func (b *LeaseBackoff) Holds(now time.Time) bool {
	return b != nil && now.Before(b.Until) && !b.TooFar(now)
}

// TooFar reports whether Until is further ahead of now than any back-off the agent starts.
func (b *LeaseBackoff) TooFar(now time.Time) bool {
	return b != nil && b.Until.Sub(now) > MaxLeaseBackoff
}

// DeployBackoff is the failing sha and its next try; refusals are not part of it.
type DeployBackoff struct {
	Sha string `json:"sha"`
	// Attempts counts failed applies of Sha since it became desired (or the last kit re-run).
	Attempts      int       `json:"attempts"`
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// RevertedTo is the release brought back after the last failure; "" when none, NoRevert says why.
	RevertedTo string `json:"reverted_to,omitempty"`
	NoRevert   string `json:"no_revert,omitempty"`
	// RevertPending is set before a revert starts and cleared at its end, so a killed tick's is finished.
	RevertPending bool `json:"revert_pending,omitempty"`
	// RevertHealthy says whether the reverted release came up healthy; nil while none ended.
	RevertHealthy *bool `json:"revert_healthy,omitempty"`
}

// ApplyInProgress is an apply past `compose up` with no recorded outcome; it reverts to applied_sha.
type ApplyInProgress struct {
	Sha       string    `json:"sha"`
	StartedAt time.Time `json:"started_at"`
	// AutoRevert is the bundle's agent.auto_revert (nil: the config's decides).
	AutoRevert *bool `json:"auto_revert,omitempty"`
}

// Backoff schedule: 2 min after the first failure, doubling, at most an hour.
const (
	FirstBackoff = 2 * time.Minute
	MaxBackoff   = time.Hour
)

// BackoffDelay is the wait after the n-th failed attempt (n ≥ 1).
func BackoffDelay(n int) time.Duration {
	d := FirstBackoff
	for i := 1; i < n && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// NoteDeployFailure counts one more failed apply of sha; the next try is BackoffDelay later.
func (s *State) NoteDeployFailure(sha string, now time.Time) *DeployBackoff {
	n := 1
	if s.Backoff != nil && s.Backoff.Sha == sha {
		// saturated, not wrapped: a negative count would make the saved state unloadable
		n = s.Backoff.Attempts + min(1, math.MaxInt-s.Backoff.Attempts)
	}
	s.Backoff = &DeployBackoff{Sha: sha, Attempts: n, NextAttemptAt: now.Add(BackoffDelay(n)).UTC()}
	return s.Backoff
}

// BackingOff reports whether sha's next try is still ahead of now. A next try more than MaxBackoff
// ahead came from a clock turned back: it is due now.
func (s *State) BackingOff(sha string, now time.Time) bool {
	b := s.Backoff
	return b != nil && b.Sha == sha && now.Before(b.NextAttemptAt) && b.NextAttemptAt.Sub(now) <= MaxBackoff
}

// Counters only grow; a state moved aside as corrupt restarts them, which Prometheus reads as a reset.
type Counters struct {
	Applies  int64 `json:"applies,omitempty"`
	Failures int64 `json:"failures,omitempty"`
	Refusals int64 `json:"refusals,omitempty"`
	Leases   int64 `json:"leases,omitempty"`
	// DriftCorrections counts drift corrections that ran `compose up` (issue 22).
	DriftCorrections int64 `json:"drift_corrections,omitempty"`
}

// CountOutcome counts applied, failed or refused; a heartbeat is no event.
func (s *State) CountOutcome(result string) {
	switch result {
	case "applied":
		s.Counters.Applies++
	case "failed":
		s.Counters.Failures++
	case "refused":
		s.Counters.Refusals++
	}
}

// CorruptError is a state file that is no state; the caller decides whether to start afresh.
type CorruptError struct {
	Path string
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("state: %s is corrupt: %v", e.Path, e.Err)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// writeFile is atomicfile.WriteFile; tests make it meet a full disk.
var writeFile = atomicfile.WriteFile

// MaxFile bounds what is read of state.json (a busy box's is a few KiB): a larger one is an
// error, not a corrupt state, so nothing of it is moved aside.
const MaxFile = 16 << 20

// Load reads the state file: missing is the empty state, not a state is a *CorruptError (a FIFO,
// a directory or a device in its place among them). A save the full disk refused and the reserve
// kept (reserve.go) is newer than the file: it is read.
func Load(path string) (*State, error) {
	data, err := capread.File(path, MaxFile, nil) // a FIFO in its place cannot hang the tick
	var notRegular *capread.NotRegularError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		data = nil
	case errors.As(err, &notRegular):
		return nil, &CorruptError{Path: path, Err: notRegular}
	case err != nil:
		return nil, fmt.Errorf("state: read %s: %w", path, err)
	}
	over := "none"
	if data != nil {
		over = hashOf(data)
	}
	if kept, _, _, ok := readReserve(path, over); ok {
		var s State
		if err := json.Unmarshal(kept, &s); err == nil {
			s.fromReserve = true
			s.adoptClock(path, hashOf(kept))
			return &s, nil
		}
	}
	if data == nil {
		return &State{}, nil
	}
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, &CorruptError{Path: path, Err: err}
	}
	s.onDisk, s.onDiskPath, s.diskClock = data, path, s.clocks()
	s.takeSnapshot()
	s.adoptClock(path, over)
	return &s, nil
}

// FromReserve reports whether Load read the state from the reserve: state.json is behind.
func (s *State) FromReserve() bool { return s.fromReserve }

// Save writes s to path atomically, mode 0600, unless path already holds exactly this content
// (as loaded or last saved through s): a converged tick's repeated saves cost one write, or none.
// When the disk refuses (full, or over quota), the reserve keeps it: the error then matches
// ErrKeptInReserve, and Load reads it back.
func Save(path string, s *State) error {
	if saveClockOnly(path, s) {
		return nil
	}
	data, err := encode(s)
	if err != nil {
		return fmt.Errorf("state: encode: %w", err)
	}
	if path == s.onDiskPath && bytes.Equal(data, s.onDisk) {
		return nil
	}
	err = writeFile(path, data, 0o600)
	switch {
	case err == nil:
		s.onDisk, s.onDiskPath, s.diskClock = data, path, s.clocks()
		s.takeSnapshot()
		// state.json carries the clocks now; a clock file left could only contradict it.
		if rerr := os.Remove(path + ClockSuffix); rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
			s.clockSeen, s.clockWhole, s.clockFile = false, false, clocks{}
		}
		tendReserve(path, len(data))
		return nil
	case !diskFull(err):
		return fmt.Errorf("state: save: %w", err)
	}
	if rerr := keepInReserve(path, data); rerr != nil {
		return fmt.Errorf("state: save: %w; the reserve could not keep it either: %v", err, rerr)
	}
	return fmt.Errorf("state: save: %w; %w (%s) until there is space", err, ErrKeptInReserve, path+ReserveSuffix)
}

// encode is state.json's content for s.
func encode(s *State) ([]byte, error) {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// IsRollback: sha was applied before and is not current (AppliedSha, or after a retire History's tail).
func (s *State) IsRollback(sha string) bool {
	return sha != "" && sha != s.currentRelease() && slices.Contains(s.History, sha)
}

func (s *State) currentRelease() string {
	if s.AppliedSha != "" {
		return s.AppliedSha
	}
	if n := len(s.History); n > 0 {
		return s.History[n-1]
	}
	return ""
}

// AddHistory appends sha to History, or moves it to the end if it is already there.
func (s *State) AddHistory(sha string) {
	if sha != "" {
		s.History = appendUnique(s.History, sha)
	}
}

// RecordApplied notes a successful apply of sha at time at: AppliedSha, History, LastApplyAt.
func (s *State) RecordApplied(sha string, at time.Time) {
	s.AppliedSha = sha
	s.AddHistory(sha)
	s.LastApplyAt = &at
}

// NoteAgentVersion records that v runs now; a change sets PendingUpgradeFrom unless an earlier
// upgrade is unreported. A state with a deploy but no version is an upgrade from unknown.
func (s *State) NoteAgentVersion(v string) {
	switch {
	case s.AgentVersion == v:
	case s.PendingUpgradeFrom != "":
	case s.AgentVersion != "":
		s.PendingUpgradeFrom = s.AgentVersion
	case s.AppliedSha != "" || len(s.History) > 0 || s.Token != nil || s.LastResult != "":
		s.PendingUpgradeFrom = PriorVersionUnknown
	}
	s.AgentVersion = v
}

// UpgradedFromFile is where postinst leaves the version it upgraded from; only the Python agent,
// whose state.json has no version, needs it.
const UpgradedFromFile = "upgraded-from"

// ParseUpgradedFrom reads postinst's upgraded-from: one Debian version ([0-9A-Za-z.+~:-]{1,64}).
func ParseUpgradedFrom(b []byte) (string, error) {
	v := strings.TrimSuffix(string(b), "\n")
	switch {
	case v == "":
		return "", errors.New("upgraded-from: empty")
	case len(v) > 64:
		return "", fmt.Errorf("upgraded-from: %d characters, want at most 64", len(v))
	}
	for i, r := range v {
		ok := r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune(".+~:-", r)
		if !ok {
			return "", fmt.Errorf("upgraded-from: character %d (%q) is not part of a version", i+1, r)
		}
	}
	return v, nil
}

// NameUnknownPrior names an upgrade from an unknown version after prior, when known.
func (s *State) NameUnknownPrior(prior string) {
	if s.PendingUpgradeFrom == PriorVersionUnknown && prior != "" {
		s.PendingUpgradeFrom = prior
	}
}

// CheckinSucceeded notes an accepted check-in at `at`; its upgrade has been reported.
func (s *State) CheckinSucceeded(at time.Time) {
	s.LastCheckinAt = &at
	s.PendingUpgradeFrom = ""
}

// appendUnique moves sha to the end of list (adding it if absent).
func appendUnique(list []string, sha string) []string {
	out := slices.DeleteFunc(slices.Clone(list), func(x string) bool { return x == sha })
	return append(out, sha)
}

// ---- JSON ---------------------------------------------------------------------------------------

// Known keys, and the Python agent's names for them.
var stateKeys = []string{
	"env_id", "applied_sha", "history", "last_result", "last_detail", "last_sha", "token",
	"agent_version", "pending_upgrade_from", "last_checkin_at", "last_apply_at",
	"docker_root_dir", "docker_version", "docker_info_at", "pending_lease", "previous_token",
	"lease_backoff", "docker_info_failed_at", "deploy_backoff", "applying", "counters", "last_tick_ok_at", "refused_sha",
	"applied_files", "last_failure", "last_exit_code",
	"identity",
	"hold", "deferred", "drift",
}

// legacyLastError is the Python agent's LastDetail; read, never written back.
const legacyLastError = "last_error"

// UnmarshalJSON reads leniently: unknown fields kept, Python's `last_error` is LastDetail, history
// as shas or {"sha": …}, times as RFC 3339 or Unix seconds. A known field of a bad type errors.
func (s *State) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		return errors.New("not a JSON object")
	}
	var n State
	for _, f := range []struct {
		key string
		dst *string
	}{
		{"env_id", &n.EnvID}, {"applied_sha", &n.AppliedSha}, {"last_result", &n.LastResult},
		{"last_detail", &n.LastDetail}, {"last_sha", &n.LastSha}, {"agent_version", &n.AgentVersion},
		{"pending_upgrade_from", &n.PendingUpgradeFrom}, {"docker_root_dir", &n.DockerRootDir},
		{"docker_version", &n.DockerVersion},
	} {
		if err := decodeString(raw, f.key, f.dst); err != nil {
			return err
		}
	}
	if n.LastDetail == "" {
		if err := decodeString(raw, legacyLastError, &n.LastDetail); err != nil {
			return err
		}
	}
	var err error
	if n.History, err = decodeHistory(raw["history"]); err != nil {
		return err
	}
	if n.LastCheckinAt, err = decodeTimePtr(raw, "last_checkin_at"); err != nil {
		return err
	}
	if n.LastApplyAt, err = decodeTimePtr(raw, "last_apply_at"); err != nil {
		return err
	}
	if n.DockerInfoAt, err = decodeTimePtr(raw, "docker_info_at"); err != nil {
		return err
	}
	if n.DockerInfoFailedAt, err = decodeTimePtr(raw, "docker_info_failed_at"); err != nil {
		return err
	}
	if n.LastTickOKAt, err = decodeTimePtr(raw, "last_tick_ok_at"); err != nil {
		return err
	}
	if v, ok := raw["counters"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &n.Counters); err != nil {
			return fmt.Errorf("counters: %w", err)
		}
		c := n.Counters
		if c.Applies < 0 || c.Failures < 0 || c.Refusals < 0 || c.Leases < 0 || c.DriftCorrections < 0 {
			return errors.New("counters: a count is negative")
		}
	}
	if v, ok := raw["pending_lease"]; ok && !isNull(v) {
		n.PendingLease = &PendingLease{}
		if err := json.Unmarshal(v, n.PendingLease); err != nil {
			return fmt.Errorf("pending_lease: %w", err)
		}
	}
	if v, ok := raw["refused_sha"]; ok && !isNull(v) {
		n.Refused = &RefusedSha{}
		if err := json.Unmarshal(v, n.Refused); err != nil {
			return fmt.Errorf("refused_sha: %w", err)
		}
		if err := checkRefused(n.Refused); err != nil {
			return err
		}
	}
	if v, ok := raw["applied_files"]; ok && !isNull(v) {
		n.AppliedFiles = &ReleaseFiles{}
		if err := json.Unmarshal(v, n.AppliedFiles); err != nil {
			return fmt.Errorf("applied_files: %w", err)
		}
		if err := checkReleaseFiles(n.AppliedFiles); err != nil {
			return err
		}
	}
	if v, ok := raw["last_failure"]; ok && !isNull(v) {
		n.LastFailure = &Failure{}
		if err := json.Unmarshal(v, n.LastFailure); err != nil {
			return fmt.Errorf("last_failure: %w", err)
		}
		if err := checkFailure(n.LastFailure); err != nil {
			return err
		}
	}
	if v, ok := raw["last_exit_code"]; ok && !isNull(v) {
		var c int
		if err := json.Unmarshal(v, &c); err != nil || c < 0 || c > 255 {
			return errors.New("last_exit_code: want an exit code, 0 to 255")
		}
		n.LastExitCode = &c
	}
	if err := decodeIssue22(raw, &n); err != nil {
		return err
	}
	if v, ok := raw["lease_backoff"]; ok && !isNull(v) {
		n.LeaseBackoff = &LeaseBackoff{}
		if err := json.Unmarshal(v, n.LeaseBackoff); err != nil {
			return fmt.Errorf("lease_backoff: %w", err)
		}
	}
	if v, ok := raw["deploy_backoff"]; ok && !isNull(v) {
		n.Backoff = &DeployBackoff{}
		if err := json.Unmarshal(v, n.Backoff); err != nil {
			return fmt.Errorf("deploy_backoff: %w", err)
		}
		if n.Backoff.Sha == "" || n.Backoff.Attempts < 1 {
			return errors.New("deploy_backoff: want a sha and a positive attempts count")
		}
	}
	if v, ok := raw["applying"]; ok && !isNull(v) {
		n.Applying = &ApplyInProgress{}
		if err := json.Unmarshal(v, n.Applying); err != nil {
			return fmt.Errorf("applying: %w", err)
		}
		if n.Applying.Sha == "" {
			return errors.New("applying: want a sha")
		}
	}
	for _, f := range []struct {
		key string
		dst **TokenMeta
	}{{"token", &n.Token}, {"previous_token", &n.PreviousToken}} {
		if v, ok := raw[f.key]; ok && !isNull(v) {
			*f.dst = &TokenMeta{}
			if err := json.Unmarshal(v, *f.dst); err != nil {
				return fmt.Errorf("%s: %w", f.key, err)
			}
		}
	}
	if n.Identity, err = decodeIdentity(raw["identity"]); err != nil {
		return err
	}
	for _, k := range append(stateKeys, legacyLastError) {
		delete(raw, k)
	}
	if len(raw) > 0 {
		n.extra = raw
	}
	*s = n
	return nil
}

// MarshalJSON writes the known fields over the preserved unknown ones.
func (s State) MarshalJSON() ([]byte, error) {
	type plain State // no methods: no recursion
	return mergeExtra(plain(s), s.extra)
}

// UnmarshalJSON reads token metadata leniently; Python's `ttl` is TTLSec.
func (m *TokenMeta) UnmarshalJSON(data []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return err
	}
	if raw == nil {
		return errors.New("not a JSON object")
	}
	var n TokenMeta
	if err := decodeString(raw, "source", &n.Source); err != nil {
		return err
	}
	if err := decodeString(raw, "accessor", &n.Accessor); err != nil {
		return err
	}
	if err := decodeString(raw, "addr", &n.Addr); err != nil {
		return err
	}
	var err error
	if n.ObtainedAt, err = decodeTime(raw, "obtained_at"); err != nil {
		return err
	}
	for _, k := range []string{"ttl_s", "ttl"} {
		if v, ok := raw[k]; ok && !isNull(v) {
			var f float64
			if err := json.Unmarshal(v, &f); err != nil || f < 0 || f > maxUnix {
				return fmt.Errorf("%s: want a number of seconds", k)
			}
			n.TTLSec = int64(f)
			break
		}
	}
	for _, k := range []string{"source", "accessor", "addr", "obtained_at", "ttl_s", "ttl"} {
		delete(raw, k)
	}
	if len(raw) > 0 {
		n.extra = raw
	}
	*m = n
	return nil
}

// MarshalJSON writes the known fields over the preserved unknown ones.
func (m TokenMeta) MarshalJSON() ([]byte, error) {
	type plain TokenMeta
	return mergeExtra(plain(m), m.extra)
}

func mergeExtra(known any, extra map[string]json.RawMessage) ([]byte, error) {
	data, err := json.Marshal(known)
	if err != nil || len(extra) == 0 {
		return data, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	for k, v := range extra {
		if _, ok := fields[k]; !ok {
			fields[k] = v
		}
	}
	return json.Marshal(fields) // map keys come out sorted: a stable file
}

func isNull(v json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(v), []byte("null")) }

func decodeString(raw map[string]json.RawMessage, key string, dst *string) error {
	v, ok := raw[key]
	if !ok || isNull(v) {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return fmt.Errorf("%s: want a string", key)
	}
	return nil
}

func decodeHistory(v json.RawMessage) ([]string, error) {
	if v == nil || isNull(v) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return nil, errors.New("history: want a list")
	}
	var out []string
	for i, it := range items {
		var sha string
		if err := json.Unmarshal(it, &sha); err != nil {
			var obj struct {
				Sha *string `json:"sha"`
			}
			if err := json.Unmarshal(it, &obj); err != nil || obj.Sha == nil {
				return nil, fmt.Errorf("history[%d]: want a sha", i)
			}
			sha = *obj.Sha
		}
		if sha != "" {
			out = appendUnique(out, sha)
		}
	}
	return out, nil
}

// naiveLayouts are zoneless timestamps (Python's naive isoformat), taken as UTC.
var naiveLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999"}

func decodeTime(raw map[string]json.RawMessage, key string) (time.Time, error) {
	v, ok := raw[key]
	if !ok || isNull(v) {
		return time.Time{}, nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return time.Time{}, fmt.Errorf("%s: want a time", key)
		}
		return unixTime(key, f)
	}
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02 15:04:05.999999999Z07:00", s); err == nil {
		return t, nil
	}
	for _, l := range naiveLayouts {
		if t, err := time.ParseInLocation(l, s, time.UTC); err == nil {
			return t, nil
		}
	}
	if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
		return unixTime(key, f)
	}
	return time.Time{}, fmt.Errorf("%s: want a time", key)
}

func decodeTimePtr(raw map[string]json.RawMessage, key string) (*time.Time, error) {
	t, err := decodeTime(raw, key)
	if err != nil || t.IsZero() {
		return nil, err
	}
	return &t, nil
}

// unixTime converts Unix seconds (Python's time.time()), refusing values no clock produces.
func unixTime(key string, f float64) (time.Time, error) {
	if f < 0 || f > maxUnix {
		return time.Time{}, fmt.Errorf("%s: %v is not a plausible Unix time", key, f)
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC(), nil
}

// maxUnix is the year 5138: far past any real timestamp, far inside int64.
const maxUnix = 1e11
