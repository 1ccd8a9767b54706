package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/transport"
)

const (
	sourceBootstrap = "bootstrap"
	sourceLease     = "lease"
)

// ensureToken loads the token from disk, or logs in with the bootstrap grant when there is none.
func (a *Agent) ensureToken(ctx context.Context) error {
	tok, err := state.ReadToken(a.cfg.TokenPath())
	if err != nil {
		return err
	}
	a.token = tok
	a.redact.Add(tok.Reveal())
	if !tok.Empty() {
		return nil
	}
	return a.bootstrap(ctx)
}

// bootstrap exchanges the kit's deploy grant for a first OpenBao token, and deletes the grant
// once the login succeeded: it is single-purpose and must not linger on disk.
func (a *Agent) bootstrap(ctx context.Context) error {
	raw, err := os.ReadFile(a.cfg.BootstrapFile)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no OpenBao token and no bootstrap grant at %s: %w", a.cfg.BootstrapFile, ErrNeedsKit)
	}
	if err != nil {
		return fmt.Errorf("bootstrap grant %s: %w", a.cfg.BootstrapFile, err)
	}
	grant := secret.New(strings.TrimSpace(string(raw)))
	a.redact.Add(grant.Reveal())
	if grant.Empty() {
		return fmt.Errorf("bootstrap grant %s is empty: %w", a.cfg.BootstrapFile, ErrNeedsKit)
	}
	// Before the check-in these are the config's; after it (a re-bootstrap on a 401), the
	// OpenBao coordinates tenancy handed out for this tick.
	addr := a.vault.Addr
	client, err := a.deps.NewBao(addr)
	if err != nil {
		return err
	}
	tok, err := client.Login(ctx, a.vault.AuthMount, a.vault.AuthRole, grant)
	if err != nil {
		if isTemporary(err) {
			return a.classify("bao: bootstrap login", err)
		}
		if errors.Is(err, bao.ErrLoginRefused) && !roleMissing(err) {
			// A refused grant (expired, superseded, for another env) cannot be retried into
			// working: only a new kit brings a new one.
			return fmt.Errorf("bootstrap grant %s refused by OpenBao: %w: %w", a.cfg.BootstrapFile, err, ErrNeedsKit)
		}
		// A wrong CA, mount or role: the config, not the grant, needs fixing.
		return fmt.Errorf("bootstrap login: %w", err)
	}
	if err := a.storeToken(tok, sourceBootstrap, addr); err != nil {
		return err
	}
	if err := os.Remove(a.cfg.BootstrapFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("bootstrap grant could not be deleted after login", "path", a.cfg.BootstrapFile, "error", err.Error())
	}
	a.log.Info("bootstrap login ok; grant deleted", "path", a.cfg.BootstrapFile)
	return nil
}

// roleMissing tells a login refused for an unknown role (bao.role or bao.auth_mount in the
// config is wrong: a new kit would not help) from a refused grant.
func roleMissing(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "role") && strings.Contains(msg, "could not be found")
}

// storeToken makes tok, minted by the OpenBao at addr, the agent's token: token file first,
// then state, both atomic.
func (a *Agent) storeToken(tok bao.Token, source, addr string) error {
	a.redact.Add(tok.Value.Reveal())
	if err := state.WriteToken(a.cfg.TokenPath(), tok.Value); err != nil {
		return err
	}
	a.token = tok.Value
	a.st.Token = &state.TokenMeta{
		Source:     source,
		Accessor:   tok.Accessor,
		ObtainedAt: a.deps.Now().UTC(),
		TTLSec:     int64(tok.TTL.Seconds()),
		Addr:       addr,
	}
	return a.saveState()
}

// dropToken forgets a token tenancy refused.
func (a *Agent) dropToken() error {
	a.token = secret.Value{}
	a.st.Token = nil
	if err := state.RemoveToken(a.cfg.TokenPath()); err != nil {
		return err
	}
	return a.saveState()
}

// withAuth runs call with the current token. On 401 AGENT_UNAUTHENTICATED (the grant behind the
// token was superseded by a kit re-reveal or a retire) the token is dropped; with a fresh
// bootstrap grant on disk the agent logs in again and retries once, otherwise it stops and asks
// for the install kit. 403 AGENT_ENV_MISMATCH stops the tick at once with no further call.
func (a *Agent) withAuth(ctx context.Context, what string, call func(secret.Value) error) error {
	return a.classify(what, a.authCall(ctx, what, call))
}

