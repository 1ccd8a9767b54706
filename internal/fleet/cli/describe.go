package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
)

func newDescribeCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "describe ENV",
		Short: "Everything known about one env: its verdict, next step, both sources, failure, kit",
		Long: `describe prints all that tenancy and the ziti controller know of one env: the verdict and its
whole next step, tenancy's side (check-in, version, desired and applied release, last result,
last tick's exit code, timer, backoff, last failure, token, disk, tick ids for the box's
journal), the controller's side (identity, attributes, mesh) and the kit (enrolment, how to
re-issue it). It reads and changes nothing else; -o json prints the env as status does.

Exit 0 when the env is OK, 1 when it is not, 2 when neither source knows it, 3 when a source
could not be read.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("describe takes exactly one ENV, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDescribe(cmd.Context(), args[0], g, g.stdout)
		},
	}
}

func runDescribe(ctx context.Context, env string, g *globalOptions, w io.Writer) error {
	if err := admin.CheckEnvID(env); err != nil {
		return usagef("ENV: %v", err)
	}
	r, err := g.openReader(nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	zc, err := r.zitiSession(ctx)
	if err != nil {
		return err
	}
	facts, err := g.lookupEnv(ctx, r.s, r.ac, zc, env)
	if err != nil {
		return err
	}
	doc, err := facts.document()
	if err != nil {
		return &SourceError{Source: sourceTenancy, Addr: r.s.TenancyURL, Err: err}
	}
	if len(doc.Envs) == 0 {
		return usagef("%s: tenancy does not list it and the controller has no identity %s", env, ziti.IdentityName(env))
	}
	d := &describeDoc{Schema: report.Schema, Now: doc.Now, Env: doc.Envs[0]}
	if err := g.printer().Print(w, d); err != nil {
		return err
	}
	return notOK(d.Env.Verdict != string(verdict.OK))
}

// describeDoc is `fleetctl describe ENV`: one env of `status -o json`, with tenancy's clock.
type describeDoc struct {
	Schema int        `json:"schema"`
	Now    string     `json:"now"`
	Env    report.Env `json:"env"`
}

// describeSection is one block of the text form: a title and its key: value lines.
type describeSection struct {
	title string
	rows  [][2]string
}

// describeSections build the text form, in order. Issue 21 adds a section for the credential
// horizons: a function, appended here.
var describeSections = []func(d *describeDoc) describeSection{
	verdictSection,
	tenancySection,
	failureSection,
	holdSection,
	meshSection,
	kitSection,
}

func (d *describeDoc) Table(bool) render.Table {
	var lines []string
	for i, build := range describeSections {
		s := build(d)
		if i > 0 {
			lines = append(lines, "")
		}
		indent := ""
		if s.title != "" {
			lines = append(lines, s.title)
			indent = "  "
		}
		for _, r := range s.rows {
			lines = append(lines, fmt.Sprintf("%s%-16s %s", indent, r[0]+":", orDash(r[1])))
		}
	}
	return render.Table{Lines: lines}
}

func verdictSection(d *describeDoc) describeSection {
	e := &d.Env
	site := e.Site
	if site == "" {
		site = "none"
	}
	rows := [][2]string{
		{"env", fmt.Sprintf("%s (site %s)", e.EnvID, site)},
		{"verdict", e.Verdict},
		{"next step", e.NextStep},
	}
	if len(e.Reasons) > 1 {
		rows = append(rows, [2]string{"also", strings.Join(e.Reasons[1:], ", ")})
	}
	if e.StaleCause != "" {
		rows = append(rows, [2]string{"stale cause", e.StaleCause})
	}
	return describeSection{rows: rows}
}

func tenancySection(d *describeDoc) describeSection {
	e := &d.Env
	s := describeSection{title: "tenancy (its clock: " + d.Now + ")"}
	if e.Verdict == string(verdict.OrphanIdentity) {
		s.rows = [][2]string{{"backend", "none: tenancy lists no " + e.EnvID}}
		return s
	}
	checkin := "never"
	if e.LastCheckinAt != nil {
		checkin = fmt.Sprintf("%s, %s ago", *e.LastCheckinAt, durationText(e.CheckinAgeS))
	}
	checkin += fmt.Sprintf(" (interval %s, stale after %s)", orDash(verdict.Human(time.Duration(e.CheckinIntervalS)*time.Second)),
		verdict.Human(time.Duration(e.StaleAfterS)*time.Second))
	agent := ""
	if e.AgentVersion != "" {
		agent = e.AgentVersion
		if e.Hostname != "" {
			agent += " on " + e.Hostname
		}
		if e.Transport != "" {
			agent += ", transport " + e.Transport
		}
	}
	desired := e.DesiredSha
	if desired != "" && e.DesiredAt != nil {
		desired += " since " + *e.DesiredAt
	}
	result := e.LastResult
	if result != "" && e.LastResultAt != nil {
		result += " at " + *e.LastResultAt
	}
	s.rows = [][2]string{
		{"last check-in", checkin},
		{"agent", agent},
		{"upgraded from", deref(e.UpgradedFrom)},
		{"answered", e.LastAction},
		{"desired", desired},
		{"applied", e.AppliedSha},
		{"last result", result},
		{"last detail", oneLine(e.LastDetail)},
		{"last tick exit", intText(e.LastExitCode)},
		{"timer", timerText(e)},
		{"token ttl", durationText(e.TokenTTLS)},
		{"disk free", bytesText(e.DiskFreeBytes)},
		{"journal", journalHint(e)},
	}
	return s
}

func failureSection(d *describeDoc) describeSection {
	e := &d.Env
	s := describeSection{title: "deploys"}
	backoff := ""
	if e.BackingOff() {
		backoff = fmt.Sprintf("%s failed %d×", *e.FailedSha, e.Attempts)
		if e.RevertedTo != nil {
			backoff += ", reverted to " + *e.RevertedTo
			if e.RevertHealthy != nil {
				backoff += map[bool]string{true: " (healthy)", false: " (unhealthy)"}[*e.RevertHealthy]
			}
		}
		if e.NextAttemptAt != nil {
			backoff += ", next try at " + *e.NextAttemptAt
		}
	}
	failure := ""
	if f := e.LastFailure; f != nil {
		failure = fmt.Sprintf("%s %s at %s, %d attempt(s): %s", f.Sha, f.Code, f.At, f.Attempts, oneLine(f.Detail))
	}
	s.rows = [][2]string{{"backoff", backoff}, {"last failure", failure}}
	return s
}

// holdSection is what the box's last check-in said of a human's hold and of a desired release
// waiting for its apply window (issue 22), judged by tenancy's clock as the verdict is: a hold or
// a deferral whose time has passed is shown as over, not as running.
func holdSection(d *describeDoc) describeSection {
	e := &d.Env
	s := describeSection{title: "hold and apply window"}
	now, _ := time.Parse(time.RFC3339, d.Now)
	hold := ""
	if h := e.Hold; h != nil {
		hold = fmt.Sprintf("by %s since %s until %s: %s", oneLine(h.By), h.Since, h.Until, oneLine(h.Reason))
		if until, err := time.Parse(time.RFC3339, h.Until); err == nil && !now.IsZero() {
			if until.After(now) {
				hold += fmt.Sprintf(" (%s left; monky-deployd unhold on the box ends it)", verdict.Human(until.Sub(now)))
			} else {
				hold += " (over by tenancy's clock: it ends by itself at the box's next tick)"
			}
		}
	}
	deferred := ""
	if u := e.DeferredUntil; u != nil {
		deferred = fmt.Sprintf("desired %s waits for the box's apply window until %s", verdict.Short(e.DesiredSha), *u)
		until, err := time.Parse(time.RFC3339, *u)
		switch {
		case e.DesiredSha == "" || e.DesiredSha == e.AppliedSha:
			deferred = fmt.Sprintf("until %s, but the desired release is applied: nothing waits", *u)
		case err == nil && !now.IsZero() && until.After(now):
			deferred += fmt.Sprintf(" (%s left; a check-in answer with ignore_window applies it at once)", verdict.Human(until.Sub(now)))
		case err == nil && !now.IsZero():
			deferred += " (the window has opened by tenancy's clock: the box's next tick applies it)"
		}
	}
	s.rows = [][2]string{{"hold", hold}, {"deferred", deferred}}
	return s
}

func meshSection(d *describeDoc) describeSection {
	e := &d.Env
	s := describeSection{title: "ziti controller"}
	if e.IdentityID == nil {
		s.rows = [][2]string{{"identity", "none: the controller has no " + e.Identity}}
		return s
	}
	attrs := strings.Join(e.RoleAttributes, ", ")
	if len(e.MissingAttributes) > 0 {
		attrs += fmt.Sprintf(" (lacks %s: fleetctl repair-attrs %s)", strings.Join(e.MissingAttributes, ", "), e.EnvID)
	} else {
		attrs += " (none missing)"
	}
	host := e.MeshHostname
	if e.SDKVersion != "" {
		host = strings.TrimPrefix(host+", sdk "+e.SDKVersion, ", ")
	}
	s.rows = [][2]string{
		{"identity", fmt.Sprintf("%s (id %s)", e.Identity, *e.IdentityID)},
		{"mesh", meshText(e.MeshOnline)},
		{"attributes", attrs},
		{"host", host},
	}
	return s
}

func kitSection(d *describeDoc) describeSection {
	e := &d.Env
	s := describeSection{title: "kit"}
	enrol := ""
	if p := e.EnrollmentPending; p != nil && *p {
		enrol = fmt.Sprintf("pending: the kit's monky-host.%s.jwt was not used yet (the install kit did not run, or failed before enrolling)", e.EnvID)
	} else if p != nil {
		enrol = "done: the box holds its identity"
	}
	site := e.Site
	if site == "" {
		site = "SITE"
	}
	reissue := fmt.Sprintf("fleetctl onboard %s --site %s --reissue: supersedes the grant the box holds; refused while its agent checks in (--replace-live), --dry-run shows the plan",
		e.EnvID, site)
	s.rows = [][2]string{{"enrolment", enrol}, {"re-issue", reissue}}
	return s
}

// journalHint is the one step from a row to the box's journal: the tick ids tenancy kept.
func journalHint(e *report.Env) string {
	id := e.CheckinTickID
	if id == "" {
		id = e.ResultTickID
	}
	if id == "" {
		return ""
	}
	s := "journalctl -u monky-deployd | grep tick_id=" + id + " (the tick of the last check-in"
	if e.ResultTickID != "" && e.ResultTickID != id {
		s += "; of the last report: tick_id=" + e.ResultTickID
	}
	return s + ")"
}

func timerText(e *report.Env) string {
	t := e.Timer
	if t == nil || t.Enabled == nil {
		return "unknown (the agent did not say)"
	}
	parts := []string{map[bool]string{true: "enabled", false: "disabled"}[*t.Enabled]}
	if t.Active != nil {
		parts = append(parts, map[bool]string{true: "active", false: "inactive"}[*t.Active])
	}
	if t.NextElapse != nil {
		parts = append(parts, "next elapse "+*t.NextElapse)
	}
	if t.ObservedAt != nil {
		parts = append(parts, "as of "+*t.ObservedAt)
	}
	return strings.Join(parts, ", ")
}

func meshText(online *bool) string {
	switch {
	case online == nil:
		return "unknown (the controller did not say)"
	case *online:
		return "online"
	}
	return "offline"
}

func durationText(s *int64) string {
	if s == nil {
		return ""
	}
	return verdict.Human(time.Duration(*s) * time.Second)
}

func bytesText(b *int64) string {
	if b == nil {
		return ""
	}
	return fmt.Sprintf("%.1f GiB", float64(*b)/(1<<30))
}

func intText(p *int) string {
	if p == nil {
		return ""
	}
	return fmt.Sprint(*p)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
