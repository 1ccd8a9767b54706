// Package report joins tenancy's agents and the controller's host identities into fleetctl's
// status document (a verdict per env) and the gate's blockers, as JSON and tables.
package report

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Schema changes only if a field changes meaning or goes away; new fields keep the number.
const Schema = 1

// Document is the status of the fleet: `fleetctl status -o json`.
type Document struct {
	Schema int `json:"schema"`
	// Now is tenancy's clock, against which every age was measured.
	Now string `json:"now"`
	// Summary counts envs per verdict (every verdict is present, zero or not).
	Summary map[string]int `json:"summary"`
	Envs    []Env          `json:"envs"`
}

// Env is one row: an env tenancy knows, or an orphan identity.
type Env struct {
	EnvID    string   `json:"env_id"`
	Site     string   `json:"site"`
	Verdict  string   `json:"verdict"`
	Reasons  []string `json:"reasons"`
	NextStep string   `json:"next_step"`

	LastCheckinAt    *string `json:"last_checkin_at"`
	CheckinAgeS      *int64  `json:"checkin_age_s"`
	CheckinIntervalS int     `json:"checkin_interval_s"`
	StaleAfterS      int64   `json:"stale_after_s"`
	AgentVersion     string  `json:"agent_version"`
	Transport        string  `json:"transport"`
	Hostname         string  `json:"hostname"`

	Identity          string   `json:"identity"`
	IdentityID        *string  `json:"identity_id"`
	MeshOnline        *bool    `json:"mesh_online"`
	RoleAttributes    []string `json:"role_attributes"`
	MissingAttributes []string `json:"missing_attributes"`
	MeshHostname      string   `json:"mesh_hostname"`
	SDKVersion        string   `json:"sdk_version"`

	AppliedSha    string               `json:"applied_sha"`
	DesiredSha    string               `json:"desired_sha"`
	DesiredAt     *string              `json:"desired_at"`
	LastResult    string               `json:"last_result"`
	LastResultAt  *string              `json:"last_result_at"`
	LastDetail    string               `json:"last_detail"`
	Timer         *protocol.AdminTimer `json:"timer"`
	TokenTTLS     *int64               `json:"token_ttl_s"`
	DiskFreeBytes *int64               `json:"disk_free_bytes"`
	UpgradedFrom  *string              `json:"upgraded_from"`
	// The backoff of a failing desired sha, as last checked in (null and 0 when none).
	FailedSha     *string `json:"failed_sha"`
	Attempts      int     `json:"attempts"`
	NextAttemptAt *string `json:"next_attempt_at"`
	RevertedTo    *string `json:"reverted_to"`
	RevertHealthy *bool   `json:"revert_healthy"`

	// Cert is the identity certificate's horizon (cert.go); null when neither source knows it.
	Cert *CertHorizon `json:"cert"`
	// Operator truth (issue 20): what a stale env's next step was decided from, the last failure,
	// and the tick ids that lead to the box's journal (null and "" when the agent did not say).
	// StaleCause names the evidence behind a SILENT or OFFLINE env's next step (verdict.Causes).
	StaleCause    string            `json:"stale_cause"`
	LastAction    string            `json:"last_action"`
	CheckinTickID string            `json:"checkin_tick_id"`
	ResultTickID  string            `json:"result_tick_id"`
	LastExitCode  *int              `json:"last_exit_code"`
	ApplyTimeoutS int               `json:"apply_timeout_s"`
	LastFailure   *protocol.Failure `json:"last_failure"`
	// EnrollmentPending: the identity's one-time enrolment token is unused (the kit was not run).
	EnrollmentPending *bool `json:"enrollment_pending"`

	// short is the next step as the 120-column table shows it; the JSON carries NextStep whole.
	short string
	// Issue 22: a human's hold and the apply-window deferral, as last checked in (null when none).
	Hold          *protocol.Hold `json:"hold"`
	DeferredUntil *string        `json:"deferred_until"`
}

// Options select and judge the rows.
type Options struct {
	EnvGlob string // see Keeps
	// Orphans lists identities tenancy does not know; off when the listing was filtered by site.
	Orphans    bool
	Thresholds verdict.Thresholds
	// Verdicts, when not empty, keeps only envs with one of these verdicts (status --verdict).
	Verdicts map[verdict.Verdict]bool
}

// Keeps reports whether glob ("" for all, else path.Match) keeps env; a bad glob keeps nothing.
func Keeps(glob, env string) bool {
	if glob == "" {
		return true
	}
	ok, _ := path.Match(glob, env)
	return ok
}

// IdentityOf is the identity an agent is judged by: tenancy's, else monky-host.<env_id>.
func IdentityOf(a protocol.AdminAgent) string {
	if a.Identity != "" {
		return a.Identity
	}
	return ziti.IdentityName(a.EnvID)
}

