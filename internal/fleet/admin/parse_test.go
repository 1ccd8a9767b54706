package admin

import (
	"strings"
	"testing"
)

func TestParseAgentsPage(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"full example", `{"now": "2026-12-02T10:00:00Z",
 "agents": [{"env_id": "env-dev-08", "site": "cbs", "identity": "monky-host.env-dev-08",
   "agent_version": "0.1.8", "transport": "sdk", "hostname": "dev-08",
   "last_checkin_at": "2026-12-02T09:31:12Z", "checkin_interval_s": 60,
   "desired_sha": "7a10", "desired_at": "2026-12-02T09:02:00Z", "applied_sha": "7a10",
   "last_result": "applied", "last_result_at": "2026-12-02T09:31:12Z", "last_detail": "",
   "timer": {"enabled": true, "active": true, "next_elapse": "2026-12-02T09:32:12Z", "observed_at": "2026-12-02T09:31:12Z"},
   "token_ttl_s": 80000, "disk_free_bytes": 3000000000, "upgraded_from": null, "new_field": {"x": 1}}],
 "next": null}`, ""},
		{"unknown fields and nulls", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","last_checkin_at":null,"timer":null}],"extra":[1]}`, ""},
		{"no now", `{"agents":[]}`, `"now" is missing`},
		{"bad now", `{"now":"yesterday","agents":[]}`, `now: "yesterday" is not an RFC 3339 time`},
		{"bad checkin", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","last_checkin_at":"12/02/2026"}]}`, `agents[0] (env-x).last_checkin_at`},
		{"bad timer", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","timer":{"observed_at":"x"}}]}`, `timer.observed_at`},
		{"env id type", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":42}]}`, `field "agents.env_id"`},
		{"empty env id", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":""}]}`, `agents[0].env_id`},
		{"shell in env id", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a;rm -rf /"}]}`, `agents[0].env_id`},
		{"negative interval", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","checkin_interval_s":-1}]}`, `checkin_interval_s: -1`},
		{"empty cursor", `{"now":"2026-12-02T10:00:00Z","agents":[],"next":""}`, `empty cursor`},
		{"trailing", `{"now":"2026-12-02T10:00:00Z","agents":[]} {}`, `trailing data`},
		{"not json", `<html>`, `not a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseAgentsPage([]byte(tc.body))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
		})
	}
}

const goodKit = `{"env_id": "env-dev-08", "site": "cbs", "identity": "monky-host.env-dev-08",
 "bootstrap_grant": "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "grant_expires_at": "2026-12-02T11:00:00Z", "package_version": "0.2.0",
 "tenancy_service": "monky.tenancy.deploy", "tenancy_port": 443,
 "bao_addr": "https://bao.cbs.tikali.net:8200", "bao_auth_mount": "jwt-tenancy", "bao_role": "see-env"}`

func TestParseKit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(string) string
		wantErr string
	}{
		{"example", func(s string) string { return s }, ""},
		{"port defaults", func(s string) string { return strings.Replace(s, `"tenancy_port": 443`, `"tenancy_port": 0`, 1) }, ""},
		{"no grant", func(s string) string {
			return strings.Replace(s, `"eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"`, `""`, 1)
		}, "bootstrap_grant"},
		{"grant with shell", func(s string) string { return strings.Replace(s, `.c2ln"`, `.c2ln$(id)"`, 1) }, "not a JWT"},
		{"version injection", func(s string) string { return strings.Replace(s, `"0.2.0"`, `"0.2.0/../../x; curl evil"`, 1) }, "package_version"},
		{"bad expiry", func(s string) string { return strings.Replace(s, `"2026-12-02T11:00:00Z"`, `"soon"`, 1) }, "grant_expires_at"},
		{"site injection", func(s string) string { return strings.Replace(s, `"site": "cbs"`, `"site": "cbs --evil"`, 1) }, "site"},
		{"bao http", func(s string) string { return strings.Replace(s, `https://bao`, `http://bao`, 1) }, "bao_addr"},
		{"wrong identity", func(s string) string { return strings.Replace(s, `"monky-host.env-dev-08"`, `"monky-host.other"`, 1) }, "identity"},
		{"port range", func(s string) string { return strings.Replace(s, `"tenancy_port": 443`, `"tenancy_port": 70000`, 1) }, "tenancy_port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseKit([]byte(tc.edit(goodKit)))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if k.TenancyPort != 443 {
					t.Errorf("port %d", k.TenancyPort)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "eyJhbGciOiJFUzI1NiJ9") {
				t.Errorf("error leaks the grant: %v", err)
			}
		})
	}
}

func FuzzParseAgentsPage(f *testing.F) {
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","last_checkin_at":"2026-12-02T09:00:00Z","timer":{"enabled":false}}],"next":"c"}`))
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":null,"next":null}`))
	f.Add([]byte(`{"now":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, now, err := ParseAgentsPage(b)
		if err != nil {
			return
		}
		if now.IsZero() {
			t.Fatal("accepted page without a clock")
		}
		for _, a := range p.Agents {
			if CheckEnvID(a.EnvID) != nil {
				t.Fatalf("accepted bad env id %q", a.EnvID)
			}
		}
		if p.Next != nil && *p.Next == "" {
			t.Fatal("accepted empty cursor")
		}
	})
}

func FuzzParseKit(f *testing.F) {
	f.Add([]byte(goodKit))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"env_id":"a","site":"b","bootstrap_grant":"x","grant_expires_at":"2026-12-02T11:00:00Z","package_version":"1.2.3"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKit(b)
		if err != nil {
			return
		}
		for _, s := range []string{k.EnvID, k.Site, k.PackageVersion, k.BootstrapGrant, k.BaoAuthMount, k.BaoRole} {
			if strings.ContainsAny(s, " \t\n\"'`$;|&<>()\\") {
				t.Fatalf("accepted a shell-unsafe value %q", s)
			}
		}
	})
}
