// Package token keeps the agent's OpenBao token between ticks: its files under state_dir, its
// record in state.json, and which OpenBao holds it. The tick and doctor both ask it.
package token

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Files are the token's files in one state_dir.
type Files struct {
	Token      string // bao.token, the token in use
	Staged     string // bao.token.new, the new token while a swap is under way
	Grant      string // lease.jwt, a leased grant kept for a later login
	Superseded string // bao.token.superseded, the token tenancy refused
}

// In returns the token's files for cfg's state_dir.
func In(cfg *config.Config) Files {
	return Files{
		Token:      cfg.TokenPath(),
		Staged:     cfg.TokenPath() + ".new",
		Grant:      filepath.Join(cfg.StateDir, "lease.jwt"),
		Superseded: cfg.TokenPath() + SupersededSuffix,
	}
}

// Addr is the OpenBao holding the token st records (only it can use the token); older states
// fall back to fallback, the tick's OpenBao.
func Addr(st *state.State, fallback string) string {
	if st.Token != nil && st.Token.Addr != "" {
		return st.Token.Addr
	}
	return fallback
}

// Source is where the recorded token came from (bootstrap or lease), "" when none is recorded.
func Source(st *state.State) string {
	if st.Token == nil {
		return ""
	}
	return st.Token.Source
}

// Accessor is the recorded token's accessor, "" when none is recorded.
func Accessor(st *state.State) string {
	if st.Token == nil {
		return ""
	}
	return st.Token.Accessor
}

// Meta records tok; its TTL counts from asked (before minting), so the reported TTL never overstates.
func Meta(tok bao.Token, source, addr string, asked time.Time) *state.TokenMeta {
	return &state.TokenMeta{Source: source, Accessor: tok.Accessor, ObtainedAt: asked, TTLSec: int64(tok.TTL.Seconds()), Addr: addr}
}

// Stage, swap phase 1: the new token goes to bao.token.new (a kill here costs a login, not a lease).
func (f Files) Stage(v secret.Value) error { return Write(f.Staged, v) }

// Record is the second phase: st names token tok from addr, keeps the previous record (a swap
// under way) and forgets the kept grant and lease back-off.
func Record(st *state.State, tok bao.Token, addr string, asked time.Time, fallback string) {
	prev := &state.TokenMeta{}
	if st.Token != nil {
		p := *st.Token
		prev = &p
	}
	if prev.Addr == "" {
		prev.Addr = fallback
	}
	st.PreviousToken = prev
	st.Token = Meta(tok, state.SourceLease, addr, asked)
	st.PendingLease = nil
	st.LeaseBackoff = nil
}

// Commit, phase 3: bao.token.new replaces bao.token; the caller revokes and clears previous_token.
func (f Files) Commit() error {
	if err := os.Rename(f.Staged, f.Token); err != nil {
		return fmt.Errorf("state: replace token: %w", err)
	}
	return nil
}

// Recovery is what Recover found of a swap a killed tick left half done.
type Recovery int

const (
	// NoSwap: nothing was half done.
	NoSwap Recovery = iota
	// Finished: state named the staged token, now in place; the previous one was not revoked.
	Finished
	// Undone: the staged token never reached state and was deleted; the kept grant logs in again.
	Undone
	// Unrevoked: the swap was done but the previous token possibly not revoked.
	Unrevoked
)

// Recover finishes or undoes an interrupted swap from local files; it may clear st.PreviousToken.
func (f Files) Recover(st *state.State) (Recovery, error) {
	_, err := os.Lstat(f.Staged)
	staged := err == nil
	switch {
	case staged && st.PreviousToken != nil:
		if err := os.Rename(f.Staged, f.Token); err != nil {
			return NoSwap, fmt.Errorf("state: finish an interrupted token swap: %w", err)
		}
		st.PreviousToken = nil
		return Finished, nil
	case staged:
		return Undone, Remove(f.Staged)
	case st.PreviousToken != nil:
		st.PreviousToken = nil
		return Unrevoked, nil
	}
	return NoSwap, nil
}

// Grant is a login grant from tenancy and where it logs in.
type Grant struct {
	JWT               secret.Value
	Addr, Mount, Role string
	ExpiresAt         time.Time
	Bearer            string // the accessor of the token that leased it
}

// Usable: the kept grant is unexpired and was leased under the current token generation.
func Usable(st *state.State, now time.Time) bool {
	p := st.PendingLease
	return p != nil && now.Before(p.ExpiresAt) && p.BearerAccessor == Accessor(st) && st.Token != nil
}

// Kept is the grant st and lease.jwt keep; ok false when none or no longer usable (drop it).
func (f Files) Kept(st *state.State, now time.Time) (g Grant, ok bool) {
	p := st.PendingLease
	if p == nil {
		return Grant{}, false
	}
	jwt, err := Read(f.Grant)
	if err != nil || jwt.Empty() || !Usable(st, now) {
		return Grant{}, false
	}
	return Grant{JWT: jwt, Addr: p.Addr, Mount: p.Mount, Role: p.Role, ExpiresAt: p.ExpiresAt, Bearer: p.BearerAccessor}, true
}

// Keep writes g to lease.jwt (0600) and records it in st, so a killed tick logs in with it.
func (f Files) Keep(st *state.State, g Grant) error {
	if err := Write(f.Grant, g.JWT); err != nil {
		return err
	}
	st.PendingLease = &state.PendingLease{Addr: g.Addr, Mount: g.Mount, Role: g.Role, ExpiresAt: g.ExpiresAt, BearerAccessor: g.Bearer}
	return nil
}
