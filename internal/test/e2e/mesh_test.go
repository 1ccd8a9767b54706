//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/zitidev"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// The mesh tests run the agent against a real OpenZiti controller and edge router (`ziti edge
// quickstart` on loopback): the router hosts tenancy's agent API and OpenBao — the dev stack's,
// on loopback — as ziti services, and the agent reaches them only through the mesh.

// Role attributes the agent's identity carries in production (fleetctl onboard gives both).
const (
	attrAgent = "monky-deploy-agent"
	attrBao   = "openbao-client"
)

// mesh is a fleet of one box whose agent speaks to tenancy and OpenBao over a real mesh.
type mesh struct {
	*fleet
	ctrl            *zitidev.Controller
	env             string
	box             *devstack.Box
	tenancySvc      string
	baoSvc, baoAddr string // baoAddr: what tenancy hands out and bao.addr must match
	identity        string // the enrolled identity file of monky-host.<env>
}

// newMesh starts the controller, the dev stack with one box, services for tenancy and OpenBao
// hosted by the router with the production dial roles, and the box's enrolled identity.
func newMesh(t testing.TB, name string, attrs ...string) *mesh {
	t.Helper()
	itest.Require(t, itest.PartZiti)
	f := newFleet(t, name, 1, time.Hour) // the test ticks by hand
	ctrl := itest.StartZiti(t)
	m := &mesh{fleet: f, ctrl: ctrl, env: f.envs[0], box: f.boxes[0],
		tenancySvc: "monky.tenancy.deploy." + name, baoSvc: "openbao." + name}
	u, err := url.Parse(f.w.Stack.Tenancy.URL)
	if err != nil {
		t.Fatal(err)
	}
	m.baoAddr = f.w.Stack.Bao.Addr()
	b, err := url.Parse(m.baoAddr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := ctrl.HostService(ctx, m.tenancySvc, u.Host, attrAgent); err != nil {
		t.Fatal(err)
	}
	if err := ctrl.HostService(ctx, m.baoSvc, b.Host, attrBao); err != nil {
		t.Fatal(err)
	}
	if m.identity, err = ctrl.Identity(ctx, "monky-host."+m.env, attrs, m.box.Dir); err != nil {
		t.Fatal(err)
	}
	return m
}

// configure rewrites the box's config for transport sdk or proxy through the mesh. The tenancy
// host:port is the intercept name production uses; the SDK dials the service by name whatever it
// is. bao.addr is the address tenancy hands out (the sdk and proxy transports map only that one).
func (m *mesh) configure(t testing.TB, transport string, extra string) {
	t.Helper()
	cfg := fmt.Sprintf(`env_id: %s
site: demo
transport: %s
identity: %s
tenancy:
  service: %s
  host: monky.tenancy.deploy
  port: 443
bao:
  service: %s
  addr: %s
  ca_file: %s
interval_s: 5
state_dir: %s
bootstrap_file: %s
compose_project: %s
healthy_timeout_s: 60
registry_host: %s
disk:
  headroom_bytes: 1048576
%s`, m.env, transport, m.identity, m.tenancySvc, m.baoSvc, m.baoAddr, filepath.Join(m.box.Dir, "no-openbao-ca.pem"),
		filepath.Join(m.box.Dir, "state"), m.box.BootstrapFile, m.box.Project, m.w.Registry.Addr, extra)
	if err := os.WriteFile(m.box.ConfigPath, []byte(cfg), 0o640); err != nil {
		t.Fatal(err)
	}
}

// tick runs one tick and returns it.
func (m *mesh) tick(t testing.TB) devstack.Tick {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	tk, err := m.box.Tick(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// converge deploys hello and ticks until the agent reports it healthy (at most n ticks).
func (m *mesh) converge(t testing.TB, n int) {
	t.Helper()
	sha, err := m.w.Deploy(m.env, "hello")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		tk := m.tick(t)
		if r, ok := m.w.Stack.Tenancy.LastReport(m.env); ok && r.Sha == sha && r.Result == protocol.ResultHealthy {
			return
		}
		if tk.Exit != 0 && tk.Exit != 75 {
			m.fatalWithJournals("tick %d exited %d", i+1, tk.Exit)
		}
	}
	m.fatalWithJournals("no healthy report of %s after %d ticks through the mesh", sha[:12], n)
}

// TestMeshSDKAppliesABundle: the sdk transport applies a bundle through the real mesh and
// converged ticks repeat, each one exit 0.
func TestMeshSDKAppliesABundle(t *testing.T) {
	m := newMesh(t, "meshsdk", attrAgent, attrBao)
	m.configure(t, "sdk", "")
	m.converge(t, 6)
	for i := 0; i < 3; i++ {
		if tk := m.tick(t); tk.Exit != 0 {
			m.fatalWithJournals("converged tick %d through the mesh exited %d", i+1, tk.Exit)
		}
	}
	if c := m.w.Stack.Tenancy.Checkins(m.env); len(c) == 0 || c[len(c)-1].Request.Transport != "sdk" {
		t.Errorf("the last check-in does not say transport sdk: %+v", c)
	}
}

// proxyDaemon runs `monky-deployd proxy` on the box's config until the test ends, or until the
// returned stop (which reports how the stop went) is called.
func (m *mesh) proxyDaemon(t testing.TB) (*process.Process, func() error) {
	t.Helper()
	p, err := process.Start("monky-deployd proxy", filepath.Join(m.box.Dir, "proxy.log"),
		[]string{"HOME=" + filepath.Join(m.box.Dir, "home")}, nil, m.box.Bin(), "--config", m.box.ConfigPath, "proxy")
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() { stopErr = p.Stop() })
		return stopErr
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("proxy log:\n%s", p.LogTail())
		}
		if err := stop(); err != nil {
			t.Errorf("stopping the proxy: %v", err)
		}
	})
	return p, stop
}

