package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
)

// CAWarnWithin is how close a CA's expiry makes doctor warn (the identity's id.ca, bao.ca_file).
const CAWarnWithin = 30 * 24 * time.Hour

// readIdentity parses the identity file as the agent reads it (through the env's ReadFile).
func (c *checker) readIdentity() (*identity.File, error) {
	raw, err := c.env.ReadFile(c.cfg().Identity)
	if err != nil {
		return nil, err
	}
	return identity.Parse(raw, c.env.ReadFile)
}

// owner is who renews the identity: the tick of this config (not the proxy daemon).
func (c *checker) owner(ctx context.Context) identity.Owner {
	cfg := c.cfg()
	return identity.Who{Transport: cfg.Transport, Window: cfg.IdentityRenewBelow(), InProxy: cfg.Transport == "proxy",
		TunnellerActive: c.env.TunnellerActive}.Decide(ctx, cfg.Identity)
}

// identityCert: the identity's certificate and who renews it. WARN within the renewal window (a
// renewal that should have happened) or when the agent could not renew; FAIL once it expired.
func (c *checker) identityCert(ctx context.Context) Result {
	cfg := c.cfg()
	f, err := c.readIdentity()
	if err != nil {
		if cfg.Transport == "system" {
			return skip("transport system: ziti-edge-tunnel holds the identity and renews it; doctor cannot read it (%v)", unwrapPathErr(err))
		}
		return skip("the identity cannot be read (see identity)")
	}
	now := c.now()
	leaf := f.Leaf()
	left := leaf.NotAfter.Sub(now)
	o := c.owner(ctx)
	window := cfg.IdentityRenewBelow()
	until := fmt.Sprintf("the certificate of %s is valid until %s (%s)", cfg.Identity, leaf.NotAfter.Format(time.RFC3339), horizon.Days(left))
	reenrol := fmt.Sprintf("re-enrol this box: `fleetctl onboard %s --reissue` on the operator side, then install.sh --enrol-jwt monky-host.%s.jwt", cfg.EnvID, cfg.EnvID)
	if left <= 0 {
		return fail(until+": the controller refuses it, the box is off the mesh", reenrol)
	}
	by := "renewed by " + o.By + " (" + o.Why + ")"
	if o.By == identity.Off {
		by = o.Why
	}
	st := c.agentState()
	lastErr := ""
	if rec := st.Identity; rec != nil && rec.Renewal != nil && rec.Renewal.LastError != "" {
		lastErr = fmt.Sprintf("; the last renewal failed (%d in a row): %s", rec.Renewal.Failures, rec.Renewal.LastError)
		if rec.Renewal.Failures == 0 { // a renewal that worked, held back (identity.Renewer's dueAgain)
			lastErr = "; the next renewal is held back: " + rec.Renewal.LastError
		}
	}
	pending := cfg.Identity + identity.PendingSuffix
	if _, err := c.env.Stat(pending); err == nil {
		return warn(until+"; a renewal is half done: "+pending+" holds the new certificate", "nothing: the next tick finishes it (it asks the controller which certificate is live)")
	}
	var blocked *identity.Blocked
	if o.Renews() && c.env.Agent != nil {
		if err := c.replaceable(ctx, cfg.Identity); err != nil {
			errors.As(err, &blocked)
		}
	}
	warnWithin := window
	if warnWithin <= 0 {
		warnWithin = CAWarnWithin
	}
	near := horizon.Judge(leaf.NotAfter, now, warnWithin) == horizon.Near
	switch {
	case near && blocked != nil:
		return fail(until+"; the agent must renew it now and cannot: "+blocked.Reason+lastErr, blocked.Fix)
	case blocked != nil:
		return warn(until+"; when it comes due the agent cannot renew it: "+blocked.Reason, blocked.Fix)
	case near && o.By == identity.Off:
		return warn(until+"; "+by, fmt.Sprintf("set identity_renew_below_s in %s (default 30 days), or %s before it expires", cfg.Path, reenrol))
	case near && o.By == identity.ByTunneller:
		return warn(until+"; "+by+", and should have by now", "journalctl -u "+identity.TunnellerUnit+" (its renewal), or "+reenrol)
	case near:
		return warn(until+", within identity_renew_below_s; "+by+", and should have by now"+lastErr,
			"journalctl -u monky-deployd -u monky-deployd-proxy | grep 'identity:' names the failing step and its fix")
	}
	return ok("%s; %s%s", until, by, lastErr)
}

