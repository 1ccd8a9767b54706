package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// timerCheck: 0.1.8's prerm disabled the timer on upgrade and two boxes went silent, mesh-healthy.
func (c *checker) timerCheck(ctx context.Context) Result {
	cfg := c.cfg()
	t := c.timerState(ctx)
	if t == nil || t.Enabled == nil {
		if cfg.LaptopMode {
			return skip("no systemd here, and laptop_mode is on: run `monky-deployd tick` yourself or from your own scheduler")
		}
		return fail("systemd is not running or systemctl cannot be read: nothing runs tick on this box",
			"run the agent on a systemd host with "+systemd.TimerUnit+" enabled, or set laptop_mode: true and run `monky-deployd tick` from your own scheduler")
	}
	enabled := *t.Enabled
	active := t.Active != nil && *t.Active
	next := ""
	if t.NextElapse != nil {
		next = ", next run " + *t.NextElapse
	}
	if enabled && active {
		return ok("%s is enabled and active%s", systemd.TimerUnit, next)
	}
	when := ""
	if active {
		when = " after the next reboot"
	}
	return fail(fmt.Sprintf("%s is enabled=%t active=%t: no tick runs%s", systemd.TimerUnit, enabled, active, when),
		"systemctl enable --now "+systemd.TimerUnit)
}

// bootstrapPresent reports whether the bootstrap grant is on disk; stat'ed, never read.
func (c *checker) bootstrapPresent() bool {
	_, err := c.env.Stat(c.cfg().BootstrapFile)
	return err == nil
}

// tokenProblem is the failure when the token cannot be read, or nil.
func (c *checker) tokenProblem() *Result {
	_, err := c.readToken()
	if err == nil {
		return nil
	}
	p := c.cfg().TokenPath()
	r := fail(err.Error(), fmt.Sprintf("%s; a damaged token file: move it aside and %s", lookFix(p), c.needsKitFix()))
	if errors.Is(err, fs.ErrPermission) {
		r.Fix = fmt.Sprintf("run doctor as root or as %s: the token is %s's alone (0600)", c.agentName(), c.agentName())
	}
	return &r
}

func (c *checker) needsKitFix() string {
	env := c.cfg().EnvID
	return fmt.Sprintf("re-run the install kit: `fleetctl onboard %s --reissue` on the operator side, then install.sh with its bootstrap.jwt", env)
}

// unreachableFix says where to look when the mesh path to a service fails, by transport.
func (c *checker) unreachableFix(err error, service, hostPort string) string {
	cfg := c.cfg()
	switch cfg.Transport {
	case config.TransportSDK:
		switch {
		case errors.Is(err, transport.ErrServiceNotVisible):
			return fmt.Sprintf("identity monky-host.%s cannot see service %s (a missing role attribute): `fleetctl repair-attrs %s --apply` on the operator side", cfg.EnvID, service, cfg.EnvID)
		case errors.Is(err, transport.ErrNoTerminators):
			return fmt.Sprintf("nothing hosts service %s right now: the fault is on the service's side, not this box's", service)
		case errors.Is(err, transport.ErrIdentityMissing), errors.Is(err, transport.ErrIdentityUnreadable),
			errors.Is(err, transport.ErrIdentityMalformed), errors.Is(err, transport.ErrIdentityBadCert), errors.Is(err, transport.ErrIdentityBadKey):
			return "fix the identity first (see identity)"
		}
		return fmt.Sprintf("check the mesh from this box: is monky-host.%s online (`fleetctl status --env %s`), and the controller in its ztAPI reachable?", cfg.EnvID, cfg.EnvID)
	case config.TransportProxy:
		return "the proxy transport dials monky-deployd-proxy.service on loopback: systemctl enable --now monky-deployd-proxy.service; journalctl -u monky-deployd-proxy.service says why it stopped"
	}
	return fmt.Sprintf("transport system relies on ziti-edge-tunnel intercepting %s: systemctl status ziti-edge-tunnel; resolvectl query %s", hostPort, hostOf(hostPort))
}

func hostOf(hostPort string) string {
	if i := strings.LastIndexByte(hostPort, ':'); i > 0 {
		return strings.Trim(hostPort[:i], "[]")
	}
	return hostPort
}

