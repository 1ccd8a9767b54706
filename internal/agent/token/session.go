package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Bao is the part of one OpenBao server the token needs. Errors never carry a token.
type Bao interface {
	Login(ctx context.Context, mount, role string, jwt secret.Value) (bao.Token, error)
	LookupSelf(ctx context.Context, token secret.Value) (bao.TokenInfo, error)
	RenewSelf(ctx context.Context, token secret.Value) (bao.Token, error)
	RevokeSelf(ctx context.Context, token secret.Value) error
}

// Sentinels the tick decides its exit code from (it re-exports them).
var (
	// ErrNeedsKit: no usable token and no bootstrap grant on disk.
	ErrNeedsKit = errors.New("re-run the install kit")
	// ErrTemporary: the mesh, tenancy or OpenBao could not be reached, or answered 5xx.
	ErrTemporary = errors.New("the next tick retries")
)

// OffMesh is a laptop off the mesh (no answer or 5xx in laptop mode): the tick ends quietly, exit 0.
type OffMesh struct{ Err error }

func (e *OffMesh) Error() string { return e.Err.Error() }
func (e *OffMesh) Unwrap() error { return e.Err }

// Tick is what a Session takes from the tick it serves.
type Tick struct {
	Cfg    *config.Config
	Log    *slog.Logger
	Redact *secret.Redactor
	St     *state.State
	// Vault is the tick's OpenBao coordinates, which the check-in may change.
	Vault  *protocol.Vault
	NewBao func(addr string) (Bao, error)
	// Lease asks tenancy for a login grant. Its answer's Addr is the grant's OpenBao, a legacy
	// nested vault.addr already folded in by the tenancy client's decoder (the one place).
	Lease func(ctx context.Context, token secret.Value, envID, reason string) (*protocol.LeaseResponse, error)
	Now   func() time.Time
	// Step is the tick's crash point after a named step (nil: none); Save writes state.json.
	Step func(name string) error
	Save func() error
	// Classify maps a client error onto the tick's sentinels; Temporary: the next tick may not meet it.
	Classify  func(what string, err error) error
	Temporary func(err error) bool
	// Kit is called when a kit's bootstrap grant logged in: an operator's fresh start.
	Kit func()
}

// Session is one tick's token: WithAuth for tenancy calls, ForApply for the secrets.
type Session struct {
	Tick
	value secret.Value
}

// NewSession returns the token's session for one tick.
func NewSession(t Tick) *Session { return &Session{Tick: t} }

func (s *Session) files() Files { return In(s.Cfg) }

func (s *Session) step(name string) error {
	if s.Step == nil {
		return nil
	}
	return s.Step(name)
}

func (s *Session) saveOrWarn() {
	if err := s.Save(); err != nil {
		s.Log.Warn("state not saved", "error", err.Error())
	}
}

// ForCheckin loads the token from disk, or logs in with the bootstrap grant when there is none.
func (s *Session) ForCheckin(ctx context.Context) error {
	tok, err := Read(s.files().Token)
	if err != nil {
		return err
	}
	s.value = tok
	s.Redact.Add(tok.Reveal())
	if !tok.Empty() {
		return nil
	}
	// In laptop mode an unanswering OpenBao is the same off-mesh laptop as an unanswering tenancy.
	return s.bootstrap(ctx, s.Cfg.LaptopMode)
}

