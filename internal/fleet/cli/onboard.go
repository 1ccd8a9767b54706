package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

type onboardOptions struct {
	env       string
	site      string
	transport string
	out       string
	reissue   bool
}

func newOnboardCommand(g *globalOptions) *cobra.Command {
	var opts onboardOptions
	cmd := &cobra.Command{
		Use:   "onboard ENV --site S",
		Short: "Reveal an install kit and write it to DIR/ENV",
		Long: `onboard reveals ENV's install kit through tenancy, makes sure the ziti identity
monky-host.ENV exists and carries #monky-deploy-agent and #openbao-client (creating or
repairing it), fetches its enrolment token, and writes DIR/ENV/: bootstrap.jwt (0600),
monky-host.ENV.jwt (0600), install.sh.cmd, host_vars.yml and README.txt.

Every reveal supersedes the backend's earlier bootstrap grants. An existing kit is never
overwritten without --reissue.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("onboard takes exactly one ENV, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.env = args[0]
			return runOnboard(cmd.Context(), opts, g, g.stdout)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&opts.site, "site", "", "the backend's site (required)")
	fl.StringVar(&opts.transport, "transport", "sdk", "how the agent reaches the mesh: sdk, proxy or system")
	fl.StringVar(&opts.out, "out", ".", "directory the kit directory ENV/ is written in")
	fl.BoolVar(&opts.reissue, "reissue", false, "replace an existing kit (its grant is superseded)")
	return cmd
}

// onboardResult is what onboard did; it never holds a secret.
type onboardResult struct {
	Schema          int        `json:"schema"`
	EnvID           string     `json:"env_id"`
	Site            string     `json:"site"`
	Dir             string     `json:"dir"`
	Files           []kitFile  `json:"files"`
	PackageVersion  string     `json:"package_version"`
	InstallCommand  string     `json:"install_command"`
	GrantExpiresAt  string     `json:"grant_expires_at"`
	Reissued        bool       `json:"reissued"`
	Identity        identityOp `json:"identity"`
	EnrollmentToken bool       `json:"enrollment_token"`
	Hostname        string     `json:"hostname,omitempty"`
}

type kitFile struct {
	Name string `json:"name"`
	Mode string `json:"mode"`
}

type identityOp struct {
	Name   string   `json:"name"`
	ID     string   `json:"id"`
	Action string   `json:"action"` // "ok", "created", "repaired"
	Added  []string `json:"added_attributes"`
}

func (r *onboardResult) Table(bool) render.Table {
	lines := []string{
		fmt.Sprintf("kit of %s (site %s, monky-deployd %s) written to %s", r.EnvID, r.Site, r.PackageVersion, r.Dir),
	}
	switch r.Identity.Action {
	case "created":
		lines = append(lines, fmt.Sprintf("identity %s: created with #%s", r.Identity.Name, strings.Join(r.Identity.Added, " #")))
	case "repaired":
		lines = append(lines, fmt.Sprintf("identity %s: added #%s", r.Identity.Name, strings.Join(r.Identity.Added, " #")))
	default:
		lines = append(lines, fmt.Sprintf("identity %s: carries both attributes", r.Identity.Name))
	}
	if !r.EnrollmentToken {
		lines = append(lines, "no enrolment token: the identity is enrolled already; the box keeps its identity")
	}
	// Only tenancy's timestamp: a duration would mix tenancy's clock with this machine's.
	lines = append(lines, fmt.Sprintf("bootstrap grant expires %s: run the install before then", r.GrantExpiresAt))
	if r.Reissued {
		lines = append(lines, "reissued: the previous kit's grant is superseded; a box still holding it must be given this kit")
	} else {
		lines = append(lines, "this reveal superseded every earlier bootstrap grant of "+r.EnvID)
	}
	box := "the box"
	if r.Hostname != "" {
		box += " (" + r.Hostname + ")"
	}
	lines = append(lines, "", "on "+box+", from the kit directory, with the read-only deploy token exported as "+kit.TokenVar+":", "",
		"  read -rs "+kit.TokenVar+" && export "+kit.TokenVar, "  "+r.InstallCommand)
	return render.Table{Lines: lines}
}

func runOnboard(ctx context.Context, opts onboardOptions, g *globalOptions, w io.Writer) error {
	if err := admin.CheckKitName("env_id", opts.env); err != nil {
		return usagef("ENV: %v", err)
	}
	if opts.site == "" {
		return usagef("--site is required")
	}
	if err := admin.CheckKitName("site", opts.site); err != nil {
		return usagef("--site: %v", err)
	}
	switch opts.transport {
	case "sdk", "proxy", "system":
	default:
		return usagef("--transport %q: want sdk, proxy or system", opts.transport)
	}
	s, err := g.settings()
	if err != nil {
		return err
	}
	zs, err := g.zitiSetup(s)
	if err != nil {
		return err
	}
	ac, err := g.adminClient(s)
	if err != nil {
		return err
	}

	// Staged BEFORE the reveal: a reveal supersedes the box's grant, so not when no kit can be written.
	stage, err := kit.Prepare(opts.out, opts.env, opts.reissue)
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			stage.Abort()
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	zc, err := g.dialZiti(ctx, zs)
	if err != nil {
		return err
	}

	resp, err := ac.RevealKit(ctx, opts.env, protocol.KitRequest{Site: opts.site, Transport: opts.transport})
	if err != nil {
		if errors.Is(err, admin.ErrBackendUnknown) {
			return usagef("tenancy does not know %s (BACKEND_UNKNOWN): register the backend in tenancy first", opts.env)
		}
		return &SourceError{Source: sourceTenancy, Addr: s.TenancyURL, Err: err}
	}
	g.secrets.add(resp.BootstrapGrant)
	g.log.Debug("tenancy: kit revealed", "env", opts.env, "package", resp.PackageVersion, "grant_expires", resp.GrantExpiresAt)
	k := kit.FromResponse(resp, opts.transport)

	afterReveal := func(err error) error {
		return &SourceError{Source: sourceZiti, Addr: s.ZitiURL, Err: fmt.Errorf(
			"%w (the kit was revealed and earlier grants are superseded; fix this and re-run with --reissue)", err)}
	}
	op, id, err := ensureIdentity(ctx, zc, opts.env)
	if err != nil {
		return afterReveal(err)
	}
	g.log.Debug("ziti: identity", "name", op.Name, "id", op.ID, "action", op.Action)
	enr, err := zc.EnrollmentJWT(ctx, op.ID)
	switch {
	case errors.Is(err, ziti.ErrNoEnrollment):
		g.log.Warn("ziti: the identity is enrolled already; the kit carries no enrolment token", "identity", op.Name)
	case err != nil:
		return afterReveal(err)
	default:
		g.secrets.add(enr.JWT.Reveal())
		k.EnrollmentJWT = enr.JWT
	}

	k.Hostname = id.Hostname
	k.Reissued = stage.Replaces()
	k.CreatedAt = g.deps.Now().UTC()
	k.Tool = "fleetctl " + version.Version
	dir, err := stage.Commit(k)
	if err != nil {
		return fmt.Errorf("%w (the kit was revealed and earlier grants are superseded: re-run with --reissue)", err)
	}
	committed = true

	res := &onboardResult{
		Schema: report.Schema, EnvID: k.EnvID, Site: k.Site, Dir: dir, PackageVersion: k.PackageVersion,
		InstallCommand: kit.InstallCommand(k), GrantExpiresAt: k.GrantExpiresAt.Format(time.RFC3339),
		Reissued: k.Reissued, Identity: op, EnrollmentToken: !k.EnrollmentJWT.Empty(), Hostname: k.Hostname,
	}
	for _, f := range kit.Files(k) {
		res.Files = append(res.Files, kitFile{Name: filepath.Join(dir, f.Name), Mode: fmt.Sprintf("%04o", f.Mode)})
	}
	return g.printer().Print(w, res)
}

// ensureIdentity makes sure monky-host.ENV exists with both role attributes, repairing what an
// early or failed broker left at the reveal.
func ensureIdentity(ctx context.Context, zc *ziti.Client, env string) (identityOp, *ziti.Identity, error) {
	name := ziti.IdentityName(env)
	id, err := zc.FindIdentity(ctx, name)
	if errors.Is(err, ziti.ErrNotFound) {
		zid, err := zc.CreateHostIdentity(ctx, name, ziti.RequiredAttributes())
		if err != nil {
			return identityOp{}, nil, err
		}
		return identityOp{Name: name, ID: zid, Action: "created", Added: ziti.RequiredAttributes()}, &ziti.Identity{ID: zid, Name: name}, nil
	}
	if err != nil {
		return identityOp{}, nil, err
	}
	missing := ziti.MissingAttributes(id.RoleAttributes)
	if len(missing) == 0 {
		return identityOp{Name: name, ID: id.ID, Action: "ok", Added: []string{}}, id, nil
	}
	if err := zc.SetRoleAttributes(ctx, id.ID, ziti.MergeAttributes(id.RoleAttributes)); err != nil {
		return identityOp{}, nil, err
	}
	return identityOp{Name: name, ID: id.ID, Action: "repaired", Added: missing}, id, nil
}