// authCall is withAuth without the classification of the final error.
func (a *Agent) authCall(ctx context.Context, what string, call func(secret.Value) error) error {
	err := call(a.token)
	if errors.Is(err, tenancy.ErrUnauthenticated) {
		a.log.Warn("AGENT_UNAUTHENTICATED: bearer refused; token dropped", "call", what)
		if derr := a.dropToken(); derr != nil {
			return derr
		}
		if _, serr := os.Stat(a.cfg.BootstrapFile); serr != nil {
			a.log.Error("AGENT_UNAUTHENTICATED: no bootstrap grant on disk: re-run the install kit", "bootstrap_file", a.cfg.BootstrapFile)
			return fmt.Errorf("%s: bearer refused and no bootstrap grant at %s: %w", what, a.cfg.BootstrapFile, ErrNeedsKit)
		}
		if berr := a.bootstrap(ctx); berr != nil {
			return berr
		}
		err = call(a.token)
		if errors.Is(err, tenancy.ErrUnauthenticated) {
			return fmt.Errorf("%s: bearer refused again after a fresh bootstrap: %w", what, ErrNeedsKit)
		}
	}
	return err
}

// classify maps a client error onto the tick's sentinels, leaving others as they are.
func (a *Agent) classify(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tenancy.ErrEnvMismatch):
		a.log.Error("AGENT_ENV_MISMATCH: the token belongs to another env than config env_id; fix the config or re-issue the identity", "env_id", a.cfg.EnvID)
		return fmt.Errorf("%w: %w", err, ErrEnvMismatch)
	case isTemporary(err):
		a.log.Warn("temporary network failure", "call", what, "error", a.redact.Redact(err.Error()))
		return fmt.Errorf("%w: %w", err, ErrTemporary)
	}
	return err
}

func isTemporary(err error) bool {
	if errors.Is(err, transport.ErrUnmapped) || errors.Is(err, transport.ErrServiceNotVisible) {
		// The mesh answered, or the config names a target the transport has no route for:
		// retrying every minute will not help, and exit 75 would hide the box from
		// `systemctl --failed`. A missing #monky-deploy-agent attribute lands here.
		return false
	}
	return errors.Is(err, tenancy.ErrTemporary) || errors.Is(err, bao.ErrTemporary) || errors.Is(err, ErrTemporary)
}

// tokenAddr is the OpenBao that minted the current token: the only one that can look it up,
// renew or revoke it, or read secrets with it. A state written before the address was recorded
// falls back to the tick's OpenBao address.
func (a *Agent) tokenAddr() string {
	if a.st.Token != nil && a.st.Token.Addr != "" {
		return a.st.Token.Addr
	}
	return a.baoAddr
}

// tokenForApply returns the token to read this bundle's secrets with. Whatever its source, a
// token on disk is first looked up: an OpenBao that cannot be reached ends the tick (exit 75)
// before any lease is spent, since the login with it would fail the same way. A lease-derived
// token is reused while it has more than renew_below_s left, renewed when it can be, and only
// then replaced; the bootstrap token is swapped for a lease (PROTOCOL: before the first apply
// that needs secrets). Tenancy allows 5 leases an hour, and a failing deploy retried by the
// timer used to burn them all and then fail on LEASE_RATE_LIMITED forever (env-qa-02 pilot,
// seed 0.1.6): so a lease whose login fails for a temporary reason is kept for the next tick
// (lease.jwt), and while the current token works the apply goes on with it, swap deferred.
func (a *Agent) tokenForApply(ctx context.Context) (secret.Value, error) {
	// working: OpenBao confirmed the current token is valid this tick.
	working := false
	if !a.token.Empty() {
		client, err := a.deps.NewBao(a.tokenAddr())
		if err != nil {
			return secret.Value{}, err
		}
		info, err := client.LookupSelf(ctx, a.token)
		switch {
		case err != nil && !errors.Is(err, bao.ErrForbidden):
			// OpenBao unreachable, unmapped or invisible: no lease now.
			return secret.Value{}, a.classify("bao: lookup-self", err)
		case err != nil:
			a.log.Info("token no longer valid; leasing again", "token_source", a.tokenSource(), "error", a.redact.Redact(err.Error()))
		case info.TTL <= 0:
			a.log.Info("token expired; leasing again", "token_source", a.tokenSource())
		default:
			working = true
			if a.tokenSource() == sourceLease {
				tok, ok, err := a.keepLeaseToken(ctx, client, info)
				if ok || err != nil {
					return tok, err
				}
			}
		}
	}
	reason := "apply"
	if a.tokenSource() == sourceLease {
		reason = "renew" // a lease token near its end is replaced; the bootstrap token is swapped
	}
	looked := a.token
	tok, err := a.lease(ctx, reason)
	if a.token != looked {
		// A 401 on the lease dropped the token looked up above, and a re-bootstrap may have
		// replaced it: only a fresh bootstrap token works.
		working = !a.token.Empty() && a.tokenSource() == sourceBootstrap
	}
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, tenancy.ErrRateLimited) && working:
		a.log.Warn("lease rate-limited; applying with the current token, swap deferred", "token_source", a.tokenSource())
		return a.token, nil
	case errors.Is(err, tenancy.ErrRateLimited):
		a.log.Warn("lease rate-limited and no working token; the next tick retries")
		return secret.Value{}, fmt.Errorf("%w: %w", err, ErrTemporary)
	case errors.Is(err, ErrTemporary) && working:
		a.log.Warn("new token not obtained; applying with the current token, swap deferred", "token_source", a.tokenSource())
		return a.token, nil
	}
	return secret.Value{}, err
}

