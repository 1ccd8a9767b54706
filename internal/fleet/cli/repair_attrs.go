package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
)

type repairOptions struct {
	envs  []string
	all   bool
	apply bool
}

func newRepairAttrsCommand(g *globalOptions) *cobra.Command {
	var opts repairOptions
	cmd := &cobra.Command{
		Use:   "repair-attrs ENV… | --all",
		Short: "Add the missing role attributes to host identities (dry run unless --apply)",
		Long: `repair-attrs adds #monky-deploy-agent and #openbao-client to the identities of the given
envs (or of every monky-host.* identity of an env tenancy knows, with --all) that lack them,
keeping every other attribute: the controller replaces the whole list on a PATCH, so the
existing ones are sent back with the new. With --all, an identity tenancy has no backend for
(ORPHAN_IDENTITY) is listed as skipped and never changed: the attributes would open the mesh's
deploy services to a host nobody deploys to.

Without --apply it only says what it would do, and exits 1 when something needs doing.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.envs = args
			return runRepairAttrs(cmd.Context(), opts, g, g.stdout)
		},
	}
	cmd.Flags().BoolVar(&opts.all, "all", false, "every monky-host.* identity")
	cmd.Flags().BoolVar(&opts.apply, "apply", false, "write the attributes (default: dry run)")
	return cmd
}

type repairPlan struct {
	Schema int          `json:"schema"`
	Apply  bool         `json:"apply"`
	Items  []repairItem `json:"identities"`
}

type repairItem struct {
	EnvID    string   `json:"env_id"`
	Identity string   `json:"identity"`
	ID       string   `json:"id,omitempty"`
	Has      []string `json:"role_attributes"`
	Missing  []string `json:"missing_attributes"`
	// Action: "none" (carries both), "would add", "added", "no identity", "failed", or
	// "skipped: orphan" (--all: tenancy has no backend for it).
	Action string `json:"action"`
	Error  string `json:"error,omitempty"`
}

func (p *repairPlan) count(action string) int {
	n := 0
	for _, it := range p.Items {
		if it.Action == action {
			n++
		}
	}
	return n
}

func (p *repairPlan) Table(bool) render.Table {
	t := render.Table{Header: []string{"ENV", "IDENTITY", "ATTRIBUTES", "MISSING", "ACTION"}}
	for _, it := range p.Items {
		action := it.Action
		if it.Error != "" {
			action += ": " + it.Error
		}
		t.Rows = append(t.Rows, []string{it.EnvID, it.Identity, strings.Join(it.Has, ","), strings.Join(it.Missing, ","), action})
	}
	switch {
	case len(p.Items) == 0:
		t.Lines = []string{"no monky-host.* identities"}
	case !p.Apply && p.count("would add") > 0:
		t.Lines = []string{fmt.Sprintf("dry run: %d of %d identities would get attributes; re-run with --apply to write them",
			p.count("would add"), len(p.Items))}
	case p.Apply && p.count("added") > 0:
		t.Lines = []string{fmt.Sprintf("added attributes to %d of %d identities", p.count("added"), len(p.Items))}
	default:
		t.Lines = []string{fmt.Sprintf("%d identities carry both attributes", p.count("none"))}
	}
	if n := p.count("no identity"); n > 0 {
		t.Lines = append(t.Lines, fmt.Sprintf("%d envs have no identity: fleetctl onboard creates it", n))
	}
	if n := p.count(actionOrphan); n > 0 {
		t.Lines = append(t.Lines, fmt.Sprintf("%d orphan identities skipped: tenancy has no backend for them (onboard the env, or delete the identity)", n))
	}
	if n := p.count("failed"); n > 0 {
		t.Lines = append(t.Lines, fmt.Sprintf("%d repairs failed", n))
	}
	return t
}

func runRepairAttrs(ctx context.Context, opts repairOptions, g *globalOptions, w io.Writer) error {
	switch {
	case opts.all && len(opts.envs) > 0:
		return usagef("give ENV… or --all, not both")
	case !opts.all && len(opts.envs) == 0:
		return usagef("give the envs to repair, or --all")
	}
	for _, e := range opts.envs {
		if err := admin.CheckEnvID(e); err != nil {
			return usagef("ENV: %v", err)
		}
	}
	s, err := g.settings()
	if err != nil {
		return err
	}
	zs, err := g.zitiSetup(s)
	if err != nil {
		return err
	}
	var ac *admin.Client
	if opts.all {
		// Which identities are orphans is tenancy's to say.
		if ac, err = g.adminClient(s); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	zc, err := g.dialZiti(ctx, zs)
	if err != nil {
		return err
	}
	srcErr := func(err error) error { return &SourceError{Source: sourceZiti, Addr: s.ZitiURL, Err: err} }

	plan := &repairPlan{Schema: report.Schema, Apply: opts.apply, Items: []repairItem{}}
	if opts.all {
		agents, err := ac.ListAgents(ctx, "", nil)
		if err != nil {
			return &SourceError{Source: sourceTenancy, Addr: s.TenancyURL, Err: err}
		}
		known := make(map[string]bool, len(agents.Agents))
		for _, a := range agents.Agents {
			known[report.IdentityOf(a)] = true
		}
		prog := g.newProgress()
		ids, err := zc.ListHostIdentities(ctx, prog.ziti)
		prog.done()
		if err != nil {
			return srcErr(err)
		}
		for _, id := range ids {
			env, _ := ziti.EnvOf(id.Name)
			it := itemFor(env, &id)
			if !known[id.Name] {
				it.Action = actionOrphan
			}
			plan.Items = append(plan.Items, it)
		}
	} else {
		for _, env := range opts.envs {
			id, err := zc.FindIdentity(ctx, ziti.IdentityName(env))
			switch {
			case errors.Is(err, ziti.ErrNotFound):
				plan.Items = append(plan.Items, repairItem{EnvID: env, Identity: ziti.IdentityName(env), Has: []string{}, Missing: []string{}, Action: "no identity"})
			case err != nil:
				return srcErr(err)
			default:
				plan.Items = append(plan.Items, itemFor(env, id))
			}
		}
	}
	sort.SliceStable(plan.Items, func(i, j int) bool { return plan.Items[i].EnvID < plan.Items[j].EnvID })

	var failed error
	if opts.apply {
		failed = applyRepairs(ctx, zc, plan, g)
	}
	if err := g.printer().Print(w, plan); err != nil {
		return err
	}
	switch {
	case failed != nil:
		return srcErr(failed)
	case plan.count("would add") > 0 || plan.count("no identity") > 0:
		return ErrNotOK
	}
	return nil
}

// actionOrphan: --all leaves an identity tenancy has no backend for as it is.
const actionOrphan = "skipped: orphan"

func itemFor(env string, id *ziti.Identity) repairItem {
	it := repairItem{EnvID: env, Identity: id.Name, ID: id.ID, Has: append([]string{}, id.RoleAttributes...),
		Missing: ziti.MissingAttributes(id.RoleAttributes), Action: "none"}
	if len(it.Missing) > 0 {
		it.Action = "would add"
	}
	return it
}

// applyRepairs patches identities four at a time, each read again just before: a PATCH replaces
// the whole set, and an attribute added since the listing must not be dropped.
func applyRepairs(ctx context.Context, zc *ziti.Client, plan *repairPlan, g *globalOptions) error {
	var mu sync.Mutex
	var first error
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(4)
	for i := range plan.Items {
		it := &plan.Items[i]
		if it.Action != "would add" {
			continue
		}
		eg.Go(func() error {
			err := func() error {
				cur, err := zc.Detail(ectx, it.ID)
				if err != nil {
					return err
				}
				it.Missing = ziti.MissingAttributes(cur.RoleAttributes)
				if len(it.Missing) == 0 {
					return nil
				}
				merged := ziti.MergeAttributes(cur.RoleAttributes)
				if err := zc.SetRoleAttributes(ectx, it.ID, merged); err != nil {
					return err
				}
				it.Has = merged
				return nil
			}()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				it.Action, it.Error = "failed", err.Error()
				if first == nil {
					first = err
				}
				return nil // keep repairing the others; the failure is reported
			}
			if len(it.Missing) == 0 {
				it.Action = "none"
			} else {
				it.Action = "added"
			}
			g.log.Debug("ziti: role attributes repaired", "identity", it.Identity, "added", strings.Join(it.Missing, ","))
			return nil
		})
	}
	_ = eg.Wait()
	return first
}
