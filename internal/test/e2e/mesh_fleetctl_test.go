//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
)

// realFleetctl runs fleetctl against the real controller's management API and the dev stack's
// tenancy admin API (a config beside the stack's own, which points at the fake controller).
func (m *mesh) realFleetctl(t *testing.T, args ...string) devstack.Result {
	t.Helper()
	dir := m.w.Stack.Dir()
	cfg := filepath.Join(dir, "fleetctl-real.yaml")
	if _, err := os.Stat(cfg); err != nil {
		if err := os.WriteFile(filepath.Join(dir, "ziti-real-password"), []byte(m.ctrl.Password.Reveal()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		doc := fmt.Sprintf("ziti:\n  url: %s\n  username: %s\n  password_file: ziti-real-password\n  ca_file: %s\n"+
			"tenancy:\n  url: %s\n  token_file: tenancy-token\n", m.ctrl.URL, m.ctrl.User, m.ctrl.CAFile(), m.w.Stack.Admin.URL)
		if err := os.WriteFile(cfg, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.bins.fleetctl, append([]string{"--config", cfg}, args...)...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLEETCTL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := devstack.Result{Args: args, Stdout: stdout.String(), Stderr: stderr.String()}
	if err != nil {
		r.Exit = cmd.ProcessState.ExitCode()
		if r.Exit < 0 {
			t.Fatalf("fleetctl %v: %v", args, err)
		}
	}
	if strings.Contains(r.Stdout+r.Stderr, m.ctrl.Password.Reveal()) {
		t.Errorf("fleetctl %v printed the controller's password", args)
	}
	return r
}

func (m *mesh) realStatus(t *testing.T) statusDoc {
	t.Helper()
	r := m.realFleetctl(t, "status", "-o", "json")
	var doc statusDoc
	if err := json.Unmarshal([]byte(r.Stdout), &doc); err != nil {
		t.Fatalf("fleetctl status -o json (exit %d): %v\n%s\n%s", r.Exit, err, r.Stdout, r.Stderr)
	}
	return doc
}

// controllerAttrs lists the role attributes of an identity as the controller has them.
func (m *mesh) controllerAttrs(t *testing.T, name string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := m.ctrl.CLI(ctx, "edge", "list", "identities", fmt.Sprintf(`name="%s"`, name), "-j")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Data []struct {
			RoleAttributes []string `json:"roleAttributes"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || len(doc.Data) != 1 {
		t.Fatalf("ziti edge list identities %s: %v\n%s", name, err, out)
	}
	a := doc.Data[0].RoleAttributes
	slices.Sort(a)
	return a
}

// TestMeshFleetctl: fleetctl against the real management API — an `onboard` that creates the
// identity with an enrolment JWT `ziti edge enroll` accepts, online while the agent's proxy holds
// a session and offline after, a missing attribute that `repair-attrs --apply` really adds
// (keeping the others), and an identity tenancy does not know as ORPHAN_IDENTITY.
func TestMeshFleetctl(t *testing.T) {
	m := newMesh(t, "meshfleet", attrAgent, attrBao)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// onboard creates monky-host.<env> on the controller; its JWT enrols.
	env := "env-meshfleet-onb-" + randomSuffix()
	m.w.Stack.AddBackend(env, "demo")
	kits := t.TempDir()
	if r := m.realFleetctl(t, "onboard", env, "--site", "demo", "--transport", "sdk", "--out", kits); r.Exit != 0 {
		t.Fatalf("fleetctl onboard against the real controller: exit %d\n%s", r.Exit, r.Stderr)
	}
	jwt := filepath.Join(kits, env, "monky-host."+env+".jwt")
	idFile := filepath.Join(t.TempDir(), "id.json")
	if err := m.ctrl.Enroll(ctx, jwt, idFile); err != nil {
		t.Fatalf("ziti edge enroll of the kit's JWT: %v", err)
	}
	if got := m.controllerAttrs(t, "monky-host."+env); !slices.Equal(got, []string{attrAgent, attrBao}) {
		t.Errorf("onboard made monky-host.%s with attributes %v", env, got)
	}

	// Online while the proxy daemon holds the identity's session; offline once it stops.
	tenancyAddr, baoAddr := freeAddr(t), freeAddr(t)
	m.configure(t, "proxy", "")
	cfg, _ := os.ReadFile(m.box.ConfigPath)
	cfgText := strings.Replace(string(cfg), "  port: 443\n", "  port: 443\n  proxy_addr: "+tenancyAddr+"\n", 1)
	cfgText = strings.Replace(cfgText, "  addr: "+m.baoAddr+"\n", "  addr: "+m.baoAddr+"\n  proxy_addr: "+baoAddr+"\n", 1)
	if err := os.WriteFile(m.box.ConfigPath, []byte(cfgText), 0o640); err != nil {
		t.Fatal(err)
	}
	_, stopProxy := m.proxyDaemon(t)
	m.converge(t, 8)
	meshOnline := func() (bool, bool) {
		e, ok := m.realStatus(t).env(m.env)
		if !ok || e.MeshOnline == nil {
			return false, false
		}
		return *e.MeshOnline, true
	}
	waitFor := func(what string, want bool) {
		deadline := time.Now().Add(90 * time.Second)
		for {
			if got, ok := meshOnline(); ok && got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("fleetctl never saw %s %s", m.env, what)
			}
			time.Sleep(2 * time.Second)
		}
	}
	waitFor("online while its proxy runs", true)
	if err := stopProxy(); err != nil {
		t.Fatal(err)
	}
	waitFor("offline after its proxy stopped", false)

	// A missing attribute, then repair-attrs --apply, which keeps the other attributes.
	env2 := "env-meshfleet-attr-" + randomSuffix()
	m.w.Stack.AddBackend(env2, "demo")
	if err := m.ctrl.CreateIdentity(ctx, "monky-host."+env2, []string{attrBao, "keep-me"}, filepath.Join(t.TempDir(), "x.jwt")); err != nil {
		t.Fatal(err)
	}
	if e, ok := m.realStatus(t).env(env2); !ok || !slices.Contains(e.MissingAttributes, attrAgent) || e.Verdict != "ATTRS_MISSING" {
		t.Errorf("fleetctl status on an identity without #%s: %+v", attrAgent, e)
	}
	if r := m.realFleetctl(t, "repair-attrs", env2, "--apply"); r.Exit != 0 {
		t.Fatalf("repair-attrs --apply: exit %d\n%s\n%s", r.Exit, r.Stdout, r.Stderr)
	}
	if got := m.controllerAttrs(t, "monky-host."+env2); !slices.Equal(got, []string{"keep-me", attrAgent, attrBao}) {
		t.Errorf("after repair-attrs --apply the controller has %v, want keep-me, %s, %s", got, attrAgent, attrBao)
	}

	// An identity tenancy does not know.
	orphan := "env-meshfleet-orphan-" + randomSuffix()
	if err := m.ctrl.CreateIdentity(ctx, "monky-host."+orphan, []string{attrAgent, attrBao}, filepath.Join(t.TempDir(), "o.jwt")); err != nil {
		t.Fatal(err)
	}
	if e, ok := m.realStatus(t).env(orphan); !ok || e.Verdict != "ORPHAN_IDENTITY" {
		t.Errorf("an identity tenancy does not know: %+v (found %v), want ORPHAN_IDENTITY", e, ok)
	}
}

func randomSuffix() string { return fmt.Sprintf("%04x", time.Now().UnixNano()&0xffff) }
