package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

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
	client, err := a.deps.NewBao(a.cfg.Bao.Addr)
	if err != nil {
		return err
	}
	tok, err := client.Login(ctx, a.cfg.Bao.AuthMount, a.cfg.Bao.Role, grant)
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
	if err := a.storeToken(tok, sourceBootstrap); err != nil {
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

// storeToken makes tok the agent's token: token file first, then state, both atomic.
func (a *Agent) storeToken(tok bao.Token, source string) error {
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
	return a.classify(what, err)
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

// tokenForApply returns the token to read this bundle's secrets with. A lease-derived token is
// reused while it has more than renew_below_s left, renewed when it can be, and only then
// re-leased: tenancy allows 5 leases an hour, and a failing deploy retried by the timer used to
// burn them all and then fail on LEASE_RATE_LIMITED forever (env-qa-02 pilot, seed 0.1.6).
func (a *Agent) tokenForApply(ctx context.Context) (secret.Value, error) {
	client, err := a.deps.NewBao(a.baoAddr)
	if err != nil {
		return secret.Value{}, err
	}
	// The token that just passed the check-in works, unless OpenBao says otherwise below.
	working := !a.token.Empty()
	if a.st.Token != nil && a.st.Token.Source == sourceLease && !a.token.Empty() {
		info, err := client.LookupSelf(ctx, a.token)
		working = err == nil && info.TTL > 0
		switch {
		case err == nil && info.TTL.Seconds() > float64(a.cfg.Bao.RenewBelowS):
			a.log.Debug("reusing lease token", "ttl_s", int64(info.TTL.Seconds()))
			return a.token, nil
		case err != nil && !errors.Is(err, bao.ErrForbidden):
			// OpenBao unreachable, unmapped or invisible: a lease now would be spent for a
			// login that fails the same way (tenancy allows 5 an hour).
			return secret.Value{}, a.classify("bao: lookup-self", err)
		case err == nil && info.Renewable:
			tok, rerr := client.RenewSelf(ctx, a.token)
			if rerr == nil && tok.TTL.Seconds() > float64(a.cfg.Bao.RenewBelowS) {
				a.log.Info("lease token renewed", "ttl_s", int64(tok.TTL.Seconds()))
				if a.st.Token != nil {
					a.st.Token.ObtainedAt = a.deps.Now().UTC()
					a.st.Token.TTLSec = int64(tok.TTL.Seconds())
				}
				return a.token, a.saveState()
			}
			if rerr != nil && !errors.Is(rerr, bao.ErrForbidden) {
				return secret.Value{}, a.classify("bao: renew-self", rerr)
			}
			if rerr != nil {
				a.log.Info("lease token renewal refused; leasing again", "error", a.redact.Redact(rerr.Error()))
			}
		case err != nil:
			a.log.Info("lease token no longer valid; leasing again", "error", a.redact.Redact(err.Error()))
		}
	}
	reason := "apply"
	if a.tokenSource() == sourceLease {
		reason = "renew" // a lease token near its end is replaced; the bootstrap token is swapped
	}
	tok, err := a.lease(ctx, reason)
	if errors.Is(err, tenancy.ErrRateLimited) {
		if working {
			a.log.Warn("lease rate-limited; applying with the current token, swap deferred", "token_source", a.tokenSource())
			return a.token, nil
		}
		a.log.Warn("lease rate-limited and no working token; the next tick retries")
		return secret.Value{}, fmt.Errorf("%w: %w", err, ErrTemporary)
	}
	return tok, err
}

func (a *Agent) tokenSource() string {
	if a.st.Token == nil {
		return ""
	}
	return a.st.Token.Source
}

// lease asks tenancy for a login grant, logs in with it, stores the new token and revokes the
// previous one.
func (a *Agent) lease(ctx context.Context, reason string) (secret.Value, error) {
	var resp *protocol.LeaseResponse
	err := a.withAuth(ctx, "tenancy: lease", func(tok secret.Value) error {
		var err error
		resp, err = a.deps.Tenancy.Lease(ctx, tok, a.cfg.EnvID, reason)
		return err
	})
	if errors.Is(err, tenancy.ErrRateLimited) {
		return secret.Value{}, err
	}
	if err != nil {
		return secret.Value{}, err
	}
	jwt := secret.New(resp.LoginJWT)
	a.redact.Add(jwt.Reveal())
	addr := resp.Addr
	if addr == "" && resp.Vault != nil {
		addr = resp.Vault.Addr
	}
	if addr == "" {
		addr = a.baoAddr
	}
	mount, role := resp.Mount, resp.Role
	if mount == "" {
		mount = a.vault.AuthMount
	}
	if role == "" {
		role = a.vault.AuthRole
	}
	client, err := a.deps.NewBao(addr)
	if err != nil {
		return secret.Value{}, err
	}
	tok, err := client.Login(ctx, mount, role, jwt)
	if err != nil {
		return secret.Value{}, a.classify("bao: lease login", err)
	}
	old := a.token
	if err := a.storeToken(tok, sourceLease); err != nil {
		return secret.Value{}, err
	}
	a.log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", int64(tok.TTL.Seconds()))
	if !old.Empty() && old.Reveal() != tok.Value.Reveal() {
		if rerr := client.RevokeSelf(ctx, old); rerr != nil {
			a.log.Warn("previous token could not be revoked", "error", a.redact.Redact(rerr.Error()))
		}
	}
	return tok.Value, nil
}
