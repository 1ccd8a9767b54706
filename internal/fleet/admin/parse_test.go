package admin

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
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
		{"backoff", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","failed_sha":"9f3e","attempts":3,"next_attempt_at":"2026-12-02T10:08:00Z","reverted_to":"7a10","revert_healthy":true}]}`, ""},
		{"bad next attempt", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","next_attempt_at":"in 8m"}]}`, `agents[0] (env-x).next_attempt_at`},
		{"identity certificate", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","identity_not_after":"2027-12-02T10:00:00Z"}]}`, ""},
		{"bad identity certificate", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","identity_not_after":"next year"}]}`, `agents[0] (env-x).identity_not_after`},
		{"negative attempts", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","attempts":-2}]}`, `agents[0] (env-x).attempts: -2`},
		{"revert_healthy type", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","revert_healthy":"yes"}]}`, `revert_healthy`},
		{"hold and deferral", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","hold":{"reason":"db migration","by":"alice","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"},"deferred_until":"2026-12-03T01:00:00Z"}]}`, ""},
		{"hold null", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","hold":null,"deferred_until":null}]}`, ""},
		{"hold without reason", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"by":"alice","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `agents[0] (env-x).hold.reason: missing`},
		{"hold without by", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"r","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `agents[0] (env-x).hold.by: missing`},
		{"hold reason on two lines", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"a\nb","by":"alice","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `hold.reason: contains U+000A, a control or format character`},
		{"hold reason too long", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"` + strings.Repeat("€", 201) + `","by":"alice","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `hold.reason: 201 characters, at most 200`},
		{"hold by too long", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"r","by":"` + strings.Repeat("x", 65) + `","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `hold.by: 65 characters, at most 64`},
		{"hold by turned around", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"r","by":"alice\u202e","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `hold.by: contains U+202E`},
		{"hold reason blank", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"  ","by":"alice","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`, `hold.reason: empty`},
		{"hold without until", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"r","by":"alice","since":"2026-12-02T09:00:00Z"}}]}`, `agents[0] (env-x).hold.until: "" is not an RFC 3339 time`},
		{"hold ends before it starts", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":"r","by":"alice","since":"2026-12-02T09:00:00Z","until":"2026-12-02T08:00:00Z"}}]}`, `hold.until: 2026-12-02T08:00:00Z is not after since`},
		{"hold not an object", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":"yes"}]}`, `field "agents.hold"`},
		{"hold reason a number", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","hold":{"reason":5}}]}`, `field "agents.hold.reason"`},
		{"bad deferred_until", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","deferred_until":"tonight"}]}`, `agents[0] (env-x).deferred_until`},
		{"empty cursor", `{"now":"2026-12-02T10:00:00Z","agents":[],"next":""}`, `empty cursor`},
		{"evidence and last failure", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","last_action":"apply","checkin_tick_id":"3f9a0c1d2e4b","result_tick_id":"0c1d2e4b3f9a",` +
			`"last_exit_code":78,"apply_timeout_s":3600,"last_failure":{"sha":"9f3e","code":"PULL_FAILED","detail":"compose pull: denied","at":"2026-12-02T09:58:00Z","attempts":2}}]}`, ""},
		{"shell in a tick id", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","checkin_tick_id":"x; rm -rf /"}]}`, `agents[0] (env-x).checkin_tick_id`},
		{"exit code out of range", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","last_exit_code":256}]}`, `agents[0] (env-x).last_exit_code: 256`},
		{"negative apply timeout", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","apply_timeout_s":-1}]}`, `apply_timeout_s: -1`},
		{"failure without a sha", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","last_failure":{"code":"FAILED","at":"2026-12-02T09:58:00Z","attempts":1}}]}`, `last_failure.sha`},
		{"failure code as a label", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","last_failure":{"sha":"9f","code":"pull failed\"}","at":"2026-12-02T09:58:00Z","attempts":1}}]}`, `last_failure.code`},
		{"failure time", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","last_failure":{"sha":"9f","code":"FAILED","at":"yesterday","attempts":1}}]}`, `agents[0] (env-x).last_failure.at`},
		{"failure attempts", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-x","last_failure":{"sha":"9f","code":"FAILED","at":"2026-12-02T09:58:00Z","attempts":-1}}]}`, `last_failure.attempts: -1`},
		{"trailing", `{"now":"2026-12-02T10:00:00Z","agents":[]} {}`, `trailing data`},
		{"applied_sha given twice", `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","applied_sha":"7a10","applied_sha":"0bad"}]}`, `field "agents.applied_sha": given twice`},
		{"ENV_ID in capitals only", `{"now":"2026-12-02T10:00:00Z","agents":[{"ENV_ID":"a"}]}`, `agents[0].env_id`},
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

// Every hold text the agent writes (protocol.CheckHoldText, the check of `monky-deployd hold` and
// of state.json) is read: fleetctl refusing one box's hold would refuse the listing, and with it
// status, gate, describe, the exporter and onboard of every env (seed: 200 × "€", 600 bytes).
func TestParseAgentsPageReadsEveryHoldTheAgentWrites(t *testing.T) {
	for _, tc := range []struct{ name, reason, by string }{
		{"200 euro signs", strings.Repeat("€", protocol.MaxHoldReason), "alice"},
		{"200 emoji", strings.Repeat("🚧", protocol.MaxHoldReason), "alice"},
		{"CJK by of 64", "db", strings.Repeat("日", protocol.MaxHoldBy)},
		{"spaces of other scripts", "wait\u00a0for\u3000the db", "uid 1000"},
		{"combining marks", strings.Repeat("e\u0301", protocol.MaxHoldReason/2), "zoë"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []struct {
				v   string
				max int
			}{{tc.reason, protocol.MaxHoldReason}, {tc.by, protocol.MaxHoldBy}} {
				if err := protocol.CheckHoldText(v.v, v.max); err != nil {
					t.Fatalf("the agent does not write %q: %v", v.v, err)
				}
			}
			hold, err := json.Marshal(protocol.Hold{Reason: tc.reason, By: tc.by, Since: "2026-12-02T09:00:00Z", Until: "2026-12-02T13:00:00Z"})
			if err != nil {
				t.Fatal(err)
			}
			page := `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-ok"},{"env_id":"env-x","hold":` + string(hold) + `}]}`
			p, _, err := ParseAgentsPage([]byte(page))
			if err != nil {
				t.Fatalf("the listing is refused, env-ok with it: %v", err)
			}
			if h := p.Agents[1].Hold; h == nil || h.Reason != tc.reason || h.By != tc.by {
				t.Errorf("hold = %+v", h)
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
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","failed_sha":"9f","attempts":2,"next_attempt_at":"2026-12-02T10:08:00Z","revert_healthy":false}]}`))
	f.Add([]byte(`{"now":1}`))
	f.Add([]byte("{\"now\":\"2026-12-02T10:00:00Z\",\"agents\":[],\"next\":\"\xc0\"}")) // a cursor that is no UTF-8
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","last_action":"apply","checkin_tick_id":"3f9a0c1d2e4b","last_exit_code":78,"apply_timeout_s":3600,` +
		`"last_failure":{"sha":"9f","code":"PULL_FAILED","detail":"d","at":"2026-12-02T09:58:00Z","attempts":2}}]}`))
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","hold":{"reason":"r","by":"b","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"},"deferred_until":"2026-12-03T01:00:00Z"}]}`))
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","hold":{"reason":"` + strings.Repeat("€", 200) + `","by":"b","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`))
	f.Add([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a","hold":{"reason":"r","by":"b\u202e\u200b","since":"2026-12-02T09:00:00Z","until":"2026-12-02T13:00:00Z"}}]}`))
	f.Add([]byte(`{"now":"x","agents":[{"env_id":"a;b"},{"env_id":7}],"next":""}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"agents":[{"env_id":"a"}],"now":"2026-12-02T10:00:00Z","agents":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, now, err := ParseAgentsPage(b)
		// Read as it streams, a page is read as it was whole: the same error, the same agents.
		// Not JSON is refused by both, maybe named otherwise: jsonv2's own buffered and
		// streaming decoders see `{{` at bytes 2 and 1, and `{{"":"",""0` as a key given twice
		// and as not JSON at byte 1.
		whole, werr := parseWhole(b)
		syntax := strings.Contains(fmt.Sprint(err), "not valid JSON") || strings.Contains(fmt.Sprint(werr), "not valid JSON")
		if (syntax && (err == nil || werr == nil)) || (!syntax && fmt.Sprint(err) != fmt.Sprint(werr)) ||
			(err == nil && !reflect.DeepEqual(p, whole)) {
			t.Fatalf("streamed: %v; whole: %v (%s)", err, werr, b)
		}
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
			if h := a.Hold; h != nil {
				since, err1 := time.Parse(time.RFC3339, h.Since)
				until, err2 := time.Parse(time.RFC3339, h.Until)
				if err1 != nil || err2 != nil || !until.After(since) || h.Reason == "" || h.By == "" || strings.ContainsAny(h.Reason+h.By, "\n\r\u202e\u200b") ||
					utf8.RuneCountInString(h.Reason) > protocol.MaxHoldReason || utf8.RuneCountInString(h.By) > protocol.MaxHoldBy {
					t.Fatalf("accepted a hold fleetctl cannot show: %+v", h)
				}
			}
		}
		if p.Next != nil && *p.Next == "" {
			t.Fatal("accepted empty cursor")
		}
	})
}

// parseWhole is ParseAgentsPage as it was before pages were read as they stream: the document
// decoded whole, then checked.
func parseWhole(b []byte) (*protocol.AdminAgentsPage, error) {
	var p protocol.AdminAgentsPage
	if err := decode(b, &p); err != nil {
		return nil, err
	}
	pg := agentsPage{rawNow: p.Now, next: p.Next}
	var agentErr error
	for i := range p.Agents {
		if agentErr = checkAgent(i, &p.Agents[i]); agentErr != nil {
			break
		}
	}
	return &p, pg.check(agentErr)
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

// kitWith is goodKit with one field of tenancy's answer changed.
func kitWith(t *testing.T, edit func(r *protocol.KitResponse)) []byte {
	t.Helper()
	var r protocol.KitResponse
	if err := json.Unmarshal([]byte(goodKit), &r); err != nil {
		t.Fatal(err)
	}
	edit(&r)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseKitRefusesWhatInstallShRefuses(t *testing.T) {
	for _, tc := range []struct {
		field string
		edit  func(r *protocol.KitResponse)
	}{
		{"env_id", func(r *protocol.KitResponse) { r.EnvID = "env;reboot" }},
		{"site", func(r *protocol.KitResponse) { r.Site = "" }},
		{"package_version", func(r *protocol.KitResponse) { r.PackageVersion = "latest" }},
		{"tenancy_service", func(r *protocol.KitResponse) { r.TenancyService = "monky tenancy" }},
		{"tenancy_port", func(r *protocol.KitResponse) { r.TenancyPort = 70000 }},
		{"bao_addr", func(r *protocol.KitResponse) { r.BaoAddr = "https://bao.example/$(id)" }},
		{"bao_auth_mount", func(r *protocol.KitResponse) { r.BaoAuthMount = "jwt tenancy" }},
		{"bao_role", func(r *protocol.KitResponse) { r.BaoRole = "see-env'" }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := ParseKit(kitWith(t, tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("err %v, want one naming %s", err, tc.field)
			}
		})
	}
	k, err := ParseKit(kitWith(t, func(r *protocol.KitResponse) {
		r.TenancyService, r.TenancyPort, r.BaoAddr, r.BaoAuthMount, r.BaoRole = "", 0, "", "", ""
	}))
	if err != nil {
		t.Fatalf("optional values left out: %v", err)
	}
	if k.TenancyPort != 443 || k.TenancyService != "" || k.BaoAddr != "" || k.BaoAuthMount != "" || k.BaoRole != "" {
		t.Errorf("optional values left out became %+v", k)
	}
}

// TestParseKitAgreesWithInstallSh runs install.sh's own checks of the flags the kit's values
// become on sample values: whatever ParseKit accepts, install.sh accepts too (else the install
// command fails on the box after the reveal superseded the old grant), and ParseKit is narrower
// only where it means to be (http, a port beyond 65535, a '.' version suffix, long names, '/' in
// an auth mount).
func TestParseKitAgreesWithInstallSh(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		itest.Unavailable(t, "no bash")
	}
	script, err := os.ReadFile(filepath.Join("..", "..", "..", "packaging", "install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	patterns := map[string]string{}
	for _, m := range regexp.MustCompile(`\[\[ \$([A-Z_]+) =~ (\S+) \]\]`).FindAllStringSubmatch(string(script), -1) {
		patterns[m[1]] = m[2]
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	type sample struct {
		v        string
		goOK, sh bool
	}
	for _, f := range []struct {
		field, shVar string
		set          func(r *protocol.KitResponse, v string)
		samples      []sample
	}{
		{"env_id", "ENV_ID", func(r *protocol.KitResponse, v string) { r.EnvID, r.Identity = v, "" }, []sample{
			{"env-qa-02", true, true}, {long(63), true, true}, {long(64), false, false}, {"Env-QA", false, false},
			{"env.qa", false, false}, {"env;reboot", false, false}, {"-env", false, false}, {"", false, false},
		}},
		{"site", "SITE", func(r *protocol.KitResponse, v string) { r.Site = v }, []sample{
			{"cbs", true, true}, {"CBS", false, false}, {"cbs --evil", false, false}, {"", false, false},
		}},
		{"package_version", "VERSION", func(r *protocol.KitResponse, v string) { r.PackageVersion = v }, []sample{
			{"0.2.0", true, true}, {"0.2.0-rc.1", true, true}, {"0.2.0+deb12", true, true}, {"0.2.0~rc1", true, true},
			{"0.2.0-" + long(40), true, true}, {"0.2.0-" + long(41), false, true}, {"0.2.0.1", false, true},
			{"latest", false, false}, {"0.2", false, false}, {"0.2.0/../../x; curl evil", false, false},
		}},
		{"tenancy_service", "TENANCY_SERVICE", func(r *protocol.KitResponse, v string) { r.TenancyService = v }, []sample{
			{"monky.tenancy.deploy", true, true}, {long(64), true, true}, {long(65), false, true},
			{"monky tenancy", false, false}, {"-x", false, false}, {"a;b", false, false},
		}},
		{"bao_addr", "BAO_ADDR", func(r *protocol.KitResponse, v string) { r.BaoAddr = v }, []sample{
			{"https://bao.cbs.tikali.net:8200", true, true}, {"https://bao.cbs.tikali.net/", true, true}, {"https://bao", true, true},
			{"https://bao:65535", true, true}, {"https://bao:70000", false, true}, {"http://bao:8200", false, true},
			{"https://bao.example/$(id)", false, false}, {"https://bao/v1", false, false}, {"https://user@bao", false, false},
			{"https://bao:0", false, false}, {"https://bao?x=1", false, false}, {"bao:8200", false, false},
		}},
		{"bao_auth_mount", "BAO_AUTH_MOUNT", func(r *protocol.KitResponse, v string) { r.BaoAuthMount = v }, []sample{
			{"jwt-tenancy", true, true}, {"jwt_tenancy.2", true, true}, {"jwt/tenancy", false, true},
			{"jwt-tenancy/", false, false}, {"jwt tenancy", false, false}, {"-jwt", false, false},
		}},
		{"bao_role", "BAO_ROLE", func(r *protocol.KitResponse, v string) { r.BaoRole = v }, []sample{
			{"see-env", true, true}, {long(64), true, true}, {long(65), false, true}, {long(129), false, false}, {"see-env'", false, false},
		}},
		{"tenancy_port", "TENANCY_PORT", func(r *protocol.KitResponse, v string) { r.TenancyPort, _ = strconv.Atoi(v) }, []sample{
			{"1", true, true}, {"443", true, true}, {"65535", true, true}, {"65536", false, false}, {"99999", false, false},
			{"-1", false, false},
		}},
	} {
		t.Run(f.field, func(t *testing.T) {
			pat, ok := patterns[f.shVar]
			if !ok {
				t.Fatalf("install.sh has no [[ $%s =~ … ]] check", f.shVar)
			}
			args := []string{"-c", `p=$1; shift; for v; do if [[ $v =~ $p ]]; then echo 1; else echo 0; fi; done`, "-", pat}
			for _, s := range f.samples {
				args = append(args, s.v)
			}
			cmd := exec.Command(bash, args...)
			cmd.Env = append(os.Environ(), "LC_ALL=C")
			out, err := cmd.Output()
			if err != nil {
				t.Fatal(err)
			}
			sh := strings.Fields(string(out))
			if len(sh) != len(f.samples) {
				t.Fatalf("bash answered %q", out)
			}
			for i, s := range f.samples {
				if s.goOK && !s.sh {
					t.Fatalf("bad table: %q accepted by ParseKit but not install.sh", s.v)
				}
				shOK := sh[i] == "1"
				if f.shVar == "TENANCY_PORT" && shOK { // install.sh adds [ "$TENANCY_PORT" -gt 65535 ]
					n, _ := strconv.Atoi(s.v)
					shOK = n <= 65535
				}
				if shOK != s.sh {
					t.Errorf("install.sh %s %q: accepted %v, want %v (pattern %s)", f.shVar, s.v, shOK, s.sh, pat)
				}
				_, err := ParseKit(kitWith(t, func(r *protocol.KitResponse) { f.set(r, s.v) }))
				if (err == nil) != s.goOK {
					t.Errorf("ParseKit %s %q: err %v, want accepted %v", f.field, s.v, err, s.goOK)
				}
				if err != nil && !strings.Contains(err.Error(), f.field) {
					t.Errorf("ParseKit %s %q: err %v does not name the field", f.field, s.v, err)
				}
			}
		})
	}
}