// bootstrap exchanges the kit's deploy grant for a first token and deletes the single-purpose
// grant. offMeshQuiet makes a temporary login failure OffMesh: no warning, exit 0.
func (s *Session) bootstrap(ctx context.Context, offMeshQuiet bool) error {
	raw, err := ReadFile(s.Cfg.BootstrapFile)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no OpenBao token and no bootstrap grant at %s: %w", s.Cfg.BootstrapFile, ErrNeedsKit)
	}
	if err != nil {
		return fmt.Errorf("bootstrap grant %s: %w", s.Cfg.BootstrapFile, err)
	}
	grant := secret.New(strings.TrimSpace(string(raw)))
	s.Redact.Add(grant.Reveal())
	if grant.Empty() {
		return fmt.Errorf("bootstrap grant %s is empty: %w", s.Cfg.BootstrapFile, ErrNeedsKit)
	}
	// The config's coordinates before the check-in; tenancy's for this tick after it.
	addr := s.Vault.Addr
	client, err := s.NewBao(addr)
	if err != nil {
		return err
	}
	asked := s.Now().UTC()
	tok, err := client.Login(ctx, s.Vault.AuthMount, s.Vault.AuthRole, grant)
	if err != nil {
		if offMeshQuiet && s.Temporary(err) {
			return &OffMesh{Err: fmt.Errorf("bao: bootstrap login: %w: %w", err, ErrTemporary)}
		}
		if s.Temporary(err) {
			return s.Classify("bao: bootstrap login", err)
		}
		if errors.Is(err, bao.ErrLoginRefused) && !roleMissing(err) {
			// A refused grant cannot be retried into working: only a new kit brings a new one.
			return fmt.Errorf("bootstrap grant %s refused by OpenBao: %w: %w", s.Cfg.BootstrapFile, err, ErrNeedsKit)
		}
		// A wrong CA, mount or role: the config, not the grant, needs fixing.
		return fmt.Errorf("bootstrap login: %w", err)
	}
	if s.Kit != nil {
		s.Kit() // saved with the token below
	}
	// A new token generation supersedes any lease grant kept under the previous one.
	if err := s.storeToken(tok, state.SourceBootstrap, addr, asked); err != nil {
		return err
	}
	if err := os.Remove(s.Cfg.BootstrapFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.Log.Warn("bootstrap grant could not be deleted after login", "path", s.Cfg.BootstrapFile, "error", err.Error())
	}
	s.Log.Info("bootstrap login ok; grant deleted", "path", s.Cfg.BootstrapFile)
	return nil
}

// roleMissing tells an unknown role (config's bao.role or auth_mount wrong) from a refused grant.
func roleMissing(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "role") && strings.Contains(msg, "could not be found")
}

// storeToken makes bootstrap token tok the agent's: token file, then state, both atomic. Any kept
// lease grant belonged to the ended token generation and is forgotten.
func (s *Session) storeToken(tok bao.Token, source, addr string, asked time.Time) error {
	s.Redact.Add(tok.Value.Reveal())
	if err := Write(s.files().Token, tok.Value); err != nil {
		return err
	}
	s.value = tok.Value
	s.St.Token = Meta(tok, source, addr, asked)
	s.St.PendingLease = nil
	if err := s.Save(); err != nil {
		return err
	}
	s.removeLeaseGrantFile()
	return nil
}

// swapToken makes lease token tok the agent's in three writes (Stage, Record, Commit) so a kill
// costs neither a lease nor the token in use; the caller revokes the old one, then finishSwap.
func (s *Session) swapToken(tok bao.Token, g Grant, asked time.Time) error {
	s.Redact.Add(tok.Value.Reveal())
	if err := s.files().Stage(tok.Value); err != nil {
		return err
	}
	if err := s.step("token-staged"); err != nil {
		return err
	}
	Record(s.St, tok, g.Addr, asked, s.Addr())
	if err := s.Save(); err != nil {
		return err
	}
	if err := s.step("token-recorded"); err != nil {
		return err
	}
	if err := s.files().Commit(); err != nil {
		return err
	}
	s.value = tok.Value
	return s.step("token-swapped")
}

// finishSwap clears previous_token after the revoke attempt and deletes the used grant's file.
func (s *Session) finishSwap() error {
	s.St.PreviousToken = nil
	if err := s.Save(); err != nil {
		return err
	}
	s.removeLeaseGrantFile()
	return nil
}

// RecoverSwap finishes, from local files, a swap a killed tick left half done.
func (s *Session) RecoverSwap() error {
	var prevSource string
	if s.St.PreviousToken != nil {
		prevSource = s.St.PreviousToken.Source
	}
	r, err := s.files().Recover(s.St)
	if err != nil {
		return err
	}
	switch r {
	case Finished:
		s.Log.Warn("an interrupted token swap was finished; the previous token was not revoked and expires on its own", "previous_source", prevSource)
	case Undone:
		s.Log.Warn("an interrupted token swap was undone; the kept lease grant logs in again at the next apply")
		return nil
	case Unrevoked:
		s.Log.Warn("an interrupted token swap left the previous token possibly unrevoked; it expires on its own", "previous_source", prevSource)
	default:
		return nil
	}
	return s.Save()
}