// tenancy: reachable and the token accepted, by a check-in (the only effect-free authenticated
// call) carrying the tick's telemetry; doctor acts on none of the answer.
func (c *checker) tenancy(ctx context.Context) Result {
	cfg := c.cfg()
	url := cfg.TenancyURL()
	hostPort := strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	if c.env.TransportErr != nil {
		return fail("cannot dial tenancy: "+c.env.TransportErr.Error(), c.unreachableFix(c.env.TransportErr, cfg.Tenancy.Service, hostPort))
	}
	if r := c.tokenProblem(); r != nil {
		return *r
	}
	tok, _ := c.readToken()
	if tok.Empty() {
		if !c.bootstrapPresent() {
			return fail(fmt.Sprintf("no OpenBao token at %s and no bootstrap grant at %s: the agent has nothing to authenticate with", cfg.TokenPath(), cfg.BootstrapFile), c.needsKitFix())
		}
		status, code, err := c.probeTenancy(ctx, url)
		if err != nil {
			return fail(fmt.Sprintf("tenancy at %s is unreachable: %v", url, err), c.unreachableFix(err, cfg.Tenancy.Service, hostPort))
		}
		answer := fmt.Sprintf("HTTP %d", status)
		if code != "" {
			answer += " " + code
		}
		return ok("tenancy at %s answered an anonymous probe (%s); no token yet: the first tick logs in with %s", url, answer, cfg.BootstrapFile)
	}
	resp, err := c.env.Tenancy.Checkin(ctx, tok, c.checkinRequest(ctx))
	switch {
	case err == nil:
		return ok("tenancy at %s accepted the token (env %s, action=%s, desired %s)", url, resp.EnvID, resp.Action, protocol.ShortSha(resp.DesiredSha))
	case errors.Is(err, tenancy.ErrUnauthenticated):
		fix := c.needsKitFix()
		if c.bootstrapPresent() {
			fix = fmt.Sprintf("run `monky-deployd tick`: it puts the refused token aside and logs in again with %s", cfg.BootstrapFile)
		}
		return fail("tenancy refused the token (AGENT_UNAUTHENTICATED: its grant was superseded by a kit re-reveal or a retire, or it expired): "+err.Error(), fix)
	case errors.Is(err, tenancy.ErrEnvMismatch):
		return fail(fmt.Sprintf("the token belongs to another env than env_id %s: %v", cfg.EnvID, err),
			fmt.Sprintf("correct env_id in %s, or re-run the install kit for this box", cfg.Path))
	case errors.Is(err, tenancy.ErrNotTenancy):
		return fail("something that is not tenancy refused the call (no AGENT_* code; the token is not in question): "+err.Error(),
			"look at what answers for tenancy at "+url+" (an ingress or auth proxy); the agent keeps its token and the timer retries")
	case errors.Is(err, tenancy.ErrProtocol):
		return fail("tenancy's answer does not follow the protocol: "+err.Error(), "compare tenancy's version with the agent's (PROTOCOL.md); nothing to fix on this box")
	}
	var ae *tenancy.APIError
	if errors.As(err, &ae) && ae.Status >= 500 {
		return fail("tenancy is reachable but failing: "+err.Error(), "a fault on tenancy's side: the timer retries; nothing to fix on this box")
	}
	if errors.As(err, &ae) && ae.Status != 0 {
		return fail("tenancy answered: "+err.Error(), "tenancy's code and message say why; compare tenancy's version with the agent's (PROTOCOL.md)")
	}
	return fail(fmt.Sprintf("tenancy at %s is unreachable: %v", url, err), c.unreachableFix(err, cfg.Tenancy.Service, hostPort))
}

