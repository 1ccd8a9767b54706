package tenancytest

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

func ptr[T any](v T) *T { return &v }

func TestAdminViewFollowsAcceptedCalls(t *testing.T) {
	clk := &clock{t: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
	v := staticVerifier{"tok-a": {"env-a", "j"}, "tok-b": {"env-b", "j"}}

	var mu sync.Mutex
	seen := map[string][]protocol.AdminAgent{}
	var s *Server
	s = Start(Options{Verifier: v, Clock: clk.Now, CheckinIntervalS: 5, OnUpdate: func(env string) {
		a, ok := s.AdminAgent(env)
		if !ok {
			t.Errorf("OnUpdate(%s) for an env the fake does not know", env)
		}
		mu.Lock()
		seen[env] = append(seen[env], a)
		mu.Unlock()
	}})
	defer s.Close()
	updates := func(env string) int { mu.Lock(); defer mu.Unlock(); return len(seen[env]) }

	s.AddEnv("env-a")
	s.SetSite("env-a", "cbs")
	clk.Advance(time.Minute)
	sha := s.SetDesired("env-a", map[string]string{"bundle.json": "{}"})
	desiredAt := clk.Now()

	t.Run("registered, never checked in", func(t *testing.T) {
		a, ok := s.AdminAgent("env-a")
		want := protocol.AdminAgent{EnvID: "env-a", Site: "cbs", Identity: "monky-host.env-a", CheckinIntervalS: 5,
			DesiredSha: sha, DesiredAt: ptr(desiredAt.Format(time.RFC3339))}
		if !ok || !reflect.DeepEqual(a, want) {
			t.Fatalf("AdminAgent = %+v, %v\nwant %+v", a, ok, want)
		}
		if _, ok := s.AdminAgent("env-x"); ok {
			t.Fatal("an unknown env has a record")
		}
		if n := updates("env-a"); n != 3 {
			t.Fatalf("OnUpdate ran %d times for AddEnv, SetSite, SetDesired; want 3", n)
		}
	})

	clk.Advance(time.Minute)
	ttl, disk := int64(80000), int64(9e9)
	req := protocol.CheckinRequest{EnvID: "env-a", AgentVersion: "0.2.0", Transport: "system", Hostname: "qa-02",
		LastResult: "healthy", TokenTTLSec: &ttl, DiskFreeBytes: &disk, UpgradedFrom: "0.1.9",
		Timer:  &protocol.Timer{Enabled: ptr(false), Active: ptr(false)},
		TickID: "3f9a0c1d2e4b", LastExitCode: ptr(1), ApplyTimeoutS: 3600,
		LastFailure: &protocol.Failure{Sha: "9f3e", Code: "PULL_FAILED", Detail: "compose pull: denied", At: "2026-12-02T08:59:00Z", Attempts: 2}}

	t.Run("an accepted check-in, visible before the agent has its answer", func(t *testing.T) {
		before := updates("env-a")
		if resp, m := post(t, s.URL+"/v1/agent/checkin", "tok-a", req); resp.StatusCode != 200 {
			t.Fatalf("checkin: %d %v", resp.StatusCode, m)
		}
		// The hook ran inside the handler, before the answer was written: no waiting needed.
		if n := updates("env-a"); n != before+1 {
			t.Fatalf("OnUpdate ran %d times for one check-in", n-before)
		}
		at := clk.Now().Format(time.RFC3339)
		a, _ := s.AdminAgent("env-a")
		want := protocol.AdminAgent{EnvID: "env-a", Site: "cbs", Identity: "monky-host.env-a", AgentVersion: "0.2.0",
			Transport: "system", Hostname: "qa-02", LastCheckinAt: &at, CheckinIntervalS: 5,
			DesiredSha: sha, DesiredAt: ptr(desiredAt.Format(time.RFC3339)), LastResult: "healthy", LastResultAt: &at,
			Timer:       &protocol.AdminTimer{Enabled: ptr(false), Active: ptr(false), ObservedAt: &at},
			TokenTTLSec: ptr(ttl), DiskFreeBytes: ptr(disk), UpgradedFrom: ptr("0.1.9"),
			LastAction: "apply", CheckinTickID: "3f9a0c1d2e4b", LastExitCode: ptr(1), ApplyTimeoutS: 3600,
			LastFailure: &protocol.Failure{Sha: "9f3e", Code: "PULL_FAILED", Detail: "compose pull: denied", At: "2026-12-02T08:59:00Z", Attempts: 2}}
		if !reflect.DeepEqual(a, want) {
			t.Fatalf("AdminAgent =\n%+v\nwant\n%+v", a, want)
		}
		*a.TokenTTLSec, *a.LastExitCode, a.LastFailure.Code = 1, 2, "X" // the record is a copy
		if b, _ := s.AdminAgent("env-a"); *b.TokenTTLSec != ttl || *b.LastExitCode != 1 || b.LastFailure.Code != "PULL_FAILED" {
			t.Fatal("the record aliases the fake's state")
		}
	})

	t.Run("a report sets result, detail and applied sha", func(t *testing.T) {
		clk.Advance(10 * time.Second)
		if resp, _ := post(t, s.URL+"/v1/agent/report", "tok-a", protocol.Report{EnvID: "env-a", Sha: sha, Result: "applied", Detail: "2 containers", TickID: "3f9a0c1d2e4b"}); resp.StatusCode != 200 {
			t.Fatalf("report: %d", resp.StatusCode)
		}
		a, _ := s.AdminAgent("env-a")
		if a.AppliedSha != sha || a.LastResult != "applied" || a.LastDetail != "2 containers" || *a.LastResultAt != clk.Now().Format(time.RFC3339) ||
			a.ResultTickID != "3f9a0c1d2e4b" {
			t.Fatalf("after the report: %+v", a)
		}
	})

	t.Run("refused calls change nothing", func(t *testing.T) {
		before, _ := s.AdminAgent("env-a")
		n := updates("env-a")
		clk.Advance(time.Minute)
		for _, tc := range []struct {
			name, tok string
			want      int
		}{{"no bearer", "", 401}, {"another env's token", "tok-b", 403}} {
			if resp, _ := post(t, s.URL+"/v1/agent/checkin", tc.tok, protocol.CheckinRequest{EnvID: "env-a", AgentVersion: "9.9.9"}); resp.StatusCode != tc.want {
				t.Fatalf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
			}
			if resp, _ := post(t, s.URL+"/v1/agent/report", tc.tok, protocol.Report{EnvID: "env-a", Result: "failed"}); resp.StatusCode != tc.want {
				t.Fatalf("%s report: %d", tc.name, resp.StatusCode)
			}
		}
		s.FailNext(Checkin, 503, "", 1)
		post(t, s.URL+"/v1/agent/checkin", "tok-a", protocol.CheckinRequest{EnvID: "env-a", AgentVersion: "9.9.9"})
		if after, _ := s.AdminAgent("env-a"); !reflect.DeepEqual(after, before) || updates("env-a") != n {
			t.Fatalf("a refused call changed the view:\n%+v\n%+v", before, after)
		}
	})

	t.Run("a new version without an upgrade note forgets the old note", func(t *testing.T) {
		r := req
		r.AgentVersion, r.UpgradedFrom, r.Timer = "0.2.1", "", nil
		post(t, s.URL+"/v1/agent/checkin", "tok-a", r)
		a, _ := s.AdminAgent("env-a")
		if a.UpgradedFrom != nil || a.AgentVersion != "0.2.1" || a.Timer != nil {
			t.Fatalf("after a reinstall: %+v", a)
		}
	})

	t.Run("a check-in's backoff is kept, and gone with the next one that has none", func(t *testing.T) {
		r := req
		r.FailedSha, r.Attempts, r.NextAttemptAt, r.RevertedTo, r.RevertHealthy = "9f3e", 3, "2026-12-02T10:08:00Z", "7a10", ptr(true)
		post(t, s.URL+"/v1/agent/checkin", "tok-a", r)
		a, _ := s.AdminAgent("env-a")
		if a.FailedSha == nil || *a.FailedSha != "9f3e" || a.Attempts != 3 || *a.NextAttemptAt != "2026-12-02T10:08:00Z" ||
			*a.RevertedTo != "7a10" || a.RevertHealthy == nil || !*a.RevertHealthy {
			t.Fatalf("backoff in the admin view: %+v", a)
		}
		post(t, s.URL+"/v1/agent/checkin", "tok-a", req)
		if a, _ := s.AdminAgent("env-a"); a.FailedSha != nil || a.Attempts != 0 || a.NextAttemptAt != nil || a.RevertedTo != nil || a.RevertHealthy != nil {
			t.Fatalf("backoff outlived the check-in that dropped it: %+v", a)
		}
	})

	t.Run("a check-in's hold and deferral are kept, and gone with the next one that has none", func(t *testing.T) {
		r := req
		r.Hold = &protocol.Hold{Reason: "db migration by hand", By: "alice", Since: "2026-12-02T09:00:00Z", Until: "2026-12-02T13:00:00Z"}
		r.DeferredUntil = "2026-12-03T02:00:00Z"
		post(t, s.URL+"/v1/agent/checkin", "tok-a", r)
		a, _ := s.AdminAgent("env-a")
		if a.Hold == nil || *a.Hold != *r.Hold || a.DeferredUntil == nil || *a.DeferredUntil != r.DeferredUntil {
			t.Fatalf("hold and deferral in the admin view: %+v", a)
		}
		a.Hold.Reason = "changed"
		if b, _ := s.AdminAgent("env-a"); b.Hold.Reason != r.Hold.Reason {
			t.Fatal("the record aliases the fake's hold")
		}
		post(t, s.URL+"/v1/agent/checkin", "tok-a", req)
		if a, _ := s.AdminAgent("env-a"); a.Hold != nil || a.DeferredUntil != nil {
			t.Fatalf("the hold outlived the check-in that dropped it: %+v", a)
		}
	})

	t.Run("every env, sorted", func(t *testing.T) {
		s.AddEnv("env-0")
		var ids []string
		for _, a := range s.AdminAgents() {
			ids = append(ids, a.EnvID)
		}
		if !reflect.DeepEqual(ids, []string{"env-0", "env-a"}) {
			t.Fatalf("AdminAgents = %v", ids)
		}
	})
}