// supersedeToken puts aside the token tenancy refused (401) and its kept grant: revoked while it
// can be, then kept 0600 as bao.token.superseded as evidence.
func (s *Session) supersedeToken(ctx context.Context, what string) error {
	old := s.value
	revoked := false
	if !old.Empty() {
		revoked = s.revokeRefused(ctx, old, s.Addr())
	}
	s.value = secret.Value{}
	s.St.Token = nil
	s.St.PendingLease = nil
	moved, err := Supersede(s.files().Token, s.Now())
	if err != nil {
		return err
	}
	if err := s.Save(); err != nil {
		return err
	}
	s.removeLeaseGrantFile()
	s.Log.Warn("AGENT_UNAUTHENTICATED: tenancy refused the token; moved aside", "call", what, "path", moved, "revoked", revoked)
	return nil
}

// revokeRefused revokes tok at addr, reporting success; a refusal or no answer is only logged.
func (s *Session) revokeRefused(ctx context.Context, tok secret.Value, addr string) bool {
	client, err := s.NewBao(addr)
	if err == nil {
		err = client.RevokeSelf(ctx, tok)
	}
	if err != nil {
		s.Log.Info("the refused token could not be revoked at OpenBao (already revoked or expired, or OpenBao unreachable); it is kept aside unrevoked and expires on its own", "addr", addr, "error", s.Redact.Redact(err.Error()))
		return false
	}
	return true
}

// WithAuth runs call with the current token. On 401 AGENT_UNAUTHENTICATED the token is put aside
// and the call retried once after a bootstrap login, else the kit is asked for; 403
// AGENT_ENV_MISMATCH stops the tick; a 401/403 not from tenancy is temporary.
func (s *Session) WithAuth(ctx context.Context, what string, call func(secret.Value) error) error {
	return s.Classify(what, s.AuthCall(ctx, what, call))
}

// AuthCall is WithAuth without the classification of the final error.
func (s *Session) AuthCall(ctx context.Context, what string, call func(secret.Value) error) error {
	err := call(s.value)
	if errors.Is(err, tenancy.ErrUnauthenticated) {
		if serr := s.supersedeToken(ctx, what); serr != nil {
			return serr
		}
		if _, serr := os.Stat(s.Cfg.BootstrapFile); serr != nil {
			s.Log.Error("AGENT_UNAUTHENTICATED: no bootstrap grant on disk: re-run the install kit", "bootstrap_file", s.Cfg.BootstrapFile)
			return fmt.Errorf("%s: bearer refused and no bootstrap grant at %s: %w", what, s.Cfg.BootstrapFile, ErrNeedsKit)
		}
		if berr := s.bootstrap(ctx, false); berr != nil {
			return berr
		}
		err = call(s.value)
		if errors.Is(err, tenancy.ErrUnauthenticated) {
			return fmt.Errorf("%s: bearer refused again after a fresh bootstrap: %w", what, ErrNeedsKit)
		}
	}
	return err
}

// Addr is the OpenBao that minted the current token (Addr).
func (s *Session) Addr() string { return Addr(s.St, s.Vault.Addr) }

// leaseBackoff holds off leases after a lease login was refused for good: tenancy's 5-lease window.
const leaseBackoff = state.MaxLeaseBackoff

// heldOff marks a lease not taken (or refused) under lease_backoff; it adds nothing to the message.
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

