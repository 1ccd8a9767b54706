// Package protocol holds the wire types of docs/PROTOCOL.md and docs/FLEET-API.md, shared by the
// agent, fleetctl and the fakes, so that no side drifts.
package protocol

import (
	"cmp"
	"encoding/json"
	"fmt"
	"regexp"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
)

// Actions tenancy answers a check-in with.
const (
	ActionApply = "apply"
	ActionNone  = "none"
	ActionDown  = "down"
)

// MaxHealthyTimeoutS caps healthy_timeout_s: a tick may wait twice (apply, revert) after a pull
// within the unit's 1h TimeoutStartSec, or systemd kills it with nothing reported.
const MaxHealthyTimeoutS = 1800

// Results the agent reports.
const (
	ResultApplied   = "applied"
	ResultFailed    = "failed"
	ResultRefused   = "refused"
	ResultHealthy   = "healthy"
	ResultUnhealthy = "unhealthy"
	ResultDown      = "down"
)

// Error codes tenancy sends, and the refusal codes the agent reports.
const (
	CodeUnauthenticated  = "AGENT_UNAUTHENTICATED"
	CodeEnvMismatch      = "AGENT_ENV_MISMATCH"
	CodeLeaseRateLimited = "LEASE_RATE_LIMITED"
	CodeBackendUnknown   = "BACKEND_UNKNOWN"

	CodeBundleInvalid     = "BUNDLE_INVALID"
	CodeBundleShaMismatch = "BUNDLE_SHA_MISMATCH"
	CodeManifestPath      = "MANIFEST_PATH"
	CodePrivileged        = "PRIVILEGED_REFUSED"
	CodeRollback          = "ROLLBACK_REFUSED"
	CodeDisk              = "DISK_INSUFFICIENT"
	CodeEnvIncomplete     = "ENV_INCOMPLETE"
	CodeEnvUnsafeValue    = "ENV_UNSAFE_VALUE"
	CodeLeaseShape        = "LEASE_SHAPE"
)

// Refusal is a bundle the agent will not run, reported `CODE: detail` with result `refused`
// (`failed` for LEASE_SHAPE); nothing is started, leased or read.
type Refusal struct {
	Code   string
	Detail string
}

func (r *Refusal) Error() string { return r.Code + ": " + r.Detail }

// Refuse builds a *Refusal with a formatted detail.
func Refuse(code, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Timer is the agent's systemd timer as last seen; null without systemd: the agent never guesses.
type Timer struct {
	Unit       string  `json:"unit,omitempty"`
	Enabled    *bool   `json:"enabled"`
	Active     *bool   `json:"active"`
	NextElapse *string `json:"next_elapse"`
	ObservedAt *string `json:"observed_at,omitempty"`
}

// CheckinRequest is POST /v1/agent/checkin.
type CheckinRequest struct {
	EnvID         string  `json:"env_id"`
	AppliedSha    *string `json:"applied_sha"`
	AgentVersion  string  `json:"agent_version"`
	Transport     string  `json:"transport"`
	Hostname      string  `json:"hostname"`
	LastResult    string  `json:"last_result,omitempty"`
	Timer         *Timer  `json:"timer"`
	TokenTTLSec   *int64  `json:"token_ttl_s"`
	DiskFreeBytes *int64  `json:"disk_free_bytes"`
	DockerVersion string  `json:"docker_version,omitempty"`
	UpgradedFrom  string  `json:"upgraded_from,omitempty"`
	// A failed desired sha backing off (left out when none), and the release its failure brought back.
	FailedSha     string `json:"failed_sha,omitempty"`
	Attempts      int    `json:"attempts,omitempty"`
	NextAttemptAt string `json:"next_attempt_at,omitempty"`
	RevertedTo    string `json:"reverted_to,omitempty"`
	RevertHealthy *bool  `json:"revert_healthy,omitempty"`

	// Operator truth (issue 20): what a SILENT box's next step is decided from, and why a deploy
	// failed, kept past the tick that failed.
	// TickID names this tick; every journal line of it ends in tick_id=<TickID>.
	TickID string `json:"tick_id,omitempty"`
	// LastExitCode is the exit code of the tick before this one (absent: none recorded yet).
	LastExitCode *int `json:"last_exit_code,omitempty"`
	// ApplyTimeoutS is how long an apply this tick starts may run before the unit stops it.
	ApplyTimeoutS int `json:"apply_timeout_s,omitempty"`
	// LastFailure is the last failed or refused deploy, until a later success makes it moot.
	LastFailure *Failure `json:"last_failure,omitempty"`
	// Issue 22: a human's hold while it runs, and until when a change waits for its apply window.
	Hold          *Hold  `json:"hold,omitempty"`
	DeferredUntil string `json:"deferred_until,omitempty"`
}

// Hold is a human's "wait" on a box (`monky-deployd hold`); times in RFC 3339 UTC.
type Hold struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
	Since  string `json:"since"`
	Until  string `json:"until"`
}

