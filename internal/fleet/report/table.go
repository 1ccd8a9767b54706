package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/olekukonko/tablewriter/pkg/twwidth"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// TableWidth is what `status` fits its table in: a scannable row per env, its NEXT STEP shortened
// on a word when it must be; `-o wide`, `describe` and the JSON carry every step whole.
const TableWidth = 120

// minStepWidth keeps NEXT STEP readable when long env ids leave it little room (the row is then wider).
const minStepWidth = 30

// column is one column of the status table: its header and its cell for an env.
type column struct {
	head string
	cell func(e *Env) string
}

// tableColumns fit 120 columns with the next step; the whole story is in wideColumns.
var tableColumns = []column{
	{"ENV", func(e *Env) string { return e.EnvID }},
	{"SITE", func(e *Env) string { return e.Site }},
	{"VERDICT", func(e *Env) string { return e.Verdict }},
	{"CHECK-IN", func(e *Env) string { return e.age() }},
	{"AGENT", func(e *Env) string { return e.AgentVersion }},
}

// wideColumns are every column of `-o wide`, in the order of the story: the verdict, tenancy's
// side, the mesh's side, what runs and what failed. NEXT STEP, whole, comes last.
var wideColumns = []column{
	{"ENV", func(e *Env) string { return e.EnvID }},
	{"SITE", func(e *Env) string { return e.Site }},
	{"VERDICT", func(e *Env) string { return e.Verdict }},
	{"REASONS", func(e *Env) string { return strings.Join(e.Reasons, ",") }},
	{"LAST CHECK-IN", func(e *Env) string { return e.age() }},
	{"INTERVAL", func(e *Env) string { return e.interval() }},
	{"AGENT", func(e *Env) string { return e.AgentVersion }},
	{"TRANSPORT", func(e *Env) string { return e.Transport }},
	{"HOST", func(e *Env) string { return e.host() }},
	{"MESH", func(e *Env) string { return e.mesh() }},
	{"SDK", func(e *Env) string { return e.SDKVersion }},
	{"ATTRS", func(e *Env) string { return e.attrs() }},
	{"APPLIED", func(e *Env) string { return e.applied() }},
	{"DESIRED", func(e *Env) string { return verdict.Short(e.DesiredSha) }},
	{"RESULT", func(e *Env) string { return e.LastResult }},
	{"EXIT", func(e *Env) string { return exitCode(e.LastExitCode) }},
	{"TIMER", func(e *Env) string { return timer(e.Timer) }},
	{"BACKOFF", func(e *Env) string { return e.backoff() }},
	{"LAST FAILURE", func(e *Env) string { return e.failure() }},
	// Issue 21 adds its credential horizons here, issue 22 the hold or deferral: a column each.
	{"TICK", func(e *Env) string { return e.CheckinTickID }},
}

// Table lays the document out for `-o table` (120 columns) and `-o wide` (everything).
func (d *Document) Table(wide bool) render.Table {
	cols := tableColumns
	if wide {
		cols = wideColumns
	}
	t := render.Table{Colour: map[int]func(string) string{2: VerdictColour}}
	for _, c := range cols {
		t.Header = append(t.Header, c.head)
	}
	t.Header = append(t.Header, "NEXT STEP")
	for i := range d.Envs {
		e := &d.Envs[i]
		row := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			row = append(row, c.cell(e))
		}
		step := e.NextStep
		if !wide && e.short != "" {
			step = e.short
		}
		t.Rows = append(t.Rows, append(row, oneLine(step)))
	}
	t.Lines = []string{d.SummaryLine()}
	if !wide {
		t.Lines = wrapList(d.SummaryLine(), TableWidth)
	}
	if !wide && (fitLastColumn(&t, TableWidth) || d.shortened()) {
		t.Lines = append(t.Lines, "NEXT STEP in short: fleetctl describe ENV, or -o wide, gives it whole")
	}
	return t
}

// shortened: a row shows its next step in short.
func (d *Document) shortened() bool {
	for i := range d.Envs {
		if e := &d.Envs[i]; e.short != "" && e.short != e.NextStep {
			return true
		}
	}
	return false
}

