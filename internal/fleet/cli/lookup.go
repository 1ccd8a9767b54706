package cli

import (
	"context"
	"errors"
	"time"

	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// envFacts is what both sources know of one env, read without changing anything.
type envFacts struct {
	// Agents is tenancy's listing narrowed to the env (Now is tenancy's clock); Agent is nil when
	// tenancy does not list it.
	Agents *admin.Agents
	Agent  *protocol.AdminAgent
	// Identity is monky-host.ENV (or tenancy's name for it); nil when the controller has none.
	Identity *ziti.Identity
}

// lookupEnv reads env from tenancy's listing (it has no call for one env, so the whole listing
// is read and narrowed) and its identity by exact name from the controller, both at once; only
// GETs (and the controller's authentication) are made. Either failing is a *SourceError.
func (g *globalOptions) lookupEnv(ctx context.Context, s *config.Settings, ac *admin.Client, zc *ziti.Client, env string) (*envFacts, error) {
	out := &envFacts{}
	var listed *admin.Agents
	eg, ectx := errgroup.WithContext(ctx)
	eg.Go(func() error {
		agents, err := ac.ListAgents(ectx, "", nil)
		if err != nil {
			return &SourceError{Source: sourceTenancy, Addr: s.TenancyURL, Err: err}
		}
		listed = agents
		return nil
	})
	var byName *ziti.Identity
	eg.Go(func() error {
		id, err := zc.FindIdentity(ectx, ziti.IdentityName(env))
		switch {
		case errors.Is(err, ziti.ErrNotFound):
		case err != nil:
			return &SourceError{Source: sourceZiti, Addr: s.ZitiURL, Err: err}
		default:
			byName = id
		}
		return nil
	})
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	out.Agents = &admin.Agents{Now: listed.Now, Pages: listed.Pages}
	for i := range listed.Agents {
		if a := &listed.Agents[i]; a.EnvID == env {
			out.Agent = a
			out.Agents.Agents = []protocol.AdminAgent{*a}
			break
		}
	}
	out.Identity = byName
	// Tenancy may name the host's identity otherwise; the report judges by tenancy's name.
	if out.Agent != nil {
		if name := report.IdentityOf(*out.Agent); name != ziti.IdentityName(env) {
			out.Identity = nil
			id, err := zc.FindIdentity(ctx, name)
			switch {
			case errors.Is(err, ziti.ErrNotFound):
			case err != nil:
				return nil, &SourceError{Source: sourceZiti, Addr: s.ZitiURL, Err: err}
			default:
				out.Identity = id
			}
		}
	}
	g.log.Debug("looked up one env", "env", env, "tenancy_lists_it", out.Agent != nil, "identity", out.Identity != nil,
		"now", listed.Now.Format(time.RFC3339))
	return out, nil
}

// document judges the env as status would (an identity tenancy does not list is an orphan).
func (f *envFacts) document() (*report.Document, error) {
	var ids []ziti.Identity
	if f.Identity != nil {
		ids = []ziti.Identity{*f.Identity}
	}
	return report.Build(f.Agents, ids, report.Options{Orphans: true})
}