// Build joins both sources. Every age is measured against agents.Now, tenancy's clock.
func Build(agents *admin.Agents, identities []ziti.Identity, opts Options) (*Document, error) {
	if opts.EnvGlob != "" {
		if _, err := path.Match(opts.EnvGlob, ""); err != nil {
			return nil, fmt.Errorf("report: --env %q: %w", opts.EnvGlob, err)
		}
	}
	byName := make(map[string]*ziti.Identity, len(identities))
	for i := range identities {
		byName[identities[i].Name] = &identities[i]
	}
	now := agents.Now.UTC()
	doc := &Document{Schema: Schema, Now: now.Format(time.RFC3339), Summary: map[string]int{}, Envs: make([]Env, 0, len(agents.Agents))}
	for _, v := range verdict.All() {
		doc.Summary[string(v)] = 0
	}
	claimed := map[string]bool{}
	for _, a := range agents.Agents {
		name := IdentityOf(a)
		claimed[name] = true
		if !Keeps(opts.EnvGlob, a.EnvID) {
			continue
		}
		va, err := agentInput(a)
		if err != nil {
			return nil, err
		}
		in := verdict.Input{Agent: va}
		id := byName[name]
		cert, err := certOf(a, id, now)
		if err != nil {
			return nil, err
		}
		in.Cert = cert
		if id != nil {
			in.Mesh = &verdict.Mesh{Name: id.Name, MissingAttributes: ziti.MissingAttributes(id.RoleAttributes), Online: id.Online}
		}
		res := verdict.Evaluate(in, now, opts.Thresholds)
		e := Env{
			EnvID: a.EnvID, Site: a.Site, Identity: name,
			LastCheckinAt: a.LastCheckinAt, CheckinIntervalS: a.CheckinIntervalS, AgentVersion: a.AgentVersion,
			Transport: a.Transport, Hostname: a.Hostname,
			AppliedSha: a.AppliedSha, DesiredSha: a.DesiredSha, DesiredAt: a.DesiredAt,
			LastResult: a.LastResult, LastResultAt: a.LastResultAt, LastDetail: a.LastDetail,
			Timer: a.Timer, TokenTTLS: a.TokenTTLSec, DiskFreeBytes: a.DiskFreeBytes, UpgradedFrom: a.UpgradedFrom,
			FailedSha: a.FailedSha, Attempts: a.Attempts, NextAttemptAt: a.NextAttemptAt, RevertedTo: a.RevertedTo, RevertHealthy: a.RevertHealthy,
			LastAction: a.LastAction, CheckinTickID: a.CheckinTickID, ResultTickID: a.ResultTickID, LastExitCode: a.LastExitCode,
			ApplyTimeoutS: a.ApplyTimeoutS, LastFailure: a.LastFailure,
			Hold: a.Hold, DeferredUntil: a.DeferredUntil,
		}
		setMesh(&e, id)
		setResult(&e, res)
		e.Cert = certHorizon(cert, now)
		doc.add(e, opts)
	}
	if opts.Orphans {
		for i := range identities {
			id := &identities[i]
			env, ok := ziti.EnvOf(id.Name)
			if !ok || claimed[id.Name] || !Keeps(opts.EnvGlob, env) {
				continue
			}
			res := verdict.Evaluate(verdict.Input{Mesh: &verdict.Mesh{Name: id.Name, Online: id.Online}}, now, opts.Thresholds)
			e := Env{EnvID: env, Identity: id.Name}
			orphanCert, _ := certOf(protocol.AdminAgent{}, id, now)
			e.Cert = certHorizon(orphanCert, now)
			setMesh(&e, id)
			setResult(&e, res)
			doc.add(e, opts)
		}
	}
	// The worst first: the verdict order is the severity order, then env ids.
	sort.SliceStable(doc.Envs, func(i, j int) bool {
		a, b := &doc.Envs[i], &doc.Envs[j]
		if ra, rb := verdict.Rank(verdict.Verdict(a.Verdict)), verdict.Rank(verdict.Verdict(b.Verdict)); ra != rb {
			return ra < rb
		}
		return a.EnvID < b.EnvID
	})
	return doc, nil
}

// BackingOff reports whether the env's desired sha failed and waits for its next try.
func (e Env) BackingOff() bool {
	return e.FailedSha != nil && *e.FailedSha != "" && *e.FailedSha == e.DesiredSha
}

// Held reports whether the env's verdict is HELD: a human asked the box to wait.
func (e Env) Held() bool { return e.Verdict == string(verdict.Held) }

// Deferred reports whether the env's verdict is DEFERRED: its desired sha waits for a window.
func (e Env) Deferred() bool { return e.Verdict == string(verdict.Deferred) }

// add keeps e when --verdict does; the summary counts what is listed.
func (d *Document) add(e Env, opts Options) {
	if len(opts.Verdicts) > 0 && !opts.Verdicts[verdict.Verdict(e.Verdict)] {
		return
	}
	d.Envs = append(d.Envs, e)
	d.Summary[e.Verdict]++
}

