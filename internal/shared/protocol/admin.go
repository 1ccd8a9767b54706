package protocol

// AdminTimer is the timer state tenancy kept from an agent's last check-in.
type AdminTimer struct {
	Enabled    *bool   `json:"enabled"`
	Active     *bool   `json:"active"`
	NextElapse *string `json:"next_elapse"`
	ObservedAt *string `json:"observed_at"`
}

// AdminAgent is one element of GET /v1/admin/agents.
type AdminAgent struct {
	EnvID            string      `json:"env_id"`
	Site             string      `json:"site"`
	Identity         string      `json:"identity"`
	AgentVersion     string      `json:"agent_version"`
	Transport        string      `json:"transport"`
	Hostname         string      `json:"hostname"`
	LastCheckinAt    *string     `json:"last_checkin_at"`
	CheckinIntervalS int         `json:"checkin_interval_s"`
	DesiredSha       string      `json:"desired_sha"`
	DesiredAt        *string     `json:"desired_at"`
	AppliedSha       string      `json:"applied_sha"`
	LastResult       string      `json:"last_result"`
	LastResultAt     *string     `json:"last_result_at"`
	LastDetail       string      `json:"last_detail"`
	Timer            *AdminTimer `json:"timer"`
	TokenTTLSec      *int64      `json:"token_ttl_s"`
	DiskFreeBytes    *int64      `json:"disk_free_bytes"`
	UpgradedFrom     *string     `json:"upgraded_from"`
	// The backoff of a failing desired sha, as last checked in; null when none (or older tenancy).
	FailedSha     *string `json:"failed_sha,omitempty"`
	Attempts      int     `json:"attempts,omitempty"`
	NextAttemptAt *string `json:"next_attempt_at,omitempty"`
	RevertedTo    *string `json:"reverted_to,omitempty"`
	RevertHealthy *bool   `json:"revert_healthy,omitempty"`

	// IdentityNotAfter is the identity_not_after of the last check-in; null when it had none.
	IdentityNotAfter *string `json:"identity_not_after,omitempty"`
	// Operator truth (issue 20), from the last check-in and report; absent from older tenancies.
	// LastAction is the action tenancy answered the last check-in with (apply, none, down).
	LastAction string `json:"last_action,omitempty"`
	// CheckinTickID and ResultTickID name the ticks of the last check-in and of the last report.
	CheckinTickID string `json:"checkin_tick_id,omitempty"`
	ResultTickID  string `json:"result_tick_id,omitempty"`
	// LastExitCode is the previous tick's exit code, as the last check-in said.
	LastExitCode *int `json:"last_exit_code,omitempty"`
	// ApplyTimeoutS is how long an apply the last check-in started may run (0: unknown).
	ApplyTimeoutS int `json:"apply_timeout_s,omitempty"`
	// LastFailure is the last failed or refused deploy the last check-in carried.
	LastFailure *Failure `json:"last_failure,omitempty"`
	// Issue 22: the hold and the apply-window deferral of the last check-in; null when none.
	Hold          *Hold   `json:"hold,omitempty"`
	DeferredUntil *string `json:"deferred_until,omitempty"`
}

// MaxAgentsPageLimit is the largest `limit` GET /v1/admin/agents takes: fleetctl asks for it, so
// 10,000 envs are two pages where tenancy's default (500) made twenty chained round trips.
const MaxAgentsPageLimit = 5000

// AdminAgentsPage is GET /v1/admin/agents; Next is nil on the last page, Now measures staleness.
type AdminAgentsPage struct {
	Now    string       `json:"now"`
	Agents []AdminAgent `json:"agents"`
	Next   *string      `json:"next"`
}

// KitRequest is POST /v1/admin/backends/{env_id}/kit.
type KitRequest struct {
	Site      string `json:"site"`
	Transport string `json:"transport"`
}

// KitResponse is the revealed install kit.
type KitResponse struct {
	EnvID          string `json:"env_id"`
	Site           string `json:"site"`
	Identity       string `json:"identity"`
	BootstrapGrant string `json:"bootstrap_grant"`
	GrantExpiresAt string `json:"grant_expires_at"`
	PackageVersion string `json:"package_version"`
	TenancyService string `json:"tenancy_service"`
	TenancyPort    int    `json:"tenancy_port"`
	BaoAddr        string `json:"bao_addr"`
	BaoAuthMount   string `json:"bao_auth_mount"`
	BaoRole        string `json:"bao_role"`
}
