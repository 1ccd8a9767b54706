package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/cli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// statusEnv is the part of an env of `fleetctl status -o json` these tests read.
type statusEnv struct {
	EnvID      string   `json:"env_id"`
	Verdict    string   `json:"verdict"`
	Agent      string   `json:"agent_version"`
	Hostname   string   `json:"hostname"`
	MeshOnline *bool    `json:"mesh_online"`
	Attrs      []string `json:"role_attributes"`
	Site       string   `json:"site"`
}

// fleetctl runs fleetctl in-process against the stack.
func fleetctl(t *testing.T, s *Stack, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = cli.Run(context.Background(), append([]string{"--config", s.FleetctlConfig()}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func status(t *testing.T, s *Stack) map[string]statusEnv {
	t.Helper()
	code, out, errOut := fleetctl(t, s, "status", "-o", "json")
	if code > 1 {
		t.Fatalf("fleetctl status exit %d: %s", code, errOut)
	}
	var doc struct{ Envs []statusEnv }
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	m := map[string]statusEnv{}
	for _, e := range doc.Envs {
		m[e.EnvID] = e
	}
	return m
}

// agentCall posts body to tenancy's agent API with bearer tok, as the agent does.
func agentCall(t *testing.T, s *Stack, path, tok string, body any) int {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, s.Tenancy.URL+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// login exchanges a grant for an OpenBao token, as the agent's bootstrap does.
func login(t *testing.T, s *Stack, jwt string) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]string{"role": "see-env", "jwt": jwt})
	resp, err := http.Post(s.Bao.Addr()+"/v1/auth/jwt-tenancy/login", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Auth struct {
			ClientToken string `json:"client_token"`
		} `json:"auth"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || out.Auth.ClientToken == "" {
		t.Fatalf("login: %d %v", resp.StatusCode, err)
	}
	return out.Auth.ClientToken
}

// TestStackJoinsTenancyAdminAndMesh drives the stack as fleetctl and an agent would, with the
// in-process OpenBao: kits through the admin API are real grants, check-ins reach the admin view
// and the mesh, and a reissue supersedes the running agent's grant.
func TestStackJoinsTenancyAdminAndMesh(t *testing.T) {
	ctx := context.Background()
	s, err := Start(ctx, Options{Dir: t.TempDir(), CheckinInterval: 5 * time.Second, PackageVersion: "0.2.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.AddBackend("env-a", "dev")
	s.AddBackend("env-b", "dev")

	t.Run("registered, no identity yet", func(t *testing.T) {
		st := status(t, s)
		if st["env-a"].Verdict != "NO_IDENTITY" || st["env-a"].Site != "dev" || len(st) != 2 {
			t.Fatalf("status = %+v", st)
		}
	})

	kits := filepath.Join(t.TempDir(), "kits")
	var tok string
	t.Run("fleetctl onboard: a real grant, the identity made by the broker", func(t *testing.T) {
		if code, out, errOut := fleetctl(t, s, "onboard", "env-a", "--site", "dev", "--transport", "system", "--out", kits); code != 0 {
			t.Fatalf("onboard exit %d\n%s\n%s", code, out, errOut)
		}
		raw, err := os.ReadFile(filepath.Join(kits, "env-a", "bootstrap.jwt"))
		if err != nil {
			t.Fatal(err)
		}
		c, err := grant.Verify(strings.TrimSpace(string(raw)), s.Signer.PublicKey(), time.Now())
		if err != nil || c.EnvID != "env-a" {
			t.Fatalf("the kit's grant: %+v %v", c, err)
		}
		id, ok := s.Ziti.Identity(ziti.IdentityName("env-a"))
		if !ok || !slices.Equal(id.RoleAttributes, ziti.RequiredAttributes()) || id.EnrollmentJWT == "" || id.Online {
			t.Fatalf("identity = %+v, %v", id, ok)
		}
		if _, err := os.Stat(filepath.Join(kits, "env-a", "monky-host.env-a.jwt")); err != nil {
			t.Errorf("no enrolment token in the kit: %v", err)
		}
		tok = login(t, s, strings.TrimSpace(string(raw)))
		if st := status(t, s); st["env-a"].Verdict != "NEVER_CHECKED_IN" {
			t.Errorf("after onboard: %+v", st["env-a"])
		}
	})

	t.Run("a check-in reaches the admin view and the mesh before the agent has its answer", func(t *testing.T) {
		if code := agentCall(t, s, "/v1/agent/checkin", tok, protocol.CheckinRequest{EnvID: "env-a", AgentVersion: "0.2.0", Transport: "system", Hostname: "box-a"}); code != 200 {
			t.Fatalf("checkin: %d", code)
		}
		// No waiting: mirror runs inside the handler.
		id, _ := s.Ziti.Identity(ziti.IdentityName("env-a"))
		if !id.Online || id.EnrollmentJWT != "" || id.Hostname != "box-a" {
			t.Errorf("identity after the check-in: %+v", id)
		}
		a := status(t, s)["env-a"]
		if a.Verdict != "OK" || a.Agent != "0.2.0" || a.Hostname != "box-a" || a.MeshOnline == nil || !*a.MeshOnline {
			t.Errorf("status after the check-in: %+v", a)
		}
	})

	t.Run("a scenario pins the host off the mesh", func(t *testing.T) {
		s.SetOnline("env-a", false)
		agentCall(t, s, "/v1/agent/checkin", tok, protocol.CheckinRequest{EnvID: "env-a", AgentVersion: "0.2.0"})
		if a := status(t, s)["env-a"]; a.MeshOnline == nil || *a.MeshOnline {
			t.Errorf("pinned offline, but: %+v", a)
		}
		s.SetOnline("env-a", true)
	})

	t.Run("a reissue supersedes the running agent's grant", func(t *testing.T) {
		if code, _, errOut := fleetctl(t, s, "onboard", "env-a", "--site", "dev", "--transport", "system", "--out", kits, "--reissue", "--replace-live"); code != 0 {
			t.Fatalf("reissue exit %d: %s", code, errOut)
		}
		if code := agentCall(t, s, "/v1/agent/checkin", tok, protocol.CheckinRequest{EnvID: "env-a"}); code != 401 {
			t.Fatalf("old grant's token after a reissue: %d, want 401", code)
		}
		raw, _ := os.ReadFile(filepath.Join(kits, "env-a", "bootstrap.jwt"))
		if code := agentCall(t, s, "/v1/agent/checkin", login(t, s, strings.TrimSpace(string(raw))), protocol.CheckinRequest{EnvID: "env-a"}); code != 200 {
			t.Fatalf("new kit's token: %d", code)
		}
	})

	t.Run("the broker repairs an identity missing an attribute", func(t *testing.T) {
		s.AddIdentity(ziti.IdentityName("env-b"), []string{ziti.AttrDeployAgent, "site-dev"}, false)
		if code, _, errOut := fleetctl(t, s, "onboard", "env-b", "--site", "dev", "--out", kits); code != 0 {
			t.Fatalf("onboard: %s", errOut)
		}
		id, _ := s.Ziti.Identity(ziti.IdentityName("env-b"))
		if !slices.Equal(id.RoleAttributes, []string{ziti.AttrDeployAgent, "site-dev", ziti.AttrOpenBaoClient}) {
			t.Errorf("attributes after the reveal: %v", id.RoleAttributes)
		}
	})

	t.Run("the admin token and controller password never reach fleetctl's output", func(t *testing.T) {
		_, out, errOut := fleetctl(t, s, "status", "-v")
		for _, sec := range s.Secrets() {
			if sec == "" || strings.Contains(out+errOut, sec) {
				t.Fatalf("a secret of the stack is printed (or empty)")
			}
		}
		cfg, _ := os.ReadFile(s.FleetctlConfig())
		for _, sec := range s.Secrets() {
			if strings.Contains(string(cfg), sec) {
				t.Fatal("a secret is in fleetctl.yaml itself")
			}
		}
	})
}

func TestStartNeedsADir(t *testing.T) {
	for _, o := range []Options{{}, {Dir: t.TempDir(), CheckinInterval: time.Millisecond}} {
		if s, err := Start(context.Background(), o); err == nil {
			s.Close()
			t.Errorf("Start(%+v) succeeded", o)
		}
	}
}

func TestCloseRemovesItsFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Start(context.Background(), Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddPid(4242); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, PidFile)); string(b) != "4242\n" {
		t.Errorf("pid file = %q (the in-process OpenBao has no pid)", b)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left in the stack's directory: %v", ents)
	}
}