// ForApply returns the token for this bundle's secrets: looked up, reused, renewed or swapped for
// a lease. Tenancy allows 5 leases an hour and a retried failing deploy once burnt them all (seed
// 0.1.6): a failed-login grant is kept and a refused one holds off leasing for an hour.
func (s *Session) ForApply(ctx context.Context) (secret.Value, error) {
	// working: OpenBao confirmed the current token is valid this tick.
	working := false
	if !s.value.Empty() {
		client, info, err := s.lookupToken(ctx)
		switch {
		case err != nil && !errors.Is(err, bao.ErrForbidden):
			// OpenBao unreachable, unmapped or invisible: no lease now.
			return secret.Value{}, s.Classify("bao: lookup-self", err)
		case err != nil:
			s.Log.Info("token no longer valid; leasing again", "token_source", s.tokenSource(), "error", s.Redact.Redact(err.Error()))
		case info.TTL <= 0:
			s.Log.Info("token expired; leasing again", "token_source", s.tokenSource())
		default:
			working = true
			if s.tokenSource() == state.SourceLease {
				tok, ok, err := s.keepLeaseToken(ctx, client, info)
				if ok || err != nil {
					return tok, err
				}
			}
		}
	}
	reason := "apply"
	if s.tokenSource() == state.SourceLease {
		reason = "renew" // a lease token near its end is replaced; the bootstrap token is swapped
	}
	looked := s.value
	tok, err := s.lease(ctx, reason)
	if s.value != looked {
		// A 401 on the lease dropped the token looked up above; only a fresh bootstrap token works.
		working = !s.value.Empty() && s.tokenSource() == state.SourceBootstrap
	}
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, tenancy.ErrRateLimited) && working:
		s.Log.Warn("lease rate-limited; applying with the current token, swap deferred", "token_source", s.tokenSource())
		return s.value, nil
	case errors.Is(err, tenancy.ErrRateLimited):
		s.Log.Warn("lease rate-limited and no working token; the next tick retries")
		return secret.Value{}, fmt.Errorf("%w: %w", err, ErrTemporary)
	case errors.Is(err, ErrTemporary) && working:
		s.Log.Warn("new token not obtained; applying with the current token, swap deferred", "token_source", s.tokenSource())
		return s.value, nil
	case isHeldOff(err) && working:
		s.Log.Warn("no new lease while OpenBao refuses lease logins; applying with the current token, swap deferred", "token_source", s.tokenSource(), "until", s.St.LeaseBackoff.Until.Format(time.RFC3339))
		return s.value, nil
	}
	return secret.Value{}, err
}

// lookupToken asks the minting OpenBao, then the tick's: a dead address must not end every apply.
func (s *Session) lookupToken(ctx context.Context) (Bao, bao.TokenInfo, error) {
	addr := s.Addr()
	client, info, err := s.lookupAt(ctx, addr)
	if err == nil || errors.Is(err, bao.ErrForbidden) || addr == s.Vault.Addr {
		return client, info, err
	}
	alt, altInfo, altErr := s.lookupAt(ctx, s.Vault.Addr)
	if altErr != nil && !errors.Is(altErr, bao.ErrForbidden) {
		return client, info, err // neither answers: the token's own OpenBao is the one to fix
	}
	s.Log.Warn("the OpenBao that minted the token does not answer; using the tick's OpenBao", "token_addr", addr, "addr", s.Vault.Addr, "error", s.Redact.Redact(err.Error()))
	if altErr == nil && s.St.Token != nil {
		s.St.Token.Addr = s.Vault.Addr
		if serr := s.Save(); serr != nil {
			return nil, bao.TokenInfo{}, serr
		}
	}
	return alt, altInfo, altErr
}

func (s *Session) lookupAt(ctx context.Context, addr string) (Bao, bao.TokenInfo, error) {
	client, err := s.NewBao(addr)
	if err != nil {
		return nil, bao.TokenInfo{}, err
	}
	info, err := client.LookupSelf(ctx, s.value)
	return client, info, err
}

// renewBelow is the TTL under which a lease token is renewed or replaced: renew_below_s, or half
// the token's TTL when it lives no longer than that (else it is replaced on every apply).
func (s *Session) renewBelow() float64 {
	t := float64(s.Cfg.Bao.RenewBelowS)
	if s.St.Token != nil && s.St.Token.TTLSec > 0 && t >= float64(s.St.Token.TTLSec) {
		t = float64(s.St.Token.TTLSec) / 2
	}
	return t
}

// keepLeaseToken reuses a token with more than renewBelow left, else renews it; !ok: lease anew.
func (s *Session) keepLeaseToken(ctx context.Context, client Bao, info bao.TokenInfo) (tok secret.Value, ok bool, err error) {
	if info.TTL.Seconds() > s.renewBelow() {
		s.Log.Debug("reusing lease token", "ttl_s", int64(info.TTL.Seconds()))
		return s.value, true, nil
	}
	if !info.Renewable {
		return secret.Value{}, false, nil
	}
	asked := s.Now().UTC()
	renewed, err := client.RenewSelf(ctx, s.value)
	switch {
	case err == nil && renewed.TTL.Seconds() > s.renewBelow():
		s.Log.Info("lease token renewed", "ttl_s", int64(renewed.TTL.Seconds()))
		s.St.Token.ObtainedAt = asked
		s.St.Token.TTLSec = int64(renewed.TTL.Seconds())
		return s.value, true, s.Save()
	case err != nil && !errors.Is(err, bao.ErrForbidden):
		return secret.Value{}, false, s.Classify("bao: renew-self", err)
	case err != nil:
		s.Log.Info("lease token renewal refused; leasing again", "error", s.Redact.Redact(err.Error()))
	}
	return secret.Value{}, false, nil
}