// TickTimeoutS is the unit's TimeoutStartSec (monky-deployd.service): a tick, an apply and its
// health wait included, is killed after an hour, and the next tick counts its apply as failed.
const TickTimeoutS = 3600

// Failure is a deploy that failed or was refused: the last one, as the agent keeps it in
// state.json and sends it in its check-ins until it no longer matters (PROTOCOL.md, section 5).
type Failure struct {
	Sha string `json:"sha"`
	// Code is the refusal code (PRIVILEGED_REFUSED, …) or the step that failed (PULL_FAILED, …).
	Code string `json:"code"`
	// Detail is the report's detail: redacted, at most MaxDetail bytes.
	Detail string `json:"detail"`
	// At is when it failed (RFC 3339, UTC).
	At string `json:"at"`
	// Attempts counts the failed applies of Sha in a row (1 for a refusal).
	Attempts int `json:"attempts"`
}

// Failure codes of a failed apply, by the step that failed (a refusal carries its own code).
const (
	FailStage      = "STAGE_FAILED"  // the release could not be staged or promoted
	FailPull       = "PULL_FAILED"   // compose pull
	FailUp         = "UP_FAILED"     // compose up
	FailHealthWait = "HEALTH_FAILED" // the wait for health itself failed
	FailUnhealthy  = "UNHEALTHY"     // not healthy within healthy_timeout_s
	FailKilled     = "APPLY_KILLED"  // the tick was killed during up or the health wait
	FailDown       = "DOWN_FAILED"   // compose down of a retire
	FailOther      = "FAILED"        // anything else (a local fault, an unusable answer)
)

// Vault is the OpenBao coordinates tenancy hands out with a check-in.
type Vault struct {
	Addr      string `json:"addr,omitempty"`
	Mount     string `json:"mount,omitempty"`
	Prefix    string `json:"prefix,omitempty"`
	AuthMount string `json:"auth_mount,omitempty"`
	AuthRole  string `json:"auth_role,omitempty"`
}

// CheckinResponse is the 200 answer to a check-in.
type CheckinResponse struct {
	EnvID            string `json:"env_id"`
	DesiredSha       string `json:"desired_sha"`
	Action           string `json:"action"`
	PurgeVolumes     bool   `json:"purge_volumes"`
	BundleURL        string `json:"bundle_url"`
	CheckinIntervalS int    `json:"checkin_interval_s"`
	Vault            Vault  `json:"vault"`

	// Issue 22: apply windows for this tick, replacing the config's when present, and an
	// emergency change that ignores them.
	ApplyWindows   *[]string `json:"apply_windows,omitempty"`
	ApplyWindowsTZ *string   `json:"apply_windows_tz,omitempty"`
	IgnoreWindow   bool      `json:"ignore_window,omitempty"`
}

