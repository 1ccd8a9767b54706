package report

import (
	"cmp"
	"fmt"
	"path"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Laggard: no check-in running the expected version since the gate started.
const Laggard = "LAGGARD"

// Gate is the result of `fleetctl gate`: only what blocks a rollout.
type Gate struct {
	Schema int    `json:"schema"`
	Now    string `json:"now"`
	Pass   bool   `json:"pass"`
	// Envs counts the envs judged (allowed ones excluded).
	Envs          int    `json:"envs"`
	MinVersion    string `json:"min_version,omitempty"`
	ExpectVersion string `json:"expect_version,omitempty"`
	// StartedAt is tenancy's clock at the first listing, what --expect-version counts from.
	StartedAt string `json:"started_at,omitempty"`
	// Matched says what selected the envs (`--env 'env-prod-*' --site osg`), for a gate that judged none.
	Matched  string    `json:"matched,omitempty"`
	TimedOut bool      `json:"timed_out"`
	Allowed  []string  `json:"allowed"`
	Blockers []Blocker `json:"blockers"`
}

// Blocker is one env that fails the gate.
type Blocker struct {
	EnvID   string   `json:"env_id"`
	Site    string   `json:"site"`
	Verdict string   `json:"verdict"`
	Reasons []string `json:"reasons"`
	// Lagging is set when the env has not checked in with the expected version since the start.
	Lagging       bool    `json:"lagging"`
	AgentVersion  string  `json:"agent_version"`
	LastCheckinAt *string `json:"last_checkin_at"`
	CheckinAgeS   *int64  `json:"checkin_age_s"`
	// Why is the next step of the verdict, or why the env lags.
	Why string `json:"why"`
	// BackingOff: the desired sha failed and waits for its next try; no gate wait unblocks it.
	BackingOff    bool    `json:"backing_off"`
	NextAttemptAt *string `json:"next_attempt_at"`

	// short is Why as the 120-column table shows it.
	short string
	// Held: a human asked the box to wait (hold says who, why, until when); Deferred: the desired
	// sha waits for the box's apply window until DeferredUntil. Neither is a failure.
	Held          bool           `json:"held"`
	Hold          *protocol.Hold `json:"hold"`
	Deferred      bool           `json:"deferred"`
	DeferredUntil *string        `json:"deferred_until"`
}

// GateOptions say what the gate requires.
type GateOptions struct {
	// Allow lists env ids (or path.Match globs) whose state does not block.
	Allow         []string
	MinVersion    string
	ExpectVersion string
	// StartedAt is the tenancy clock of the gate's first listing; needed with ExpectVersion.
	StartedAt time.Time
	TimedOut  bool
	// Matched says what selected the envs, for the line of a gate that judged none.
	Matched string
}

// Allowed reports whether env is exempted by one of the patterns.
func Allowed(env string, allow []string) bool {
	for _, p := range allow {
		if ok, _ := path.Match(p, env); ok {
			return true
		}
	}
	return false
}

// LagReason says why env has not checked in since start (tenancy's clock) running expect; "" when it has.
func LagReason(e Env, expect string, start time.Time) string {
	if e.Verdict == string(verdict.OrphanIdentity) {
		return ""
	}
	if e.LastCheckinAt == nil {
		return "never checked in"
	}
	at, err := time.Parse(time.RFC3339, *e.LastCheckinAt)
	if err != nil {
		return "unreadable last check-in"
	}
	if e.AgentVersion != expect {
		return fmt.Sprintf("running %s, expected %s", cmp.Or(e.AgentVersion, "no known version"), expect)
	}
	if at.Before(start) {
		return fmt.Sprintf("no check-in since the gate started (last %s before it)", verdict.Human(start.Sub(at)))
	}
	return ""
}

// NewGate picks the blockers out of a status document.
func NewGate(doc *Document, o GateOptions) *Gate {
	g := &Gate{Schema: Schema, Now: doc.Now, MinVersion: o.MinVersion, ExpectVersion: o.ExpectVersion,
		TimedOut: o.TimedOut, Matched: o.Matched, Allowed: []string{}, Blockers: []Blocker{}}
	if o.ExpectVersion != "" && !o.StartedAt.IsZero() {
		g.StartedAt = o.StartedAt.UTC().Format(time.RFC3339)
	}
	for _, e := range doc.Envs {
		if Allowed(e.EnvID, o.Allow) {
			g.Allowed = append(g.Allowed, e.EnvID)
			continue
		}
		g.Envs++
		lag := ""
		if o.ExpectVersion != "" {
			lag = LagReason(e, o.ExpectVersion, o.StartedAt)
		}
		if e.Verdict == string(verdict.OK) && lag == "" {
			continue
		}
		b := Blocker{EnvID: e.EnvID, Site: e.Site, Verdict: e.Verdict, Reasons: append([]string{}, e.Reasons...),
			Lagging: lag != "", AgentVersion: e.AgentVersion, LastCheckinAt: e.LastCheckinAt, CheckinAgeS: e.CheckinAgeS, Why: e.NextStep,
			short: e.short}
		if e.BackingOff() {
			b.BackingOff, b.NextAttemptAt = true, e.NextAttemptAt
		}
		if e.Held() {
			b.Held, b.Hold = true, e.Hold
		}
		if e.Deferred() {
			b.Deferred, b.DeferredUntil = true, e.DeferredUntil
		}
		if lag != "" {
			b.Reasons = append(b.Reasons, Laggard)
			if e.Verdict == string(verdict.OK) {
				b.Verdict, b.Why, b.short = Laggard, lag, ""
			}
		}
		g.Blockers = append(g.Blockers, b)
	}
	// A gate that judged nothing (a glob or site matching no env) is closed: it proved nothing.
	g.Pass = len(g.Blockers) == 0 && g.Envs > 0
	return g
}

// Table lays the gate out: the blockers only, then one line with the outcome.
func (g *Gate) Table(wide bool) render.Table {
	t := render.Table{Header: []string{"ENV", "SITE", "BLOCKER", "AGENT", "LAST CHECK-IN", "WHY"}}
	if wide {
		t.Header = []string{"ENV", "SITE", "BLOCKER", "REASONS", "AGENT", "LAST CHECK-IN", "WHY"}
	}
	shortened := false
	for _, b := range g.Blockers {
		age := "never"
		if b.CheckinAgeS != nil {
			age = verdict.Human(time.Duration(*b.CheckinAgeS)*time.Second) + " ago"
		}
		if b.Verdict == string(verdict.OrphanIdentity) {
			age = ""
		}
		why := oneLine(b.Why)
		row := []string{b.EnvID, b.Site, b.Verdict, b.AgentVersion, age, cmp.Or(b.short, why)}
		if wide {
			row = []string{b.EnvID, b.Site, b.Verdict, strings.Join(b.Reasons, ","), b.AgentVersion, age, why}
		}
		if b.short != "" && b.short != why {
			shortened = true
		}
		t.Rows = append(t.Rows, row)
	}
	t.Lines = []string{g.line()}
	t.Colour = map[int]func(string) string{2: func(v string) string {
		if v == Laggard {
			return "33"
		}
		return VerdictColour(v)
	}}
	if !wide && (fitLastColumn(&t, TableWidth) || shortened) {
		t.Lines = append(t.Lines, "WHY in short: fleetctl describe ENV, or -o wide, gives it whole")
	}
	return t
}

func (g *Gate) line() string {
	allowed := ""
	if len(g.Allowed) > 0 {
		allowed = fmt.Sprintf(" (%d allowed)", len(g.Allowed))
	}
	if g.Envs == 0 {
		return fmt.Sprintf("gate: FAIL — no env matched %s%s: a gate that judged nothing passes nothing", cmp.Or(g.Matched, "(tenancy lists none)"), allowed)
	}
	if g.Pass {
		s := fmt.Sprintf("gate: PASS — %d envs OK%s", g.Envs, allowed)
		switch {
		case g.ExpectVersion != "" && g.StartedAt != "":
			s = fmt.Sprintf("gate: PASS — %d envs OK, all running %s since %s%s", g.Envs, g.ExpectVersion, g.StartedAt, allowed)
		case g.ExpectVersion != "":
			s = fmt.Sprintf("gate: PASS — %d envs OK, all running %s%s", g.Envs, g.ExpectVersion, allowed)
		}
		return s
	}
	s := fmt.Sprintf("gate: FAIL — %d of %d envs block%s", len(g.Blockers), g.Envs, allowed)
	if n := g.BackingOff(); n > 0 {
		s += fmt.Sprintf("; %d backing off a failed release", n)
	}
	if n := g.Held(); n > 0 {
		s += fmt.Sprintf("; %d held by a human (not a failure: monky-deployd unhold ends it)", n)
	}
	if n := g.Deferred(); n > 0 {
		s += fmt.Sprintf("; %d deferred to an apply window (not a failure)", n)
	}
	if g.ExpectVersion != "" {
		s += fmt.Sprintf("; %d not yet on %s", g.Lagging(), g.ExpectVersion)
		if g.TimedOut {
			s += " when the wait ran out"
		}
	}
	return s
}

// BackingOff counts blockers backing off: no wait unblocks them, a new bundle or kit re-run does.
func (g *Gate) BackingOff() int { return g.count(func(b Blocker) bool { return b.BackingOff }) }

// Held counts blockers a human holds.
func (g *Gate) Held() int { return g.count(func(b Blocker) bool { return b.Held }) }

// Deferred counts blockers whose desired sha waits for an apply window.
func (g *Gate) Deferred() int { return g.count(func(b Blocker) bool { return b.Deferred }) }

// Lagging counts blockers not yet on --expect-version.
func (g *Gate) Lagging() int { return g.count(func(b Blocker) bool { return b.Lagging }) }

func (g *Gate) count(f func(Blocker) bool) int {
	n := 0
	for _, b := range g.Blockers {
		if f(b) {
			n++
		}
	}
	return n
}