func (s *Session) tokenSource() string { return Source(s.St) }

// lease turns a login grant into the agent's token and revokes the previous one: the kept grant
// while it lasts, else a new lease unless OpenBao refused a lease login within the hour.
func (s *Session) lease(ctx context.Context, reason string) (secret.Value, error) {
	if g, ok := s.pendingGrant(); ok {
		s.Log.Info("logging in with the lease grant kept from an earlier tick", "expires_at", g.ExpiresAt.Format(time.RFC3339))
		tok, err := s.loginWithGrant(ctx, g)
		if err == nil {
			s.Log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", s.St.Token.TTLSec, "grant", "kept")
		}
		if err == nil || !isRefusedLogin(err) {
			return tok, err
		}
		// Refused (expired early, superseded): it will never log in. Lease anew, once.
		s.Log.Info("kept lease grant refused by OpenBao; leasing again", "error", s.Redact.Redact(err.Error()))
		s.dropPendingGrant()
	}
	if b := s.St.LeaseBackoff; b.Holds(s.Now()) {
		return secret.Value{}, &heldOff{err: fmt.Errorf("no new lease until %s: OpenBao refused the last lease login: %s", b.Until.Format(time.RFC3339), b.Reason)}
	}
	g, err := s.newGrant(ctx, reason)
	if err != nil {
		return secret.Value{}, err
	}
	// Kept before its first login: a tick killed from here on logs in with it next time.
	kept := s.keepGrant(g)
	if err := s.step("grant-kept"); err != nil {
		return secret.Value{}, err
	}
	tok, err := s.loginWithGrant(ctx, g)
	switch {
	case err == nil:
		s.Log.Info("leased a new OpenBao token", "reason", reason, "ttl_s", s.St.Token.TTLSec)
	case errors.Is(err, ErrTemporary) && kept:
		s.Log.Warn("lease login failed; the grant is kept for the next tick, no new lease until it expires", "expires_at", g.ExpiresAt.Format(time.RFC3339))
	case isRefusedLogin(err):
		s.dropPendingGrant()
		return secret.Value{}, s.backOff(err)
	}
	return tok, err
}

// backOff records that OpenBao refused a lease login for good: no new lease for leaseBackoff.
func (s *Session) backOff(err error) error {
	until := s.Now().UTC().Add(leaseBackoff)
	reason := s.Redact.Redact(err.Error())
	s.St.LeaseBackoff = &state.LeaseBackoff{Until: until, Reason: reason}
	s.saveOrWarn()
	s.Log.Warn("lease login refused by OpenBao; no new lease until the back-off ends", "until", until.Format(time.RFC3339), "error", reason)
	return &heldOff{err: err}
}

// newGrant asks tenancy for a login grant.
func (s *Session) newGrant(ctx context.Context, reason string) (Grant, error) {
	var resp *protocol.LeaseResponse
	err := s.WithAuth(ctx, "tenancy: lease", func(tok secret.Value) error {
		var err error
		resp, err = s.Lease(ctx, tok, s.Cfg.EnvID, reason)
		return err
	})
	if err != nil {
		return Grant{}, err
	}
	s.St.Counters.Leases++ // saved with the kept grant, before its first login
	// The bearer after WithAuth: a 401 may have re-bootstrapped on the way.
	g := Grant{JWT: secret.New(resp.LoginJWT), Addr: resp.Addr, Mount: resp.Mount, Role: resp.Role, Bearer: Accessor(s.St)}
	s.Redact.Add(g.JWT.Reveal())
	if g.Addr == "" {
		g.Addr = s.Vault.Addr
	}
	if g.Mount == "" {
		g.Mount = s.Vault.AuthMount
	}
	if g.Role == "" {
		g.Role = s.Vault.AuthRole
	}
	ttl := time.Duration(resp.TTLSec) * time.Second
	if ttl <= 0 {
		ttl = time.Hour // tenancy's grant lifetime of record
	}
	g.ExpiresAt = s.Now().UTC().Add(ttl)
	return g, nil
}

