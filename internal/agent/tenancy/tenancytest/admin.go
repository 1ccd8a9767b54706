package tenancytest

import (
	"sort"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// The admin view is derived from the agent calls the fake accepted, never fed by hand: a
// fleetctl test built on it judges what the agents really said. Refused calls (401, 403, 404)
// change nothing, as they change nothing in tenancy.

func (s *Server) rememberCheckinLocked(st *envState, req protocol.CheckinRequest) {
	now := s.now()
	prev := st.lastCheckin
	st.lastCheckin, st.checkinAt = &req, now
	st.applied = ""
	if req.AppliedSha != nil {
		st.applied = *req.AppliedSha
	}
	switch {
	case req.UpgradedFrom != "":
		st.upgradedFrom = req.UpgradedFrom
	case prev != nil && prev.AgentVersion != req.AgentVersion:
		// Another version without an upgrade note (a reinstall): the old note no longer holds.
		st.upgradedFrom = ""
	}
	// Before any report, the check-in's own last_result is all tenancy knows.
	if st.resultAt.IsZero() && req.LastResult != "" {
		st.lastResult, st.resultAt = req.LastResult, now
	}
}

func (s *Server) rememberReportLocked(st *envState, rep protocol.Report) {
	st.lastResult, st.lastDetail, st.resultAt = rep.Result, rep.Detail, s.now()
	st.resultTickID = rep.TickID
	if rep.Result == protocol.ResultApplied && rep.Sha != "" {
		st.applied = rep.Sha
	}
}

func stamp(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	v := t.UTC().Format(time.RFC3339)
	return &v
}

// IdentityName is the ziti identity of env's host, as tenancy's broker names it.
func IdentityName(env string) string { return "monky-host." + env }

// AdminAgent returns env's record as tenancy's admin API lists it (GET /v1/admin/agents):
// desired sha and when it was set, and from the latest accepted check-in and report the
// agent's version, transport, hostname, applied sha, timer, token TTL, free disk, the backoff of
// a failing desired sha, last result with its detail and time. False when env is not registered.
func (s *Server) AdminAgent(env string) (protocol.AdminAgent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.envs[env]
	if st == nil {
		return protocol.AdminAgent{}, false
	}
	return s.adminLocked(env, st), true
}

// AdminAgents returns every registered env's record, sorted by env id.
func (s *Server) AdminAgents() []protocol.AdminAgent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]protocol.AdminAgent, 0, len(s.envs))
	for env, st := range s.envs {
		out = append(out, s.adminLocked(env, st))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].EnvID < out[j].EnvID })
	return out
}

func (s *Server) adminLocked(env string, st *envState) protocol.AdminAgent {
	a := protocol.AdminAgent{
		EnvID: env, Site: st.site, Identity: IdentityName(env), CheckinIntervalS: st.interval,
		DesiredSha: st.desired, DesiredAt: stamp(st.desiredAt), AppliedSha: st.applied,
		LastResult: st.lastResult, LastResultAt: stamp(st.resultAt), LastDetail: st.lastDetail,
		LastAction: st.lastAction, ResultTickID: st.resultTickID,
	}
	if st.upgradedFrom != "" {
		v := st.upgradedFrom
		a.UpgradedFrom = &v
	}
	c := st.lastCheckin
	if c == nil {
		return a
	}
	a.AgentVersion, a.Transport, a.Hostname = c.AgentVersion, c.Transport, c.Hostname
	a.LastCheckinAt = stamp(st.checkinAt)
	a.TokenTTLSec, a.DiskFreeBytes = copyInt(c.TokenTTLSec), copyInt(c.DiskFreeBytes)
	if c.FailedSha != "" {
		// The backoff is the agent's word in its latest check-in, as tenancy keeps it.
		a.FailedSha, a.Attempts = copyString(&c.FailedSha), c.Attempts
		if c.NextAttemptAt != "" {
			a.NextAttemptAt = copyString(&c.NextAttemptAt)
		}
		if c.RevertedTo != "" {
			a.RevertedTo = copyString(&c.RevertedTo)
		}
		a.RevertHealthy = copyBool(c.RevertHealthy)
	}
	// What the check-in said for fleetctl's next step and the last failure, as tenancy keeps it.
	a.CheckinTickID, a.ApplyTimeoutS = c.TickID, c.ApplyTimeoutS
	if c.LastExitCode != nil {
		v := *c.LastExitCode
		a.LastExitCode = &v
	}
	if f := c.LastFailure; f != nil {
		v := *f
		a.LastFailure = &v

	}
	if h := c.Hold; h != nil {
		// The hold and the deferral are the agent's word in its latest check-in, as tenancy keeps them.
		hold := *h
		a.Hold = &hold
	}
	if c.DeferredUntil != "" {
		a.DeferredUntil = copyString(&c.DeferredUntil)
	}
	if c.Timer != nil {
		a.Timer = &protocol.AdminTimer{Enabled: copyBool(c.Timer.Enabled), Active: copyBool(c.Timer.Active),
			NextElapse: copyString(c.Timer.NextElapse), ObservedAt: stamp(st.checkinAt)}
	}
	return a
}

// The record is handed out; it must not alias the fake's own copy of the request.
func copyInt(p *int64) *int64 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copyBool(p *bool) *bool {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func copyString(p *string) *string {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
