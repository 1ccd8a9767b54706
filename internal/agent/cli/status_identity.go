package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
)

// identityStatus is `status --json`'s "identity": the ziti identity's certificate and renewal.
type identityStatus struct {
	Path        string     `json:"path"`
	NotAfter    *time.Time `json:"not_after"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	// CANotAfter is when the first certificate of the identity's CA bundle (id.ca) expires.
	CANotAfter *time.Time `json:"ca_not_after"`
	RenewedAt  *time.Time `json:"renewed_at"`
	// RenewedBy is who renews it (agent, proxy daemon, ziti-edge-tunnel, off), Why says why.
	RenewedBy string `json:"renewed_by"`
	Why       string `json:"renewed_by_why"`
	// RenewBelowS is identity_renew_below_s.
	RenewBelowS int64 `json:"renew_below_s"`
	// Renewal is a renewal under way or failing (state.json), null when none.
	Renewal *state.IdentityRenewal `json:"renewal"`
	// Pending is the pending file of a half-done renewal, "" when there is none.
	Pending string `json:"pending,omitempty"`
	// Error is why the file could not be read ("" when it could).
	Error string `json:"error,omitempty"`
}

// grantStatus is one tenancy grant on disk and when it stops being accepted.
type grantStatus struct {
	Kind      string     `json:"kind"` // bootstrap or lease
	Path      string     `json:"path"`
	ExpiresAt *time.Time `json:"expires_at"`
	Error     string     `json:"error,omitempty"`
}

// identityStatusOf reads the identity file and what state.json keeps of its renewal.
func identityStatusOf(ctx context.Context, cfg *config.Config, st *state.State, run runner.Runner) *identityStatus {
	who := identity.Who{Transport: cfg.Transport, Window: cfg.IdentityRenewBelow(),
		TunnellerActive: func(ctx context.Context) (bool, error) {
			return systemd.Probe{Runner: run}.UnitActive(ctx, identity.TunnellerUnit)
		}}
	owner := who.Decide(ctx, cfg.Identity)
	s := &identityStatus{Path: cfg.Identity, RenewedBy: owner.By, Why: owner.Why, RenewBelowS: cfg.IdentityRenewBelowS}
	if rec := st.Identity; rec != nil {
		s.RenewedAt, s.Renewal = rec.RenewedAt, rec.Renewal
	}
	if _, err := os.Lstat(cfg.Identity + identity.PendingSuffix); err == nil {
		s.Pending = cfg.Identity + identity.PendingSuffix
	}
	r := identity.Renewer{Path: cfg.Identity}
	f, err := r.Read()
	if err != nil {
		s.Error = err.Error()
		return s
	}
	leaf := f.Leaf()
	na := leaf.NotAfter
	s.NotAfter, s.Fingerprint = &na, leaf.Fingerprint
	if len(f.CA) > 0 {
		ca := f.CA.Earliest().NotAfter
		s.CANotAfter = &ca
	}
	return s
}

// grantsOf lists the bootstrap grant and a kept lease grant, with their exp (never their value).
func grantsOf(cfg *config.Config) []grantStatus {
	out := []grantStatus{}
	for _, g := range []struct{ kind, path string }{
		{"bootstrap", cfg.BootstrapFile}, {"lease", token.In(cfg).Grant},
	} {
		b, err := token.ReadFile(g.path) // a FIFO in its place is refused, never waited on
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		gs := grantStatus{Kind: g.kind, Path: g.path}
		if err != nil {
			gs.Error = err.Error()
		} else if exp, err := horizon.JWTExpiry(b); err != nil {
			gs.Error = err.Error()
		} else {
			gs.ExpiresAt = &exp
		}
		out = append(out, gs)
	}
	return out
}

// identityRows are the text rows of the identity and the grants.
func identityRows(d statusDoc, now time.Time) [][2]string {
	var rows [][2]string
	if id := d.Identity; id != nil {
		v := id.Path + ": "
		switch {
		case id.Error != "":
			v += "unreadable: " + id.Error
		default:
			v += fmt.Sprintf("certificate valid until %s (%s)", id.NotAfter.Format(time.RFC3339), horizon.Days(id.NotAfter.Sub(now)))
			if id.CANotAfter != nil {
				v += fmt.Sprintf(", CA until %s", id.CANotAfter.Format(time.RFC3339))
			}
		}
		rows = append(rows, [2]string{"identity", v})
		r := "by " + id.RenewedBy + " (" + id.Why + ")"
		if id.RenewedAt != nil {
			r += "; last renewed " + id.RenewedAt.UTC().Format(time.RFC3339)
		}
		if b := id.Renewal; b != nil && b.LastError != "" {
			if b.Failures > 0 {
				r += fmt.Sprintf("; %d failure(s), last: %s", b.Failures, b.LastError)
			} else {
				r += "; held back: " + b.LastError
			}
			if b.NextTryAt != nil {
				r += "; next try " + b.NextTryAt.UTC().Format(time.RFC3339)
			}
		}
		if id.Pending != "" {
			r += "; a renewal is half done (" + id.Pending + "): the next tick finishes it"
		}
		rows = append(rows, [2]string{"renewal", r})
	}
	for _, g := range d.Grants {
		v := g.Path + ": "
		if g.Error != "" {
			v += "unreadable: " + g.Error
		} else {
			v += fmt.Sprintf("expires %s (%s)", g.ExpiresAt.Format(time.RFC3339), horizon.Days(g.ExpiresAt.Sub(now)))
		}
		rows = append(rows, [2]string{g.Kind + " grant", v})
	}
	return rows
}
