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
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
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
	// replaceLive onboards an env whose agent checks in (its grant is superseded); dryRun
	// reads both sources and says what onboard would do, changing nothing.
	replaceLive bool
	dryRun      bool
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

Every reveal supersedes the backend's earlier bootstrap grants, and with them the token of an
agent that runs: its next call is refused (AGENT_UNAUTHENTICATED) until this kit is installed
on the box. So before anything is revealed or changed, onboard reads the env from tenancy and
the controller, and refuses an env whose agent checked in within its stale window (exit 2),
saying when and what re-onboarding would do; --replace-live onboards it anyway. --dry-run
shows what onboard would do and changes nothing. An existing kit is never overwritten without
--reissue.`,
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
	fl.BoolVar(&opts.replaceLive, "replace-live", false, "onboard an env whose agent still checks in (its running agent is locked out until the new kit is installed)")
	fl.BoolVar(&opts.dryRun, "dry-run", false, "read both sources and say what onboard would do; reveal, create and write nothing")
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

	if opts.dryRun {
		return dryRunOnboard(ctx, opts, g, s, ac, zs, w)
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
	// Read first: a reveal would lock a running agent out (issue 20), so a live env is refused.
	facts, err := g.lookupEnv(ctx, s, ac, zc, opts.env)
	if err != nil {
		return err
	}
	if live := liveness(facts); live != nil {
		if !opts.replaceLive {
			return &liveError{env: opts.env, live: live}
		}
		g.log.Warn("onboard: the env is live; --replace-live: its agent is locked out until this kit is installed", "env", opts.env,
			"last_checkin", live.at.Format(time.RFC3339))
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

// live is an env whose agent checked in within its stale window, on tenancy's clock.
type live struct {
	at         time.Time
	age, stale time.Duration
	version    string
	host       string
	online     *bool
}

// liveness is nil unless tenancy lists the env and its agent checked in no longer ago than its
// stale window (verdict.StaleAfter of its interval).
func liveness(f *envFacts) *live {
	a := f.Agent
	if a == nil || a.LastCheckinAt == nil {
		return nil
	}
	at, err := time.Parse(time.RFC3339, *a.LastCheckinAt) // checked by the listing's parser
	if err != nil {
		return nil
	}
	l := &live{at: at.UTC(), age: max(f.Agents.Now.Sub(at), 0), version: a.AgentVersion, host: a.Hostname,
		stale: verdict.StaleAfter(time.Duration(a.CheckinIntervalS) * time.Second)}
	if f.Identity != nil {
		l.online = f.Identity.Online
	}
	if l.age > l.stale {
		return nil
	}
	return l
}

// errLive: onboard refused an env whose agent checks in (exit 2, as a kit that exists).
var errLive = errors.New("the env is live")

// liveError says when the agent last checked in and what re-onboarding would do to it.
type liveError struct {
	env  string
	live *live
}

// fact: `env-dev-02 is live: its agent 0.2.0 on dev-02 checked in 20s ago (…)`.
func (e *liveError) fact() string {
	l := e.live
	who := "its agent"
	if l.version != "" {
		who += " " + l.version
	}
	if l.host != "" {
		who += " on " + l.host
	}
	mesh := ""
	if l.online != nil && *l.online {
		mesh = ", online on the mesh"
	}
	return fmt.Sprintf("%s is live: %s checked in %s ago (%s on tenancy's clock, within its stale window of %s%s)",
		e.env, who, verdict.Human(l.age), l.at.Format(time.RFC3339), verdict.Human(l.stale), mesh)
}

func (e *liveError) Error() string {
	return e.fact() + ". Onboarding it reveals a new kit, which supersedes every earlier bootstrap grant: the running agent's next call is refused " +
		"(AGENT_UNAUTHENTICATED) and the box stops deploying until the new kit is installed on it. Nothing was revealed or changed. " +
		"To repair the identity's attributes: fleetctl repair-attrs " + e.env + "; to see the plan: --dry-run; to replace the box anyway: --replace-live"
}

// plan is the refusal as the dry run states it.
func (e *liveError) plan() string {
	return e.fact() + ": a reveal would lock its running agent out (AGENT_UNAUTHENTICATED) until the new kit is installed on the box; --replace-live onboards it anyway"
}

func (e *liveError) Unwrap() error { return errLive }

// onboardPlan is `onboard --dry-run`: what onboard would do, from both sources; nothing changed.
type onboardPlan struct {
	Schema int    `json:"schema"`
	DryRun bool   `json:"dry_run"`
	EnvID  string `json:"env_id"`
	Site   string `json:"site"`
	// Listed: tenancy lists the env; LastCheckinAt and Live say whether its agent checks in.
	Listed        bool    `json:"listed"`
	LastCheckinAt *string `json:"last_checkin_at"`
	AgentVersion  string  `json:"agent_version"`
	Live          bool    `json:"live"`
	// Identity: what onboard would do to monky-host.ENV: create, repair (Add), or nothing (ok).
	Identity       string   `json:"identity"`
	IdentityAction string   `json:"identity_action"`
	Add            []string `json:"add_attributes"`
	MeshOnline     *bool    `json:"mesh_online"`
	Kit            string   `json:"kit_dir"`
	KitExists      bool     `json:"kit_exists"`
	// Proceed says whether onboard would go ahead; Refusal why not.
	Proceed bool   `json:"proceed"`
	Refusal string `json:"refusal"`
}

func (p *onboardPlan) Table(bool) render.Table {
	lines := []string{"dry run: nothing was revealed, created or written"}
	switch {
	case !p.Listed:
		lines = append(lines, fmt.Sprintf("%s: tenancy lists no agent for it (a new backend, or one tenancy does not know: the reveal says which)", p.EnvID))
	case p.LastCheckinAt == nil:
		lines = append(lines, fmt.Sprintf("%s: tenancy lists it, never checked in", p.EnvID))
	default:
		state := "stale"
		if p.Live {
			state = "live"
		}
		lines = append(lines, fmt.Sprintf("%s: last check-in %s, running %s: %s", p.EnvID, *p.LastCheckinAt, orDash(p.AgentVersion), state))
	}
	switch p.IdentityAction {
	case "create":
		lines = append(lines, fmt.Sprintf("identity %s: absent; the broker or onboard creates it with #%s", p.Identity, strings.Join(p.Add, " #")))
	case "repair":
		lines = append(lines, fmt.Sprintf("identity %s: would gain #%s", p.Identity, strings.Join(p.Add, " #")))
	default:
		lines = append(lines, fmt.Sprintf("identity %s: carries both attributes, left as it is", p.Identity))
	}
	kitLine := fmt.Sprintf("kit: written to %s", p.Kit)
	if p.KitExists {
		kitLine = fmt.Sprintf("kit: %s exists and would be replaced (--reissue)", p.Kit)
	}
	lines = append(lines, kitLine, "reveal: supersedes every earlier bootstrap grant of "+p.EnvID)
	if p.Proceed {
		lines = append(lines, "onboard would go ahead")
	} else {
		lines = append(lines, "onboard would be refused: "+p.Refusal)
	}
	return render.Table{Lines: lines}
}

// dryRunOnboard reads both sources as onboard does and prints the plan; exit 1 when onboard
// would be refused, 0 when it would go ahead.
func dryRunOnboard(ctx context.Context, opts onboardOptions, g *globalOptions, s *config.Settings, ac *admin.Client, zs *zitiSetup, w io.Writer) error {
	p := &onboardPlan{Schema: report.Schema, DryRun: true, EnvID: opts.env, Site: opts.site, Identity: ziti.IdentityName(opts.env),
		Kit: filepath.Join(opts.out, opts.env), Add: []string{}, Proceed: true}
	exists, kerr := kit.Check(opts.out, opts.env, opts.reissue)
	p.KitExists = exists
	if kerr != nil {
		p.Proceed, p.Refusal = false, kerr.Error()
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	zc, err := g.dialZiti(ctx, zs)
	if err != nil {
		return err
	}
	facts, err := g.lookupEnv(ctx, s, ac, zc, opts.env)
	if err != nil {
		return err
	}
	if a := facts.Agent; a != nil {
		p.Listed, p.LastCheckinAt, p.AgentVersion = true, a.LastCheckinAt, a.AgentVersion
	}
	if l := liveness(facts); l != nil {
		p.Live = true
		if !opts.replaceLive && p.Proceed {
			p.Proceed, p.Refusal = false, (&liveError{env: opts.env, live: l}).plan()
		}
	}
	switch id := facts.Identity; {
	case id == nil:
		p.IdentityAction, p.Add = "create", ziti.RequiredAttributes()
	case len(ziti.MissingAttributes(id.RoleAttributes)) > 0:
		p.IdentityAction, p.Add, p.MeshOnline = "repair", ziti.MissingAttributes(id.RoleAttributes), id.Online
	default:
		p.IdentityAction, p.MeshOnline = "ok", id.Online
	}
	if err := g.printer().Print(w, p); err != nil {
		return err
	}
	return notOK(!p.Proceed)
}