// keepLeaseToken decides about a valid lease-derived token: reused as it is while it has more
// than renew_below_s left, else renewed if OpenBao allows. ok false means a new lease is due.
func (a *Agent) keepLeaseToken(ctx context.Context, client Bao, info bao.TokenInfo) (tok secret.Value, ok bool, err error) {
	if info.TTL.Seconds() > float64(a.cfg.Bao.RenewBelowS) {
		a.log.Debug("reusing lease token", "ttl_s", int64(info.TTL.Seconds()))
		return a.token, true, nil
	}
	if !info.Renewable {
		return secret.Value{}, false, nil
	}
	renewed, err := client.RenewSelf(ctx, a.token)
	switch {
	case err == nil && renewed.TTL.Seconds() > float64(a.cfg.Bao.RenewBelowS):
		a.log.Info("lease token renewed", "ttl_s", int64(renewed.TTL.Seconds()))
		a.st.Token.ObtainedAt = a.deps.Now().UTC()
		a.st.Token.TTLSec = int64(renewed.TTL.Seconds())
		return a.token, true, a.saveState()
	case err != nil && !errors.Is(err, bao.ErrForbidden):
		return secret.Value{}, false, a.classify("bao: renew-self", err)
	case err != nil:
		a.log.Info("lease token renewal refused; leasing again", "error", a.redact.Redact(err.Error()))
	}
	return secret.Value{}, false, nil
}

func (a *Agent) tokenSource() string {
	if a.st.Token == nil {
		return ""
	}
	return a.st.Token.Source
}

// leaseGrant is a login grant from tenancy and where it logs in.
type leaseGrant struct {
	jwt               secret.Value
	addr, mount, role string
	expiresAt         time.Time
}

// lease turns a login grant from tenancy into the agent's token and revokes the previous one.
// The grant is the one kept from an earlier tick whose login failed, while it lasts; else a new
// one is leased.
func (a *Agent) lease(ctx context.Context, reason string) (secret.Value, error) {
	g, ok := a.pendingGrant()
	if ok {
		tok, err := a.loginWithGrant(ctx, g)
		if err == nil {
			a.log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", a.st.Token.TTLSec, "grant", "kept")
		}
		if err == nil || errors.Is(err, ErrTemporary) {
			return tok, err
		}
		// Refused (expired early, superseded): it will never log in. Lease anew.
		a.log.Info("kept lease grant refused by OpenBao; leasing again", "error", a.redact.Redact(err.Error()))
		a.dropPendingGrant()
	}
	g, err := a.newGrant(ctx, reason)
	if err != nil {
		return secret.Value{}, err
	}
	tok, err := a.loginWithGrant(ctx, g)
	if err != nil && errors.Is(err, ErrTemporary) {
		a.keepGrant(g)
	}
	if err == nil {
		a.log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", int64(a.st.Token.TTLSec))
	}
	return tok, err
}

