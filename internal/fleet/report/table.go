package report

import (
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Table lays the document out for `-o table` and `-o wide`.
func (d *Document) Table(wide bool) render.Table {
	t := render.Table{Header: header(wide)}
	for _, e := range d.Envs {
		t.Rows = append(t.Rows, e.row(wide))
	}
	t.Lines = []string{d.SummaryLine()}
	return t
}

func header(wide bool) []string {
	if wide {
		return []string{"ENV", "SITE", "VERDICT", "REASONS", "LAST CHECK-IN", "INTERVAL", "AGENT", "TRANSPORT", "HOST",
			"MESH", "SDK", "ATTRS", "APPLIED", "DESIRED", "RESULT", "TIMER", "CERT", "NEXT STEP"}
	}
	return []string{"ENV", "SITE", "VERDICT", "LAST CHECK-IN", "AGENT", "MESH", "APPLIED", "RESULT", "TIMER", "NEXT STEP"}
}

func (e Env) row(wide bool) []string {
	if !wide {
		return []string{e.EnvID, e.Site, e.Verdict, e.age(), e.AgentVersion, e.mesh(), e.applied(), e.LastResult, timer(e.Timer), e.NextStep}
	}
	interval := ""
	if e.CheckinIntervalS > 0 {
		interval = verdict.Human(time.Duration(e.CheckinIntervalS) * time.Second)
	}
	host := e.Hostname
	if host == "" {
		host = e.MeshHostname
	}
	attrs := "-"
	switch {
	case e.RoleAttributes == nil:
	case len(e.MissingAttributes) > 0:
		attrs = "missing " + strings.Join(e.MissingAttributes, ",")
	default:
		attrs = "ok"
	}
	return []string{e.EnvID, e.Site, e.Verdict, strings.Join(e.Reasons, ","), e.age(), interval, e.AgentVersion, e.Transport,
		host, e.mesh(), e.SDKVersion, attrs, e.applied(), verdict.Short(e.DesiredSha), e.LastResult, timer(e.Timer), e.cert(), e.NextStep}
}

func (e Env) age() string {
	switch {
	case e.Verdict == string(verdict.OrphanIdentity):
		return ""
	case e.CheckinAgeS == nil:
		return "never"
	}
	return verdict.Human(time.Duration(*e.CheckinAgeS)*time.Second) + " ago"
}

func (e Env) mesh() string {
	switch {
	case e.IdentityID == nil:
		return "no identity"
	case e.MeshOnline == nil:
		return "unknown"
	case *e.MeshOnline:
		return "online"
	}
	return "offline"
}

// applied is the short applied sha, starred when it is not the desired one.
func (e Env) applied() string {
	s := verdict.Short(e.AppliedSha)
	if e.DesiredSha != "" && e.AppliedSha != e.DesiredSha {
		if s == "" {
			s = "none"
		}
		s += "*"
	}
	return s
}

func timer(t *protocol.AdminTimer) string {
	if t == nil || t.Enabled == nil {
		return ""
	}
	if !*t.Enabled {
		return "disabled"
	}
	if t.Active != nil && !*t.Active {
		return "inactive"
	}
	return "enabled"
}