// replaceable is identity.Perms.CanReplace judged as the agent's account.
func (c *checker) replaceable(ctx context.Context, path string) error {
	a := *c.env.Agent
	p := identity.Perms{
		Lstat: func(p string) (identity.Stat, error) {
			fi, err := c.env.Stat(p)
			return identity.Stat{Mode: fi.Mode, UID: fi.UID, GID: fi.GID}, err
		},
		Euid:   func() int { return int(a.UID) },
		Groups: func() ([]uint32, error) { return a.GIDs, nil },
		DirWritable: func(dir string) error {
			for _, want := range []string{"-w", "-x"} {
				if ok, err := c.tryAs(ctx, a, dir, want); err != nil {
					return err
				} else if !ok {
					return fs.ErrPermission
				}
			}
			return nil
		},
		UserName:  c.userName,
		GroupName: c.groupName,
	}
	return p.CanReplace(path)
}

// identityCA: the controller's CA inside the identity (id.ca), which the SDK trusts.
func (c *checker) identityCA(context.Context) Result {
	f, err := c.readIdentity()
	switch {
	case err != nil:
		return skip("the identity cannot be read (see identity)")
	case len(f.CA) == 0:
		return skip("the identity carries no CA (id.ca): the system roots verify the controller")
	}
	return c.judgeCA(f.CA.Earliest(), "the identity's CA bundle (id.ca) in "+c.cfg().Identity,
		"re-enrol this box to get the network's current CA: `fleetctl onboard "+c.cfg().EnvID+" --reissue`, then install.sh --enrol-jwt")
}

// openbaoCA: bao.ca_file, the only roots OpenBao's certificate is verified against when it exists.
func (c *checker) openbaoCA(context.Context) Result {
	path := c.cfg().Bao.CAFile
	raw, err := c.env.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return skip("%s does not exist: the system roots verify OpenBao", path)
	case errors.As(err, new(*capread.NotRegularError)):
		// A mode cannot make a FIFO, a directory or a device a certificate.
		return fail(fmt.Sprintf("%s cannot be read: %v", path, unwrapPathErr(err)),
			"replace "+path+" with OpenBao's CA certificate (PEM) as a plain file, or remove it to use the system roots")
	case err != nil:
		return fail(fmt.Sprintf("%s cannot be read: %v", path, unwrapPathErr(err)), fmt.Sprintf("chmod 0644 %s", path))
	}
	b, err := horizon.ParsePEM(raw)
	if err != nil {
		return fail(fmt.Sprintf("%s: %v: the OpenBao client refuses it", path, err), "put OpenBao's CA certificate (PEM) in "+path+", or remove the file to use the system roots")
	}
	return c.judgeCA(b.Earliest(), path, "replace "+path+" with OpenBao's current CA bundle (the ansible role's monky_deployd_bao_ca, or install.sh --bao-ca)")
}

// judgeCA: FAIL expired, WARN within CAWarnWithin, else OK.
func (c *checker) judgeCA(cert horizon.Cert, what, fix string) Result {
	left := cert.NotAfter.Sub(c.now())
	d := fmt.Sprintf("%s: %s expires %s (%s)", what, cert.Subject, cert.NotAfter.Format(time.RFC3339), horizon.Days(left))
	switch horizon.Judge(cert.NotAfter, c.now(), CAWarnWithin) {
	case horizon.Passed:
		return fail(d+": TLS to the server it vouches for fails", fix)
	case horizon.Near:
		return warn(d, fix)
	}
	return ok("%s", d)
}

func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", filepath.Base(pe.Path), pe.Err)
	}
	return err
}