// loginWithGrant logs in with g, swaps the token in and revokes the previous one; a login failing
// for a reason retrying does not cure is a *refusedLogin.
func (s *Session) loginWithGrant(ctx context.Context, g Grant) (secret.Value, error) {
	client, err := s.NewBao(g.Addr)
	if err != nil {
		return secret.Value{}, &refusedLogin{err: fmt.Errorf("lease login: %w", err)}
	}
	asked := s.Now().UTC()
	tok, err := client.Login(ctx, g.Mount, g.Role, g.JWT)
	if err != nil {
		err = s.Classify("bao: lease login", err)
		if !errors.Is(err, ErrTemporary) {
			err = &refusedLogin{err: fmt.Errorf("lease login: %w", err)}
		}
		return secret.Value{}, err
	}
	old, oldAddr := s.value, s.Addr()
	if err := s.swapToken(tok, g, asked); err != nil {
		return secret.Value{}, err
	}
	if tok.TTL.Seconds() <= float64(s.Cfg.Bao.RenewBelowS) {
		s.Log.Warn("lease token TTL is not above bao.renew_below_s; it is renewed or replaced when half of it is left", "ttl_s", int64(tok.TTL.Seconds()), "renew_below_s", s.Cfg.Bao.RenewBelowS)
	}
	if !old.Empty() && old.Reveal() != tok.Value.Reveal() {
		s.revoke(ctx, client, g.Addr, old, oldAddr)
	}
	if err := s.step("token-revoked"); err != nil {
		return secret.Value{}, err
	}
	return tok.Value, s.finishSwap()
}

// revoke revokes old at oldAddr (reusing client there); a failure only warns: tokens expire.
func (s *Session) revoke(ctx context.Context, client Bao, addr string, old secret.Value, oldAddr string) {
	if oldAddr != addr {
		var err error
		if client, err = s.NewBao(oldAddr); err != nil {
			s.Log.Warn("previous token could not be revoked", "error", err.Error())
			return
		}
	}
	if err := client.RevokeSelf(ctx, old); err != nil {
		s.Log.Warn("previous token could not be revoked", "error", s.Redact.Redact(err.Error()))
	}
}

// pendingGrant is the grant an earlier tick leased and could not log in with, while it lasts.
func (s *Session) pendingGrant() (Grant, bool) {
	if s.St.PendingLease == nil {
		return Grant{}, false
	}
	g, ok := s.files().Kept(s.St, s.Now())
	if !ok {
		s.dropPendingGrant()
		return Grant{}, false
	}
	s.Redact.Add(g.JWT.Reveal())
	return g, true
}

// keepGrant stores g for a later login (0600, like the token beside it); false if it could not.
func (s *Session) keepGrant(g Grant) bool {
	err := s.files().Keep(s.St, g)
	if err == nil {
		err = s.Save()
	}
	if err != nil {
		s.Log.Warn("lease grant could not be kept for the next tick", "error", err.Error())
		return false
	}
	return true
}

func (s *Session) dropPendingGrant() {
	if s.St.PendingLease == nil {
		return
	}
	s.St.PendingLease = nil
	s.saveOrWarn()
	s.removeLeaseGrantFile()
}

func (s *Session) removeLeaseGrantFile() {
	if err := Remove(s.files().Grant); err != nil {
		s.Log.Warn("kept lease grant could not be deleted", "path", s.files().Grant, "error", err.Error())
	}
}

// Tidy (local files only) drops an unusable kept grant, an unrecorded lease.jwt, a lapsed back-off.
func (s *Session) Tidy() {
	changed := false
	if p := s.St.PendingLease; p != nil {
		if _, err := os.Lstat(s.files().Grant); err != nil || !Usable(s.St, s.Now()) {
			s.Log.Info("kept lease grant dropped: expired, missing, or leased under a token since replaced", "expires_at", p.ExpiresAt.Format(time.RFC3339))
			s.St.PendingLease = nil
			changed = true
		}
	}
	if s.St.PendingLease == nil {
		if _, err := os.Lstat(s.files().Grant); err == nil {
			s.removeLeaseGrantFile()
		}
	}
	if b := s.St.LeaseBackoff; b != nil && !b.Holds(s.Now()) {
		if b.TooFar(s.Now()) {
			s.Log.Warn("lease back-off ends further ahead than any back-off the agent starts (a clock that ran ahead, or an edited state.json); treated as lapsed",
				"until", b.Until.UTC().Format(time.RFC3339), "longest", leaseBackoff.String())
		}
		s.St.LeaseBackoff = nil
		changed = true
	}
	if changed {
		s.saveOrWarn()
	}
}