func freeAddr(t testing.TB) string {
	t.Helper()
	port, err := process.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
}

// apiSessions is the number of API sessions the controller holds for identity: each controller
// authentication makes one, and they outlive the process that made them.
func (m *mesh) apiSessions(t testing.TB, identity string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := m.ctrl.CLI(ctx, "edge", "list", "api-sessions", "limit none", "-j")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Data []struct {
			Identity struct {
				Name string `json:"name"`
			} `json:"identity"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("ziti edge list api-sessions -j: %v\n%s", err, out)
	}
	n := 0
	for _, s := range doc.Data {
		if s.Identity.Name == identity {
			n++
		}
	}
	return n
}

// TestMeshProxyDaemon: `monky-deployd proxy` holds one ziti context for every tick (the
// controller sees one API session however many ticks run), and after the controller and router
// restart it carries ticks again without being restarted itself.
func TestMeshProxyDaemon(t *testing.T) {
	m := newMesh(t, "meshproxy", attrAgent, attrBao)
	tenancyAddr, baoAddr := freeAddr(t), freeAddr(t)
	m.configure(t, "proxy", "")
	cfg, err := os.ReadFile(m.box.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	cfgText := strings.Replace(string(cfg), "  port: 443\n", "  port: 443\n  proxy_addr: "+tenancyAddr+"\n", 1)
	cfgText = strings.Replace(cfgText, "  addr: "+m.baoAddr+"\n", "  addr: "+m.baoAddr+"\n  proxy_addr: "+baoAddr+"\n", 1)
	if err := os.WriteFile(m.box.ConfigPath, []byte(cfgText), 0o640); err != nil {
		t.Fatal(err)
	}
	_, stop := m.proxyDaemon(t)
	m.converge(t, 8)
	before := m.apiSessions(t, "monky-host."+m.env)
	for i := 0; i < 4; i++ {
		if tk := m.tick(t); tk.Exit != 0 {
			m.fatalWithJournals("converged tick %d through the proxy exited %d", i+1, tk.Exit)
		}
	}
	if after := m.apiSessions(t, "monky-host."+m.env); after != before || after > 1 {
		t.Errorf("the controller holds %d API sessions of the agent after 4 more ticks (%d before): the proxy should authenticate once", after, before)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if err := m.ctrl.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		tk := m.tick(t)
		if tk.Exit == 0 {
			break
		}
		if time.Now().After(deadline) {
			m.fatalWithJournals("no successful tick through the proxy within 2 min of the controller's restart (last exit %d)", tk.Exit)
		}
		time.Sleep(2 * time.Second)
	}
	// The daemon the test started carried those ticks: it is still running (Stop refuses a
	// process that had exited) and stops cleanly. A ready probe cannot say this: WaitReady
	// returns at a true probe before it looks whether the process is gone.
	if err := stop(); err != nil {
		t.Fatalf("the proxy daemon after the restart: %v", err)
	}
}

// TestMeshRefusals: what the agent says when the mesh says no — an identity without
// #monky-deploy-agent cannot see tenancy's service; a service nothing hosts has no terminators.
func TestMeshRefusals(t *testing.T) {
	m := newMesh(t, "meshno", attrBao) // no #monky-deploy-agent
	m.configure(t, "sdk", "")
	tk := m.tick(t)
	if tk.Exit == 0 || !strings.Contains(tk.Output, "not visible to this identity") || !strings.Contains(tk.Output, "#"+attrAgent) {
		m.fatalWithJournals("an identity without #%s: tick exited %d, want the 'not visible' error naming the attribute", attrAgent, tk.Exit)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	unhosted := "monky.tenancy.unhosted"
	if err := m.ctrl.UnhostedService(ctx, unhosted, attrBao); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(m.box.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.box.ConfigPath, []byte(strings.Replace(string(cfg), "service: "+m.tenancySvc, "service: "+unhosted, 1)), 0o640); err != nil {
		t.Fatal(err)
	}
	tk = m.tick(t)
	if tk.Exit == 0 || !strings.Contains(tk.Output, "has no terminators") || !strings.Contains(tk.Output, "not hosting it") {
		m.fatalWithJournals("a service nothing hosts: tick exited %d, want the 'no terminators … not hosting it' error", tk.Exit)
	}
}

// TestMeshIdentityReadThroughGroup: an identity file readable only by its group is read by an
// agent running in that group, and refused — with the advice to join the group — without it.
// The agent runs as an unprivileged uid here (the test runs as root, which reads anything).
func TestMeshIdentityReadThroughGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		itest.Unavailable(t, "needs root, to run the agent as another uid")
	}
	m := newMesh(t, "meshgrp", attrAgent, attrBao)
	m.configure(t, "sdk", "")
	const uid, zitiGID, otherGID = 64123, 64124, 64125
	if err := os.Chown(m.identity, 0, zitiGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.identity, 0o640); err != nil {
		t.Fatal(err)
	}
	// The agent's own files belong to its uid, as the package arranges for monky-deployd.
	for _, p := range []string{m.box.Dir, filepath.Join(m.box.Dir, "home"), m.box.ConfigPath, filepath.Dir(m.box.BootstrapFile), m.box.BootstrapFile} {
		if err := os.Chown(p, uid, otherGID); err != nil {
			t.Fatal(err)
		}
	}
	// The way down to the agent's binary, config, identity and kit, for that uid.
	for _, p := range []string{m.box.Bin(), m.box.Dir, m.box.BootstrapFile} {
		for d := filepath.Dir(p); d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
				t.Fatal(err)
			}
		}
	}
	runAs := func(groups ...uint32) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, m.box.Bin(), "--config", m.box.ConfigPath, "tick")
		cmd.Env = []string{"HOME=" + filepath.Join(m.box.Dir, "home"), "PATH=" + os.Getenv("PATH")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: otherGID, Groups: groups}}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), string(out)
	}
	code, out := runAs() // not in the file's group
	if code == 0 || !strings.Contains(out, "not readable by this user") || !strings.Contains(out, "usermod -a -G ziti") {
		t.Fatalf("without the group: exit %d, want the identity refused with the group advice:\n%s", code, out)
	}
	before := len(m.w.Stack.Tenancy.Checkins(m.env))
	code, out = runAs(zitiGID)
	if strings.Contains(out, "not readable by this user") {
		t.Fatalf("in the file's group the identity is still unreadable (exit %d):\n%s", code, out)
	}
	// Read, it reaches tenancy through the mesh: the check-in arrives (the tick may fail later,
	// at docker, which this uid may not use).
	if after := len(m.w.Stack.Tenancy.Checkins(m.env)); after <= before {
		t.Fatalf("in the file's group the tick (exit %d) did not check in through the mesh:\n%s", code, out)
	}
}

// TestMeshSDKKeepsItsSession: the sdk transport authenticates to the real controller once and
// keeps the session in state_dir (0600), with the services it dialed and their dial sessions, for
// the next ticks, which authenticate no more; a kept dial session the controller does not know
// does not fail the tick; a kept session that is stale costs one authentication, never the
// tick — expired, refused by the
// controller (a token it does not know: revoked), after the controller restarted, and of a
// renewed identity certificate (its fingerprint no longer the file's). No token is ever printed.
func TestMeshSDKKeepsItsSession(t *testing.T) {
	m := newMesh(t, "meshkeep", attrAgent, attrBao)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if err := m.ctrl.EnableEvents(ctx); err != nil {
		t.Fatal(err)
	}
	auths := func() int {
		n, err := m.ctrl.APISessionsCreated(ctx, "monky-host."+m.env)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	m.configure(t, "sdk", "")
	m.converge(t, 6)
	sessionFile := filepath.Join(m.box.Dir, "state", "ziti-session.json")
	read := func() map[string]any {
		t.Helper()
		b, err := os.ReadFile(sessionFile)
		if err != nil {
			t.Fatalf("the session file: %v", err)
		}
		var rec map[string]any
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	write := func(rec map[string]any) {
		t.Helper()
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sessionFile, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var outputs []string
	// tickCosts runs a tick that must succeed authenticating at most most times (a stale session
	// costs one authentication, or less: an OIDC session may be refreshed with its refresh token).
	tickCosts := func(what string, most int) {
		t.Helper()
		before := auths()
		tk := m.tick(t)
		outputs = append(outputs, tk.Output)
		if tk.Exit != 0 {
			m.fatalWithJournals("%s: tick exited %d", what, tk.Exit)
		}
		if got := auths() - before; got > most {
			t.Errorf("%s: the tick authenticated %d times, want at most %d", what, got, most)
		}
	}
	if st, err := os.Stat(sessionFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("after converging: session file %v, %v; want one of mode 0600", st, err)
	}
	first := read()
	// tickets is the file's TLS session tickets by kind and host, with when each was stored.
	tickets := func(rec map[string]any) map[string]string {
		out := map[string]string{}
		ts, _ := rec["tls_sessions"].(map[string]any)
		for k, v := range ts {
			out[k], _ = v.(map[string]any)["stored_at"].(string)
		}
		return out
	}
	for i := 0; i < 3; i++ {
		tickCosts(fmt.Sprintf("converged tick %d", i+1), 0)
	}
	if read()["token"] != first["token"] {
		t.Error("the kept session was replaced although it served")
	}
	// The converged ticks resumed both TLS handshakes with the kept tickets: a full handshake
	// would have stored its own ticket.
	kinds := map[string]bool{}
	for k := range tickets(read()) {
		kinds[strings.Fields(k)[0]] = true
	}
	if !kinds["controller"] || !kinds["router"] {
		t.Errorf("the file keeps TLS sessions of %v, want the controller's and the router's", tickets(read()))
	}
	if got, want := tickets(read()), tickets(first); !maps.Equal(got, want) {
		t.Errorf("the converged ticks replaced the TLS tickets (a full handshake): %v, were %v", got, want)
	}
	// The services the session dialed ride with it, so that a converged tick neither looks
	// them up nor creates a dial session.
	services, _ := read()["services"].(map[string]any)
	if len(services) == 0 {
		t.Fatal("the kept session holds no dialed service")
	}
	dialTokens := func(rec map[string]any) (out []string) {
		svcs, _ := rec["services"].(map[string]any)
		for _, ks := range svcs {
			ses, _ := ks.(map[string]any)["session"].(map[string]any)
			tok, _ := ses["token"].(string)
			out = append(out, tok)
		}
		return out
	}

	// A dial session the controller does not know (deleted, expired): the tick succeeds. (The
	// quickstart's router, v1.7 with its router data model, let the dial through on the
	// identity's policies — the kept token was not replaced; a router that checks it makes the
	// SDK create another in the same dial.)
	rec := read()
	for name, ks := range rec["services"].(map[string]any) {
		ses := ks.(map[string]any)["session"].(map[string]any)
		ses["id"] = "monky-unknown-" + name
		ses["token"] = "00000000-0000-0000-0000-00000000dead"
	}
	write(rec)
	tickCosts("dial session the controller does not know", 1)

	rec = read()
	rec["expires_at"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	write(rec)
	tickCosts("expired session", 1)
	if read()["token"] == rec["token"] {
		t.Error("the expired session was not replaced")
	}

	rec = read()
	rec["token"] = strings.Repeat("0", len(rec["token"].(string))-4) + "dead"
	write(rec)
	tickCosts("session the controller does not know", 1)
	if read()["token"] == rec["token"] {
		t.Error("the refused session was not replaced")
	}

	rec = read()
	rec["identity_sha256"] = strings.Repeat("ab", 32)
	write(rec)
	tickCosts("renewed identity certificate", 1)
	if r := read(); r["identity_sha256"] == rec["identity_sha256"] || r["token"] == rec["token"] {
		t.Error("the session of the old certificate was not replaced by the new one's")
	}

	tickCosts("the session kept again", 0)
	if err := m.ctrl.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	before := auths()
	tk := m.tick(t)
	outputs = append(outputs, tk.Output)
	if tk.Exit != 0 {
		m.fatalWithJournals("the first tick after the controller restarted exited %d", tk.Exit)
	}
	if n := auths() - before; n > 1 {
		t.Errorf("after the controller restarted the tick authenticated %d times, want at most 1", n)
	}
	beforeRestart := tickets(first)
	for k, at := range tickets(read()) {
		if beforeRestart[k] == at {
			t.Errorf("the TLS ticket %s of the servers before their restart is still kept (stored %s)", k, at)
		}
	}
	tickCosts("after the restart", 0)

	// The controller's ticket now comes from a handshake of a restored tick. A session the
	// controller refuses, found by the SDK itself (the service lookup's 401), makes the SDK
	// authenticate while the kept tickets are served: the resumed handshake must still carry
	// the identity's certificate.
	rec = read()
	delete(rec, "services")
	for _, k := range []string{"token", "refresh_token"} {
		if v, ok := rec[k].(string); ok && len(v) > 4 {
			rec[k] = strings.Repeat("0", len(v)-4) + "dead"
		}
	}
	write(rec)
	tickCosts("session the controller does not know, after the restart", 1)
	if read()["token"] == rec["token"] {
		t.Error("the refused session was not replaced after the restart")
	}

	for _, r := range []map[string]any{first, read()} {
		secrets := map[string]string{}
		for _, k := range []string{"token", "refresh_token", "id_token"} {
			secrets[k], _ = r[k].(string)
		}
		for i, tok := range dialTokens(r) {
			secrets[fmt.Sprintf("dial session token %d", i)] = tok
		}
		ts, _ := r["tls_sessions"].(map[string]any)
		for k, v := range ts {
			for _, f := range []string{"ticket", "state"} {
				secrets[k+" "+f], _ = v.(map[string]any)[f].(string)
			}
		}
		for k, v := range secrets {
			if len(v) < 8 {
				continue
			}
			for _, out := range outputs {
				if strings.Contains(out, v) {
					t.Fatalf("the tick's output holds the session's %s", k)
				}
			}
		}
	}
}