// fitLastColumn shortens the last column so that rows fit width (render pads every column but
// the last with 3 blanks); it reports whether any cell was shortened.
func fitLastColumn(t *render.Table, width int) bool {
	n := len(t.Header)
	widths := make([]int, n-1)
	for i := range widths {
		widths[i] = twwidth.Width(t.Header[i])
		for _, r := range t.Rows {
			widths[i] = max(widths[i], twwidth.Width(cellText(r[i])))
		}
	}
	room := width
	for _, w := range widths {
		room -= w + render.ColumnGap
	}
	room = max(room, minStepWidth)
	cut := false
	for _, r := range t.Rows {
		if s := r[n-1]; twwidth.Width(s) > room {
			r[n-1] = ShortenWords(s, room)
			cut = true
		}
	}
	return cut
}

// wrapList breaks a `a, b, c` line at its commas into lines of at most width, continued indented.
func wrapList(s string, width int) []string {
	var lines []string
	cur := ""
	for _, part := range strings.SplitAfter(s, ", ") {
		if cur != "" && twwidth.Width(strings.TrimRight(cur+part, ", ")) > width {
			lines = append(lines, strings.TrimRight(cur, " "))
			cur = "  "
		}
		cur += part
	}
	return append(lines, cur)
}

// cellText is a cell as render prints it.
func cellText(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// ShortenWords cuts s to at most width display columns on a word boundary, marked "…".
func ShortenWords(s string, width int) string {
	if twwidth.Width(s) <= width {
		return s
	}
	runes := []rune(s)
	// The longest prefix of whole words that leaves room for "…".
	end, w, lastSpace := 0, 0, -1
	for i, r := range runes {
		rw := twwidth.Width(string(r))
		if w+rw > width-1 {
			break
		}
		w += rw
		end = i + 1
		if r == ' ' {
			lastSpace = i
		}
	}
	if lastSpace > 0 && end < len(runes) && runes[end] != ' ' {
		end = lastSpace // do not split a word, a path or a command
	}
	return strings.TrimRight(string(runes[:end]), " ;:,(") + "…"
}

// VerdictColour is the SGR colour of a verdict cell on a terminal: red while the box needs a
// person, yellow while it waits or drifts, green when OK. By rank, so a new verdict takes the
// colour of its place in the order.
func VerdictColour(v string) string {
	r := verdict.Rank(verdict.Verdict(v))
	switch {
	case r < verdict.Rank(verdict.BackingOff):
		return "31" // red
	case r < verdict.Rank(verdict.OK):
		return "33" // yellow
	case r == verdict.Rank(verdict.OK):
		return "32" // green
	}
	return "35" // magenta: an orphan identity, or what this version does not know
}

func (e *Env) age() string {
	switch {
	case e.Verdict == string(verdict.OrphanIdentity):
		return ""
	case e.CheckinAgeS == nil:
		return "never"
	}
	return verdict.Human(time.Duration(*e.CheckinAgeS)*time.Second) + " ago"
}

func (e *Env) interval() string {
	if e.CheckinIntervalS <= 0 {
		return ""
	}
	return verdict.Human(time.Duration(e.CheckinIntervalS) * time.Second)
}

func (e *Env) host() string {
	if e.Hostname != "" {
		return e.Hostname
	}
	return e.MeshHostname
}

func (e *Env) attrs() string {
	switch {
	case e.RoleAttributes == nil:
		return "-"
	case len(e.MissingAttributes) > 0:
		return "missing " + strings.Join(e.MissingAttributes, ",")
	}
	return "ok"
}

func (e *Env) mesh() string {
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
func (e *Env) applied() string {
	s := verdict.Short(e.AppliedSha)
	if e.DesiredSha != "" && e.AppliedSha != e.DesiredSha {
		if s == "" {
			s = "none"
		}
		s += "*"
	}
	return s
}

// backoff: `9f3e21d0 3×`, the failed desired sha and its attempts, while it backs off.
func (e *Env) backoff() string {
	if !e.BackingOff() {
		return ""
	}
	return fmt.Sprintf("%s %d×", verdict.Short(*e.FailedSha), e.Attempts)
}

// failure: `PULL_FAILED@9f3e21d0 2×`, the last failure's code, sha and attempts.
func (e *Env) failure() string {
	f := e.LastFailure
	if f == nil {
		return ""
	}
	return fmt.Sprintf("%s@%s %d×", f.Code, verdict.Short(f.Sha), f.Attempts)
}

func exitCode(c *int) string {
	if c == nil {
		return ""
	}
	return fmt.Sprint(*c)
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

// oneLine folds whitespace: a multi-line detail stays on its row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