// BundleBody is the body of GET {bundle_url}: every file of the bundle by relative path.
type BundleBody struct {
	Files map[string]string `json:"files"`
}

// LeaseRequest is POST /v1/agent/lease.
type LeaseRequest struct {
	EnvID  string `json:"env_id"`
	Reason string `json:"reason"`
}

// LeaseResponse is a lease's 200; WrappingToken and RoleID only spot an AppRole-era tenancy (LEASE_SHAPE).
type LeaseResponse struct {
	EnvID         string `json:"env_id"`
	LoginJWT      string `json:"login_jwt"`
	TTLSec        int    `json:"ttl_s"`
	Mount         string `json:"mount"`
	Role          string `json:"role"`
	Addr          string `json:"addr"`
	Vault         *Vault `json:"vault,omitempty"`
	WrappingToken string `json:"wrapping_token,omitempty"`
	RoleID        string `json:"role_id,omitempty"`
}

// Container is one container of the compose project as the agent saw it.
type Container struct {
	Service string `json:"service"`
	Name    string `json:"name"`
	State   string `json:"state"`
	Health  string `json:"health"`
	// ConfigHash is compose's com.docker.compose.config-hash label ("" when unknown): what drift
	// correction compares; never sent.
	ConfigHash string `json:"-"`
}

// Report is POST /v1/agent/report.
type Report struct {
	EnvID        string      `json:"env_id"`
	Sha          string      `json:"sha"`
	Result       string      `json:"result"`
	Detail       string      `json:"detail"`
	LogTail      string      `json:"log_tail"`
	AgentVersion string      `json:"agent_version"`
	Containers   []Container `json:"containers"`
	// RevertedTo is set on a `failed` report that brought the previous release back.
	RevertedTo    string `json:"reverted_to,omitempty"`
	RevertHealthy *bool  `json:"revert_healthy,omitempty"`
	// TickID names the tick that reports (issue 20): its journal lines end in tick_id=<TickID>.
	TickID string `json:"tick_id,omitempty"`
	// DriftCorrected names what a drift correction brought back (`api: exited`); issue 22.
	DriftCorrected []string `json:"drift_corrected,omitempty"`
}

// Limits on what a report carries (after redaction).
const (
	MaxDetail  = 1000
	MaxLogTail = 2048
)

// ErrorBody is a tenancy error: code at top level, under `detail` (FastAPI), or a plain-string detail.
type ErrorBody struct {
	Code    string
	Message string
}

// plainCode is a plain-string detail that carries its code as "CODE: message".
var plainCode = regexp.MustCompile(`^([A-Z][A-Z0-9_]{2,}):\s*(.*)$`)

// ParseErrorBody reads any of the three shapes ("CODE: message" gives its code), strictly: an
// unreadable body is an empty ErrorBody, never an error; the HTTP status still decides.
func ParseErrorBody(b []byte) ErrorBody {
	var raw struct {
		Code    string          `json:"code"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if strictjson.Unmarshal(b, &raw) != nil {
		return ErrorBody{}
	}
	out := ErrorBody{Code: raw.Code, Message: raw.Message}
	if len(raw.Detail) > 0 {
		var nested struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		var s string
		switch {
		case strictjson.Unmarshal(raw.Detail, &nested) == nil:
			out.Code, out.Message = cmp.Or(out.Code, nested.Code), cmp.Or(out.Message, nested.Message)
		case strictjson.Unmarshal(raw.Detail, &s) == nil:
			out.Message = cmp.Or(out.Message, s)
			if m := plainCode.FindStringSubmatch(s); m != nil && out.Code == "" {
				out.Code, out.Message = m[1], m[2]
			}
		}
	}
	return out
}

// ShortSha is a bundle sha as the journal and refusal details show it: 12 hex digits, "-" for none.
func ShortSha(sha string) string {
	if sha == "" {
		return "-"
	}
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