// NotOK counts the envs whose verdict is not OK.
func (d *Document) NotOK() int {
	n := 0
	for _, e := range d.Envs {
		if e.Verdict != string(verdict.OK) {
			n++
		}
	}
	return n
}

func setMesh(e *Env, id *ziti.Identity) {
	if id == nil {
		return
	}
	zid := id.ID
	e.IdentityID = &zid
	e.MeshOnline = id.Online
	e.RoleAttributes = append([]string{}, id.RoleAttributes...)
	e.MissingAttributes = ziti.MissingAttributes(id.RoleAttributes)
	e.MeshHostname = id.Hostname
	e.SDKVersion = id.SDKVersion
	pending := id.EnrollmentPending
	e.EnrollmentPending = &pending
}

func setResult(e *Env, r verdict.Result) {
	e.Verdict = string(r.Verdict)
	e.Reasons = make([]string, len(r.Reasons))
	for i, v := range r.Reasons {
		e.Reasons[i] = string(v)
	}
	e.NextStep = r.NextStep
	if r.Age != nil {
		s := int64(r.Age.Seconds())
		e.CheckinAgeS = &s
	}
	e.StaleAfterS = int64(r.StaleAfter.Seconds())
	e.StaleCause = r.Cause
	e.short = r.Short
}

func agentInput(a protocol.AdminAgent) (*verdict.Agent, error) {
	va := &verdict.Agent{
		EnvID: a.EnvID, Site: a.Site, Version: a.AgentVersion, Transport: a.Transport,
		Interval:   time.Duration(a.CheckinIntervalS) * time.Second,
		DesiredSha: a.DesiredSha, AppliedSha: a.AppliedSha,
		LastResult: a.LastResult, LastDetail: a.LastDetail,
		LastAction: a.LastAction, ApplyTimeout: time.Duration(a.ApplyTimeoutS) * time.Second, LastExitCode: a.LastExitCode,
	}
	var err error
	if va.LastResultAt, err = optTime(a.EnvID, "last_result_at", a.LastResultAt); err != nil {
		return nil, err
	}
	if f := a.LastFailure; f != nil {
		vf := &verdict.Failure{Sha: f.Sha, Code: f.Code, Detail: f.Detail, Attempts: f.Attempts}
		if vf.At, err = optTime(a.EnvID, "last_failure.at", &f.At); err != nil {
			return nil, err
		}
		va.LastFailure = vf
	}
	if va.LastCheckin, err = optTime(a.EnvID, "last_checkin_at", a.LastCheckinAt); err != nil {
		return nil, err
	}
	if va.DesiredAt, err = optTime(a.EnvID, "desired_at", a.DesiredAt); err != nil {
		return nil, err
	}
	if a.Timer != nil {
		va.TimerEnabled, va.TimerActive = a.Timer.Enabled, a.Timer.Active
	}
	if a.FailedSha != nil && *a.FailedSha != "" {
		bo := &verdict.Backoff{FailedSha: *a.FailedSha, Attempts: a.Attempts, RevertHealthy: a.RevertHealthy}
		if a.RevertedTo != nil {
			bo.RevertedTo = *a.RevertedTo
		}
		if bo.NextAttemptAt, err = optTime(a.EnvID, "next_attempt_at", a.NextAttemptAt); err != nil {
			return nil, err
		}
		va.Backoff = bo
	}
	if err := holdInput(va, a); err != nil {
		return nil, err
	}
	return va, nil
}

// holdInput reads the hold and deferral the admin parser checked (issue 22).
func holdInput(va *verdict.Agent, a protocol.AdminAgent) error {
	if h := a.Hold; h != nil {
		since, err := optTime(a.EnvID, "hold.since", &h.Since)
		if err != nil {
			return err
		}
		until, err := optTime(a.EnvID, "hold.until", &h.Until)
		if err != nil {
			return err
		}
		if since != nil && until != nil {
			va.Hold = &verdict.Hold{Reason: h.Reason, By: h.By, Since: *since, Until: *until}
		}
	}
	var err error
	va.DeferredUntil, err = optTime(a.EnvID, "deferred_until", a.DeferredUntil)
	return err
}

func optTime(env, field string, s *string) (*time.Time, error) {
	if s == nil || *s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return nil, fmt.Errorf("report: %s.%s: %w", env, field, err)
	}
	return &t, nil
}

// SummaryLine is the line under the table: `42 envs: 39 OK, 2 SILENT, 1 FAILING`.
func (d *Document) SummaryLine() string {
	n := len(d.Envs)
	noun := "envs"
	if n == 1 {
		noun = "env"
	}
	if n == 0 {
		return "0 envs"
	}
	var parts []string
	order := append([]verdict.Verdict{verdict.OK}, verdict.All()...)
	seen := map[verdict.Verdict]bool{}
	for _, v := range order {
		if seen[v] {
			continue
		}
		seen[v] = true
		if c := d.Summary[string(v)]; c > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c, v))
		}
	}
	return fmt.Sprintf("%d %s: %s", n, noun, strings.Join(parts, ", "))
}