// newGrant asks tenancy for a login grant.
func (a *Agent) newGrant(ctx context.Context, reason string) (leaseGrant, error) {
	var resp *protocol.LeaseResponse
	err := a.withAuth(ctx, "tenancy: lease", func(tok secret.Value) error {
		var err error
		resp, err = a.deps.Tenancy.Lease(ctx, tok, a.cfg.EnvID, reason)
		return err
	})
	if err != nil {
		return leaseGrant{}, err
	}
	g := leaseGrant{jwt: secret.New(resp.LoginJWT), addr: resp.Addr, mount: resp.Mount, role: resp.Role}
	a.redact.Add(g.jwt.Reveal())
	if g.addr == "" && resp.Vault != nil {
		g.addr = resp.Vault.Addr // the shape before tenancy's AgentLeaseOut
	}
	if g.addr == "" {
		g.addr = a.baoAddr
	}
	if g.mount == "" {
		g.mount = a.vault.AuthMount
	}
	if g.role == "" {
		g.role = a.vault.AuthRole
	}
	ttl := time.Duration(resp.TTLSec) * time.Second
	if ttl <= 0 {
		ttl = time.Hour // tenancy's grant lifetime of record
	}
	g.expiresAt = a.deps.Now().UTC().Add(ttl)
	return g, nil
}

// loginWithGrant logs in with g, makes the new token the agent's, forgets any kept grant and
// revokes the previous token at the OpenBao that minted it.
func (a *Agent) loginWithGrant(ctx context.Context, g leaseGrant) (secret.Value, error) {
	client, err := a.deps.NewBao(g.addr)
	if err != nil {
		return secret.Value{}, err
	}
	tok, err := client.Login(ctx, g.mount, g.role, g.jwt)
	if err != nil {
		return secret.Value{}, a.classify("bao: lease login", err)
	}
	old, oldAddr := a.token, a.tokenAddr()
	a.dropPendingGrant()
	if err := a.storeToken(tok, sourceLease, g.addr); err != nil {
		return secret.Value{}, err
	}
	if !old.Empty() && old.Reveal() != tok.Value.Reveal() {
		oldClient := client
		if oldAddr != g.addr {
			if oldClient, err = a.deps.NewBao(oldAddr); err != nil {
				a.log.Warn("previous token could not be revoked", "error", err.Error())
				return tok.Value, nil
			}
		}
		if rerr := oldClient.RevokeSelf(ctx, old); rerr != nil {
			a.log.Warn("previous token could not be revoked", "error", a.redact.Redact(rerr.Error()))
		}
	}
	return tok.Value, nil
}

func (a *Agent) leaseGrantPath() string { return filepath.Join(a.cfg.StateDir, "lease.jwt") }

// pendingGrant is the grant an earlier tick leased and could not log in with, while it lasts.
func (a *Agent) pendingGrant() (leaseGrant, bool) {
	p := a.st.PendingLease
	if p == nil {
		return leaseGrant{}, false
	}
	jwt, err := state.ReadToken(a.leaseGrantPath())
	if err != nil || jwt.Empty() || !a.deps.Now().Before(p.ExpiresAt) {
		a.dropPendingGrant()
		return leaseGrant{}, false
	}
	a.redact.Add(jwt.Reveal())
	a.log.Info("logging in with the lease grant kept from an earlier tick", "expires_at", p.ExpiresAt.Format(time.RFC3339))
	return leaseGrant{jwt: jwt, addr: p.Addr, mount: p.Mount, role: p.Role, expiresAt: p.ExpiresAt}, true
}

// keepGrant stores g for the next tick (0600, like the token beside it).
func (a *Agent) keepGrant(g leaseGrant) {
	if err := state.WriteToken(a.leaseGrantPath(), g.jwt); err != nil {
		a.log.Warn("lease grant could not be kept for the next tick", "error", err.Error())
		return
	}
	a.st.PendingLease = &state.PendingLease{Addr: g.addr, Mount: g.mount, Role: g.role, ExpiresAt: g.expiresAt}
	if err := a.saveState(); err != nil {
		a.log.Warn("state not saved", "error", err.Error())
	}
	a.log.Warn("lease login failed; the grant is kept for the next tick, no new lease until it expires", "expires_at", g.expiresAt.Format(time.RFC3339))
}

func (a *Agent) dropPendingGrant() {
	if a.st.PendingLease == nil {
		return
	}
	a.st.PendingLease = nil
	if err := state.RemoveToken(a.leaseGrantPath()); err != nil {
		a.log.Warn("kept lease grant could not be deleted", "path", a.leaseGrantPath(), "error", err.Error())
	}
	if err := a.saveState(); err != nil {
		a.log.Warn("state not saved", "error", err.Error())
	}
}