// probeTenancy posts an empty check-in without a bearer: the 401 proves the path and records nothing.
func (c *checker) probeTenancy(ctx context.Context, base string) (status int, code string, err error) {
	hc := c.env.TenancyHTTP
	if hc == nil {
		return 0, "", errors.New("no HTTP client for tenancy")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/agent/checkin", bytes.NewReader([]byte("{}")))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	eb := protocol.ParseErrorBody(body)
	return resp.StatusCode, eb.Code, nil
}

// checkinRequest is the check-in the tick would send now, so doctor leaves tenancy's view as it
// was; upgraded_from is sent while pending, and only the tick clears it.
func (c *checker) checkinRequest(ctx context.Context) protocol.CheckinRequest {
	cfg := c.cfg()
	st := c.agentState()
	tel := tenancy.Telemetry{Now: c.now(), Hostname: c.env.Hostname, Timer: c.timerState(ctx)}
	if c.env.Meter != nil {
		tel.Disk = c.env.Meter
	}
	return tenancy.CheckinRequest(cfg, st, tel)
}

// openbao: reachable over verified TLS and the token valid (without a token, the 403 still proves
// path and CA). Doctor never logs in with the grant: that would mint a token nobody keeps.
func (c *checker) openbao(ctx context.Context) Result {
	cfg := c.cfg()
	addr := cfg.Bao.Addr
	_, host, port := cfg.BaoEndpoint()
	hostPort := fmt.Sprintf("%s:%d", host, port)
	caFix := c.caFix()
	if c.env.TransportErr != nil {
		return fail("cannot dial OpenBao: "+c.env.TransportErr.Error(), c.unreachableFix(c.env.TransportErr, cfg.Bao.Service, hostPort))
	}
	if c.env.BaoErr != nil {
		return fail(c.env.BaoErr.Error(), caFix)
	}
	if r := c.tokenProblem(); r != nil {
		return *r
	}
	ca := "CA " + cfg.Bao.CAFile
	if _, err := c.env.Stat(cfg.Bao.CAFile); errors.Is(err, fs.ErrNotExist) {
		ca = "the system roots (" + cfg.Bao.CAFile + " does not exist)"
	}
	tok, _ := c.readToken()
	// As the tick: where the token was minted first, bao.addr only when that does not answer.
	var moved string
	if elsewhere := token.Addr(c.agentState(), addr); !tok.Empty() && elsewhere != addr {
		r, done := c.tokenAt(ctx, elsewhere, tok, ca)
		if done {
			return r
		}
		moved = r.Detail
	}
	info, err := c.env.Bao.LookupSelf(ctx, tok)
	switch {
	case err == nil && tok.Empty():
		// A server answering an anonymous lookup is no OpenBao to trust with the token.
		return fail(fmt.Sprintf("%s answered lookup-self without a token", addr), "check that bao.addr points at OpenBao")
	case err == nil:
		if r := c.otherEnv(info); r != nil {
			return *r
		}
		renew := "not renewable"
		if info.Renewable {
			renew = "renewable"
		}
		if moved != "" {
			return ok("%s verified against %s; token valid for %s, %s (%s; the next apply records it at %s)", addr, ca, info.TTL.Round(time.Minute), renew, moved, addr)
		}
		return ok("%s verified against %s; token valid for %s, %s", addr, ca, info.TTL.Round(time.Minute), renew)
	case errors.Is(err, bao.ErrTLS):
		return fail(fmt.Sprintf("%s presents a certificate that does not verify against %s: %v", addr, ca, err), caFix)
	case errors.Is(err, bao.ErrForbidden) && tok.Empty():
		note := "no token yet: the first tick logs in with " + cfg.BootstrapFile
		if !c.bootstrapPresent() {
			note = "no token and no bootstrap grant (see tenancy)"
		}
		return ok("%s verified against %s; %s", addr, ca, note)
	case errors.Is(err, bao.ErrForbidden):
		fix := c.deadTokenFix()
		detail := fmt.Sprintf("%s is reachable (TLS verified against %s) but refuses the token at %s: expired or revoked", addr, ca, cfg.TokenPath())
		if moved != "" {
			detail += "; " + moved
		}
		return fail(detail, fix)
	}
	var re interface{ Timeout() bool }
	if errors.Is(err, bao.ErrTemporary) || errors.As(err, &re) {
		return fail(fmt.Sprintf("OpenBao at %s is unreachable: %v", addr, err), c.unreachableFix(err, cfg.Bao.Service, hostPort))
	}
	return fail(fmt.Sprintf("OpenBao at %s: %v", addr, err), fmt.Sprintf("check bao.addr and bao.ca_file in %s against the OpenBao that error comes from", cfg.Path))
}

// caFix is the fix for a certificate OpenBao presents that bao.ca_file does not verify.
func (c *checker) caFix() string {
	return fmt.Sprintf("put OpenBao's CA certificate (the kit's openbao-ca.pem) at %s", c.cfg().Bao.CAFile)
}

// deadTokenFix: a tick when a grant is on disk to log in again, else the kit.
func (c *checker) deadTokenFix() string {
	if c.bootstrapPresent() {
		return fmt.Sprintf("run `monky-deployd tick`: tenancy refuses the dead token and the tick logs in again with %s", c.cfg().BootstrapFile)
	}
	return c.needsKitFix()
}

// otherEnv fails a valid token that belongs to another env than env_id (nil when it is this one's).
func (c *checker) otherEnv(info bao.TokenInfo) *Result {
	cfg := c.cfg()
	if env := info.Meta["env_id"]; env != "" && env != cfg.EnvID {
		r := fail(fmt.Sprintf("the token at %s belongs to env %s, but env_id is %s", cfg.TokenPath(), env, cfg.EnvID),
			fmt.Sprintf("correct env_id in %s, or re-run the install kit for this box", cfg.Path))
		return &r
	}
	return nil
}

// tokenAt looks the token up at addr; done is false when it does not answer (then bao.addr is tried).
func (c *checker) tokenAt(ctx context.Context, addr string, tok secret.Value, ca string) (r Result, done bool) {
	cfg := c.cfg()
	if c.env.BaoAt == nil {
		return Result{Detail: "doctor cannot reach the OpenBao at " + addr + " that minted the token"}, false
	}
	client, err := c.env.BaoAt(addr)
	if err != nil {
		return Result{Detail: fmt.Sprintf("the OpenBao at %s that minted the token: %v", addr, err)}, false
	}
	info, err := client.LookupSelf(ctx, tok)
	switch {
	case err == nil:
		if r := c.otherEnv(info); r != nil {
			return *r, true
		}
		return ok("%s verified against %s; token valid for %s there: a lease's addr minted it, not bao.addr %s", addr, ca, info.TTL.Round(time.Minute), cfg.Bao.Addr), true
	case errors.Is(err, bao.ErrTLS):
		return fail(fmt.Sprintf("the OpenBao at %s that minted the token presents a certificate that does not verify against %s: %v", addr, ca, err), c.caFix()), true
	case errors.Is(err, bao.ErrForbidden):
		fix := c.deadTokenFix()
		return fail(fmt.Sprintf("the OpenBao at %s that minted the token refuses it (%s): expired or revoked", addr, cfg.TokenPath()), fix), true
	}
	return Result{Detail: fmt.Sprintf("the OpenBao at %s that minted the token does not answer (%v)", addr, err)}, false
}
