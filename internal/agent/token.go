package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/transport"
)

// files are the token's files in state_dir.
func (a *Agent) files() token.Files { return token.In(a.cfg) }

// ensureToken loads the token from disk, or logs in with the bootstrap grant when there is none.
func (a *Agent) ensureToken(ctx context.Context) error {
	tok, err := token.Read(a.files().Token)
	if err != nil {
		return err
	}
	a.token = tok
	a.redact.Add(tok.Reveal())
	if !tok.Empty() {
		return nil
	}
	// Before this tick's check-in: in laptop mode an OpenBao that does not answer is the same
	// laptop off the mesh as a tenancy that does not.
	return a.bootstrap(ctx, a.cfg.LaptopMode)
}

// bootstrap exchanges the kit's deploy grant for a first OpenBao token, and deletes the grant
// once the login succeeded: it is single-purpose and must not linger on disk. offMeshQuiet makes
// a temporary login failure a laptop off the mesh (offMesh): no warning, exit 0.
func (a *Agent) bootstrap(ctx context.Context, offMeshQuiet bool) error {
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
	asked := a.deps.Now().UTC()
	tok, err := client.Login(ctx, a.vault.AuthMount, a.vault.AuthRole, grant)
	if err != nil {
		if offMeshQuiet && isTemporary(err) {
			return &offMesh{err: fmt.Errorf("bao: bootstrap login: %w: %w", err, ErrTemporary)}
		}
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
	// A kit re-run is an operator's fresh start: a failing sha gets its next try now (saved
	// with the token below).
	if bo := a.st.Backoff; bo != nil && !bo.RevertPending && !a.failedThisTick {
		a.log.Info(fmt.Sprintf("kit re-run: backoff of %s reset; the next apply tries it at once", short(bo.Sha)))
		a.st.Backoff = nil
	}
	// A new token generation: a lease grant kept under the previous one was superseded with it
	// (storeToken forgets it).
	if err := a.storeToken(tok, state.SourceBootstrap, addr, asked); err != nil {
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

// storeToken makes the bootstrap token tok, minted by the OpenBao at addr, the agent's token:
// token file first, then state, both atomic. There is no token to replace (a kill between the
// two writes leaves a token without a record, which the next apply swaps for a lease). Any kept
// lease grant belonged to the token generation that ended and is forgotten.
func (a *Agent) storeToken(tok bao.Token, source, addr string, asked time.Time) error {
	a.redact.Add(tok.Value.Reveal())
	if err := token.Write(a.files().Token, tok.Value); err != nil {
		return err
	}
	a.token = tok.Value
	a.st.Token = token.Meta(tok, source, addr, asked)
	a.st.PendingLease = nil
	if err := a.saveState(); err != nil {
		return err
	}
	a.removeLeaseGrantFile()
	return nil
}

// swapToken makes the lease token tok the agent's in three writes (token.Files.Stage, Record,
// Commit), so a kill between any two costs neither a second lease nor the token in use
// (recoverTokenSwap). The caller revokes the previous token, then calls finishSwap.
func (a *Agent) swapToken(tok bao.Token, g token.Grant, asked time.Time) error {
	a.redact.Add(tok.Value.Reveal())
	if err := a.files().Stage(tok.Value); err != nil {
		return err
	}
	if err := a.step("token-staged"); err != nil {
		return err
	}
	token.Record(a.st, tok, g.Addr, asked, a.tokenAddr())
	if err := a.saveState(); err != nil {
		return err
	}
	if err := a.step("token-recorded"); err != nil {
		return err
	}
	if err := a.files().Commit(); err != nil {
		return err
	}
	a.token = tok.Value
	return a.step("token-swapped")
}

// finishSwap ends a swap once the previous token was revoked (or could not be): previous_token
// is cleared, and the used grant's file deleted (left behind, it would be harmless: no state
// names it, and the next tick deletes it).
func (a *Agent) finishSwap() error {
	a.st.PreviousToken = nil
	if err := a.saveState(); err != nil {
		return err
	}
	a.removeLeaseGrantFile()
	return nil
}

// recoverTokenSwap, at the start of a tick, finishes a swap a killed tick left half done. It
// looks at local files only.
func (a *Agent) recoverTokenSwap() error {
	var prevSource string
	if a.st.PreviousToken != nil {
		prevSource = a.st.PreviousToken.Source
	}
	r, err := a.files().Recover(a.st)
	if err != nil {
		return err
	}
	switch r {
	case token.Finished:
		a.log.Warn("an interrupted token swap was finished; the previous token was not revoked and expires on its own", "previous_source", prevSource)
	case token.Undone:
		a.log.Warn("an interrupted token swap was undone; the kept lease grant logs in again at the next apply")
		return nil
	case token.Unrevoked:
		a.log.Warn("an interrupted token swap left the previous token possibly unrevoked; it expires on its own", "previous_source", prevSource)
	default:
		return nil
	}
	return a.saveState()
}

// supersedeToken puts aside the token tenancy refused (401 AGENT_UNAUTHENTICATED), and the
// grant kept under it, which the same kit re-reveal superseded. It is revoked while that can be
// done, then kept 0600 as bao.token.superseded: the evidence should the refusal be the fault.
func (a *Agent) supersedeToken(ctx context.Context, what string) error {
	old := a.token
	revoked := false
	if !old.Empty() {
		revoked = a.revokeRefused(ctx, old, a.tokenAddr())
	}
	a.token = secret.Value{}
	a.st.Token = nil
	a.st.PendingLease = nil
	moved, err := token.Supersede(a.files().Token, a.deps.Now())
	if err != nil {
		return err
	}
	if err := a.saveState(); err != nil {
		return err
	}
	a.removeLeaseGrantFile()
	a.log.Warn("AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside", "call", what, "path", moved, "revoked", revoked)
	return nil
}

// revokeRefused revokes tok at addr and says whether that worked. OpenBao refusing (the token
// already revoked or expired) or not answering is logged and is no error: the token is put aside
// either way.
func (a *Agent) revokeRefused(ctx context.Context, tok secret.Value, addr string) bool {
	client, err := a.deps.NewBao(addr)
	if err == nil {
		err = client.RevokeSelf(ctx, tok)
	}
	if err != nil {
		a.log.Info("the refused token could not be revoked at OpenBao (already revoked or expired, or OpenBao unreachable); it is kept aside unrevoked and expires on its own", "addr", addr, "error", a.redact.Redact(err.Error()))
		return false
	}
	return true
}

// withAuth runs call with the current token. On 401 AGENT_UNAUTHENTICATED (the grant behind the
// token was superseded by a kit re-reveal or a retire) the token is put aside; with a fresh
// bootstrap grant on disk the agent logs in again and retries once, otherwise it stops and asks
// for the install kit. 403 AGENT_ENV_MISMATCH stops the tick at once with no further call. A
// 401 or 403 from something that is not tenancy is temporary and keeps the token.
func (a *Agent) withAuth(ctx context.Context, what string, call func(secret.Value) error) error {
	return a.classify(what, a.authCall(ctx, what, call))
}

// authCall is withAuth without the classification of the final error.
func (a *Agent) authCall(ctx context.Context, what string, call func(secret.Value) error) error {
	err := call(a.token)
	if errors.Is(err, tenancy.ErrUnauthenticated) {
		if serr := a.supersedeToken(ctx, what); serr != nil {
			return serr
		}
		if _, serr := os.Stat(a.cfg.BootstrapFile); serr != nil {
			a.log.Error("AGENT_UNAUTHENTICATED: no bootstrap grant on disk: re-run the install kit", "bootstrap_file", a.cfg.BootstrapFile)
			return fmt.Errorf("%s: bearer refused and no bootstrap grant at %s: %w", what, a.cfg.BootstrapFile, ErrNeedsKit)
		}
		if berr := a.bootstrap(ctx, false); berr != nil {
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
	case errors.Is(err, tenancy.ErrNotTenancy):
		// An ingress or auth proxy answering for tenancy for a while: the token is not the
		// question, and the next tick tries again.
		var ae *tenancy.APIError
		errors.As(err, &ae)
		a.log.Warn("tenancy call refused by something that is not tenancy (no AGENT_* code); the token is kept and the next tick retries",
			"call", what, "status", ae.Status, "body", ae.FirstLine)
		return fmt.Errorf("%w: %w", err, ErrTemporary)
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

// tokenAddr is the OpenBao that minted the current token (token.Addr).
func (a *Agent) tokenAddr() string { return token.Addr(a.st, a.vault.Addr) }

// leaseBackoff is how long no new lease is taken after OpenBao refused a lease login for good:
// tenancy's window of 5 leases.
const leaseBackoff = time.Hour

// heldOff marks a lease not taken, or a lease login just refused, while new leases are held off
// (state's lease_backoff). It adds nothing to the message.
type heldOff struct{ err error }

func (e *heldOff) Error() string { return e.err.Error() }
func (e *heldOff) Unwrap() error { return e.err }

// refusedLogin marks a lease login that failed for a reason retrying does not cure.
type refusedLogin struct{ err error }

func (e *refusedLogin) Error() string { return e.err.Error() }
func (e *refusedLogin) Unwrap() error { return e.err }

func isHeldOff(err error) bool {
	var h *heldOff
	return errors.As(err, &h)
}

func isRefusedLogin(err error) bool {
	var r *refusedLogin
	return errors.As(err, &r)
}

// tokenForApply returns the token to read this bundle's secrets with: the current one looked up
// (an OpenBao that does not answer ends the tick before a lease is spent), reused, renewed or
// swapped for a lease. Tenancy allows 5 leases an hour and a retried failing deploy once burnt
// them all (seed 0.1.6): a grant whose login failed is kept, a refused one holds off new leases
// for an hour, and a working token carries the apply meanwhile.
func (a *Agent) tokenForApply(ctx context.Context) (secret.Value, error) {
	// working: OpenBao confirmed the current token is valid this tick.
	working := false
	if !a.token.Empty() {
		client, info, err := a.lookupToken(ctx)
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
			if a.tokenSource() == state.SourceLease {
				tok, ok, err := a.keepLeaseToken(ctx, client, info)
				if ok || err != nil {
					return tok, err
				}
			}
		}
	}
	reason := "apply"
	if a.tokenSource() == state.SourceLease {
		reason = "renew" // a lease token near its end is replaced; the bootstrap token is swapped
	}
	looked := a.token
	tok, err := a.lease(ctx, reason)
	if a.token != looked {
		// A 401 on the lease dropped the token looked up above, and a re-bootstrap may have
		// replaced it: only a fresh bootstrap token works.
		working = !a.token.Empty() && a.tokenSource() == state.SourceBootstrap
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
	case isHeldOff(err) && working:
		a.log.Warn("no new lease while OpenBao refuses lease logins; applying with the current token, swap deferred", "token_source", a.tokenSource(), "until", a.st.LeaseBackoff.Until.Format(time.RFC3339))
		return a.token, nil
	}
	return secret.Value{}, err
}

// lookupToken asks the OpenBao that minted the token; when it does not answer and the tick's
// OpenBao is another, that one too (a token valid there is recorded there). Otherwise every
// apply would end at a dead address until the TTL ran out and only a kit could help.
func (a *Agent) lookupToken(ctx context.Context) (Bao, bao.TokenInfo, error) {
	addr := a.tokenAddr()
	client, info, err := a.lookupAt(ctx, addr)
	if err == nil || errors.Is(err, bao.ErrForbidden) || addr == a.vault.Addr {
		return client, info, err
	}
	alt, altInfo, altErr := a.lookupAt(ctx, a.vault.Addr)
	if altErr != nil && !errors.Is(altErr, bao.ErrForbidden) {
		return client, info, err // neither answers: the token's own OpenBao is the one to fix
	}
	a.log.Warn("the OpenBao that minted the token does not answer; using the tick's OpenBao", "token_addr", addr, "addr", a.vault.Addr, "error", a.redact.Redact(err.Error()))
	if altErr == nil && a.st.Token != nil {
		a.st.Token.Addr = a.vault.Addr
		if serr := a.saveState(); serr != nil {
			return nil, bao.TokenInfo{}, serr
		}
	}
	return alt, altInfo, altErr
}

func (a *Agent) lookupAt(ctx context.Context, addr string) (Bao, bao.TokenInfo, error) {
	client, err := a.deps.NewBao(addr)
	if err != nil {
		return nil, bao.TokenInfo{}, err
	}
	info, err := client.LookupSelf(ctx, a.token)
	return client, info, err
}

// renewBelow is the TTL under which a lease token is renewed or replaced: renew_below_s, unless
// the token as obtained lives no longer than that — then half its TTL (a 1 h token under the
// default 3600 s would otherwise be replaced on every apply, even right after a renewal).
func (a *Agent) renewBelow() float64 {
	t := float64(a.cfg.Bao.RenewBelowS)
	if a.st.Token != nil && a.st.Token.TTLSec > 0 && t >= float64(a.st.Token.TTLSec) {
		t = float64(a.st.Token.TTLSec) / 2
	}
	return t
}

// keepLeaseToken decides about a valid lease-derived token: reused as it is while it has more
// than renewBelow left, else renewed if OpenBao allows. ok false means a new lease is due.
func (a *Agent) keepLeaseToken(ctx context.Context, client Bao, info bao.TokenInfo) (tok secret.Value, ok bool, err error) {
	if info.TTL.Seconds() > a.renewBelow() {
		a.log.Debug("reusing lease token", "ttl_s", int64(info.TTL.Seconds()))
		return a.token, true, nil
	}
	if !info.Renewable {
		return secret.Value{}, false, nil
	}
	asked := a.deps.Now().UTC()
	renewed, err := client.RenewSelf(ctx, a.token)
	switch {
	case err == nil && renewed.TTL.Seconds() > a.renewBelow():
		a.log.Info("lease token renewed", "ttl_s", int64(renewed.TTL.Seconds()))
		a.st.Token.ObtainedAt = asked
		a.st.Token.TTLSec = int64(renewed.TTL.Seconds())
		return a.token, true, a.saveState()
	case err != nil && !errors.Is(err, bao.ErrForbidden):
		return secret.Value{}, false, a.classify("bao: renew-self", err)
	case err != nil:
		a.log.Info("lease token renewal refused; leasing again", "error", a.redact.Redact(err.Error()))
	}
	return secret.Value{}, false, nil
}

func (a *Agent) tokenSource() string { return token.Source(a.st) }

// lease turns a login grant from tenancy into the agent's token and revokes the previous one.
// The grant is the one kept from an earlier tick whose login failed, while it lasts; else a new
// one is leased — unless OpenBao refused a lease login within the last hour.
func (a *Agent) lease(ctx context.Context, reason string) (secret.Value, error) {
	if g, ok := a.pendingGrant(); ok {
		a.log.Info("logging in with the lease grant kept from an earlier tick", "expires_at", g.ExpiresAt.Format(time.RFC3339))
		tok, err := a.loginWithGrant(ctx, g)
		if err == nil {
			a.log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", a.st.Token.TTLSec, "grant", "kept")
		}
		if err == nil || !isRefusedLogin(err) {
			return tok, err
		}
		// Refused (expired early, superseded): it will never log in. Lease anew, once.
		a.log.Info("kept lease grant refused by OpenBao; leasing again", "error", a.redact.Redact(err.Error()))
		a.dropPendingGrant()
	}
	if b := a.st.LeaseBackoff; b != nil && a.deps.Now().Before(b.Until) {
		return secret.Value{}, &heldOff{err: fmt.Errorf("no new lease until %s: OpenBao refused the last lease login: %s", b.Until.Format(time.RFC3339), b.Reason)}
	}
	g, err := a.newGrant(ctx, reason)
	if err != nil {
		return secret.Value{}, err
	}
	// Kept before its first login: a tick killed from here on logs in with it next time.
	kept := a.keepGrant(g)
	if err := a.step("grant-kept"); err != nil {
		return secret.Value{}, err
	}
	tok, err := a.loginWithGrant(ctx, g)
	switch {
	case err == nil:
		a.log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", a.st.Token.TTLSec)
	case errors.Is(err, ErrTemporary) && kept:
		a.log.Warn("lease login failed; the grant is kept for the next tick, no new lease until it expires", "expires_at", g.ExpiresAt.Format(time.RFC3339))
	case isRefusedLogin(err):
		a.dropPendingGrant()
		return secret.Value{}, a.backOff(err)
	}
	return tok, err
}

// backOff records that OpenBao refused a lease login for good: no new lease for leaseBackoff.
func (a *Agent) backOff(err error) error {
	until := a.deps.Now().UTC().Add(leaseBackoff)
	reason := a.redact.Redact(err.Error())
	a.st.LeaseBackoff = &state.LeaseBackoff{Until: until, Reason: reason}
	a.saveOrWarn()
	a.log.Warn("lease login refused by OpenBao; no new lease until the back-off ends", "until", until.Format(time.RFC3339), "error", reason)
	return &heldOff{err: err}
}

// newGrant asks tenancy for a login grant.
func (a *Agent) newGrant(ctx context.Context, reason string) (token.Grant, error) {
	var resp *protocol.LeaseResponse
	err := a.withAuth(ctx, "tenancy: lease", func(tok secret.Value) error {
		var err error
		resp, err = a.deps.Tenancy.Lease(ctx, tok, a.cfg.EnvID, reason)
		return err
	})
	if err != nil {
		return token.Grant{}, err
	}
	a.st.Counters.Leases++ // saved with the kept grant, before its first login
	// The bearer after withAuth: a 401 may have re-bootstrapped on the way.
	g := token.Grant{JWT: secret.New(resp.LoginJWT), Addr: resp.Addr, Mount: resp.Mount, Role: resp.Role, Bearer: token.Accessor(a.st)}
	a.redact.Add(g.JWT.Reveal())
	if g.Addr == "" && resp.Vault != nil {
		g.Addr = resp.Vault.Addr // the shape before tenancy's AgentLeaseOut
	}
	if g.Addr == "" {
		g.Addr = a.vault.Addr
	}
	if g.Mount == "" {
		g.Mount = a.vault.AuthMount
	}
	if g.Role == "" {
		g.Role = a.vault.AuthRole
	}
	ttl := time.Duration(resp.TTLSec) * time.Second
	if ttl <= 0 {
		ttl = time.Hour // tenancy's grant lifetime of record
	}
	g.ExpiresAt = a.deps.Now().UTC().Add(ttl)
	return g, nil
}

// loginWithGrant logs in with g, makes the new token the agent's (swapToken, which also forgets
// the kept grant) and revokes the previous token at the OpenBao that minted it. A login that
// fails for a reason retrying does not cure is a *refusedLogin.
func (a *Agent) loginWithGrant(ctx context.Context, g token.Grant) (secret.Value, error) {
	client, err := a.deps.NewBao(g.Addr)
	if err != nil {
		return secret.Value{}, &refusedLogin{err: fmt.Errorf("lease login: %w", err)}
	}
	asked := a.deps.Now().UTC()
	tok, err := client.Login(ctx, g.Mount, g.Role, g.JWT)
	if err != nil {
		err = a.classify("bao: lease login", err)
		if !errors.Is(err, ErrTemporary) {
			err = &refusedLogin{err: fmt.Errorf("lease login: %w", err)}
		}
		return secret.Value{}, err
	}
	old, oldAddr := a.token, a.tokenAddr()
	if err := a.swapToken(tok, g, asked); err != nil {
		return secret.Value{}, err
	}
	if tok.TTL.Seconds() <= float64(a.cfg.Bao.RenewBelowS) {
		a.log.Warn("lease token TTL is not above bao.renew_below_s; it is renewed or replaced when half of it is left", "ttl_s", int64(tok.TTL.Seconds()), "renew_below_s", a.cfg.Bao.RenewBelowS)
	}
	if !old.Empty() && old.Reveal() != tok.Value.Reveal() {
		a.revoke(ctx, client, g.Addr, old, oldAddr)
	}
	if err := a.step("token-revoked"); err != nil {
		return secret.Value{}, err
	}
	return tok.Value, a.finishSwap()
}

// revoke revokes old, minted at oldAddr, reusing client when that is where it points. A failure
// is a warning: the token expires on its own.
func (a *Agent) revoke(ctx context.Context, client Bao, addr string, old secret.Value, oldAddr string) {
	if oldAddr != addr {
		var err error
		if client, err = a.deps.NewBao(oldAddr); err != nil {
			a.log.Warn("previous token could not be revoked", "error", err.Error())
			return
		}
	}
	if err := client.RevokeSelf(ctx, old); err != nil {
		a.log.Warn("previous token could not be revoked", "error", a.redact.Redact(err.Error()))
	}
}

// pendingGrant is the grant an earlier tick leased and could not log in with, while it lasts.
func (a *Agent) pendingGrant() (token.Grant, bool) {
	if a.st.PendingLease == nil {
		return token.Grant{}, false
	}
	g, ok := a.files().Kept(a.st, a.deps.Now())
	if !ok {
		a.dropPendingGrant()
		return token.Grant{}, false
	}
	a.redact.Add(g.JWT.Reveal())
	return g, true
}

// keepGrant stores g for a later login (0600, like the token beside it); false if it could not.
func (a *Agent) keepGrant(g token.Grant) bool {
	err := a.files().Keep(a.st, g)
	if err == nil {
		err = a.saveState()
	}
	if err != nil {
		a.log.Warn("lease grant could not be kept for the next tick", "error", err.Error())
		return false
	}
	return true
}

func (a *Agent) dropPendingGrant() {
	if a.st.PendingLease == nil {
		return
	}
	a.st.PendingLease = nil
	a.saveOrWarn()
	a.removeLeaseGrantFile()
}

func (a *Agent) removeLeaseGrantFile() {
	if err := token.Remove(a.files().Grant); err != nil {
		a.log.Warn("kept lease grant could not be deleted", "path", a.files().Grant, "error", err.Error())
	}
}

// tidyLeaseState, at the start of a tick, forgets a kept grant that can no longer log in
// (expired, its file gone, or leased under a token since dropped), deletes a lease.jwt no state
// names (a tick killed between writing it and recording it), and ends a lapsed lease back-off.
// Local files only: a converged tick stays cheap.
func (a *Agent) tidyLeaseState() {
	changed := false
	if p := a.st.PendingLease; p != nil {
		if _, err := os.Lstat(a.files().Grant); err != nil || !token.Usable(a.st, a.deps.Now()) {
			a.log.Info("kept lease grant dropped: expired, missing, or leased under a token since replaced", "expires_at", p.ExpiresAt.Format(time.RFC3339))
			a.st.PendingLease = nil
			changed = true
		}
	}
	if a.st.PendingLease == nil {
		if _, err := os.Lstat(a.files().Grant); err == nil {
			a.removeLeaseGrantFile()
		}
	}
	if b := a.st.LeaseBackoff; b != nil && !a.deps.Now().Before(b.Until) {
		a.st.LeaseBackoff = nil
		changed = true
	}
	if changed {
		a.saveOrWarn()
	}
}
