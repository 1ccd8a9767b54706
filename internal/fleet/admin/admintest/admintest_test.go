package admintest

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

func get(t *testing.T, s *Server, path, token string) (int, protocol.AdminAgentsPage) {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p protocol.AdminAgentsPage
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p
}

func TestFake(t *testing.T) {
	s := New(Options{Token: "tok", PageSize: 2})
	defer s.Close()
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	s.SetNow(now)
	for _, env := range []string{"c", "a", "b"} {
		s.PutAgent(protocol.AdminAgent{EnvID: env, Site: "cbs"})
	}
	var seen []int
	s.OnPoll(2, func() { seen = append(seen, s.Polls()) })

	code, p := get(t, s, "/v1/admin/agents", "tok")
	if code != 200 || p.Now != "2026-12-02T10:00:00Z" || len(p.Agents) != 2 || p.Agents[0].EnvID != "a" || p.Next == nil {
		t.Fatalf("page 1: %d %+v", code, p)
	}
	code, p2 := get(t, s, "/v1/admin/agents?cursor="+*p.Next, "tok")
	if code != 200 || len(p2.Agents) != 1 || p2.Agents[0].EnvID != "c" || p2.Next != nil {
		t.Fatalf("page 2: %d %+v", code, p2)
	}
	if s.Polls() != 1 || len(seen) != 0 {
		t.Errorf("a cursor page is not a new poll: polls %d, hooks %v", s.Polls(), seen)
	}
	get(t, s, "/v1/admin/agents", "tok")
	if len(seen) != 1 || seen[0] != 2 {
		t.Errorf("hook of poll 2 ran at %v", seen)
	}
	if code, _ := get(t, s, "/v1/admin/agents?cursor=bogus", "tok"); code != 400 {
		t.Errorf("bad cursor: %d", code)
	}
	if code, _ := get(t, s, "/v1/admin/agents", "nope"); code != 401 {
		t.Errorf("bad token: %d", code)
	}
	s.Fail(OpList, Failure{Status: 503})
	if code, _ := get(t, s, "/v1/admin/agents", "tok"); code != 503 {
		t.Errorf("failure: %d", code)
	}
	// A change is visible at once: cached pages are dropped.
	s.Fail(OpList, Failure{})
	s.UpdateAgent("a", func(a *protocol.AdminAgent) { a.AgentVersion = "9.9.9" })
	if _, p := get(t, s, "/v1/admin/agents", "tok"); p.Agents[0].AgentVersion != "9.9.9" {
		t.Errorf("stale page served after a change")
	}
}

func TestKitGrantProvider(t *testing.T) {
	exp := time.Date(2026, 12, 2, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	var asked []string
	fail := false
	s := New(Options{Token: "tok", Grant: func(env string) (string, time.Time, error) {
		asked = append(asked, env)
		if fail {
			return "", time.Time{}, errors.New("signer down")
		}
		return fmt.Sprintf("real-grant-%d-of-%s", len(asked), env), exp, nil
	}})
	defer s.Close()
	s.AddBackend("env-a", "cbs")
	reveal := func(env string) (int, protocol.KitResponse) {
		t.Helper()
		req, _ := http.NewRequest("POST", s.URL+"/v1/admin/backends/"+env+"/kit", strings.NewReader(`{"site":"cbs","transport":"sdk"}`))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var k protocol.KitResponse
		_ = json.NewDecoder(resp.Body).Decode(&k)
		return resp.StatusCode, k
	}
	for _, tc := range []struct {
		name      string
		env       string
		fail      bool
		wantCode  int
		wantGrant string
		wantAsked int
		wantKits  int
	}{
		{"the provider's grant and expiry", "env-a", false, 200, "real-grant-1-of-env-a", 1, 1},
		{"an unknown env never reaches the provider", "env-x", false, 404, "", 1, 1},
		{"a provider error is a 500 and no reveal", "env-a", true, 500, "", 2, 1},
		{"a second reveal supersedes the first grant", "env-a", false, 200, "real-grant-3-of-env-a", 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fail = tc.fail
			code, k := reveal(tc.env)
			if code != tc.wantCode || k.BootstrapGrant != tc.wantGrant || len(asked) != tc.wantAsked || len(s.Kits()) != tc.wantKits {
				t.Fatalf("code %d grant %q asked %v kits %d", code, k.BootstrapGrant, asked, len(s.Kits()))
			}
			if code == 200 && k.GrantExpiresAt != "2026-12-02T10:00:00Z" {
				t.Errorf("grant_expires_at %q, want the provider's expiry in UTC", k.GrantExpiresAt)
			}
		})
	}
	if !s.Superseded("real-grant-1-of-env-a") || s.Superseded("real-grant-3-of-env-a") {
		t.Error("want the first grant superseded by the second reveal, and the second one live")
	}
}
