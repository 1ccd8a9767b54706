// Package verdict decides what one env's state means and the next step: a pure function of the
// two sources, tenancy's clock and the thresholds (docs/FLEET.md, "Verdicts").
package verdict

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Verdict is the state of one env.
type Verdict string

// Verdicts, in the order they are tried: the first that applies wins.
const (
	NoIdentity     Verdict = "NO_IDENTITY"
	AttrsMissing   Verdict = "ATTRS_MISSING"
	NeverCheckedIn Verdict = "NEVER_CHECKED_IN"
	Silent         Verdict = "SILENT"
	Offline        Verdict = "OFFLINE"
	Failing        Verdict = "FAILING"
	// BackingOff: serving the previous release, healthy, while the failed desired sha waits.
	BackingOff Verdict = "BACKOFF"
	// Held: a human asked the box to wait (monky-deployd hold); it reports, and changes nothing.
	Held Verdict = "HELD"
	// Deferred: the desired sha waits for the box's apply window.
	Deferred Verdict = "DEFERRED"
	Drift    Verdict = "DRIFT"
	Outdated Verdict = "OUTDATED"
	OK       Verdict = "OK"
	// OrphanIdentity: a monky-host.* identity tenancy does not know (retired backend, typo).
	OrphanIdentity Verdict = "ORPHAN_IDENTITY"
)

// All lists every verdict in table order (OK, then ORPHAN_IDENTITY, last).
func All() []Verdict {
	return []Verdict{NoIdentity, AttrsMissing, NeverCheckedIn, Silent, Offline, Failing, BackingOff, Held, Deferred, Drift, Outdated, OK, OrphanIdentity}
}

// Rank is v's severity, the worst 0: its place in All(), the order `status` lists envs in.
// A verdict All() does not know sorts after every one it knows.
func Rank(v Verdict) int {
	for i, w := range All() {
		if w == v {
			return i
		}
	}
	return len(All())
}

// Defaults of Thresholds.
const (
	DefaultDrift    = 15 * time.Minute
	minStale        = 3 * time.Minute
	defaultInterval = 60 * time.Second
)

// Agent is what tenancy knows of an env's agent, times already parsed.
type Agent struct {
	EnvID       string
	Site        string
	Version     string
	LastCheckin *time.Time
	// Interval is the check-in interval the agent declared (0: the default, 60 s).
	Interval   time.Duration
	DesiredSha string
	DesiredAt  *time.Time
	AppliedSha string
	LastResult string
	LastDetail string
	// TimerEnabled is nil when the agent could not tell.
	TimerEnabled *bool
	// Backoff is what the agent's last check-in said of a failing desired sha; nil when none.
	Backoff *Backoff

	// The evidence a stale env's next step is decided from (stale.go), and the last failure.
	// TimerActive is nil when the agent could not tell.
	TimerActive *bool
	// LastResultAt is when the last report arrived (nil: none).
	LastResultAt *time.Time
	// LastAction is what tenancy answered the last check-in with ("" when it did not say).
	LastAction string
	// ApplyTimeout is how long an apply the last check-in started may run (0: the unit's hour).
	ApplyTimeout time.Duration
	// LastExitCode is the exit code of the tick before the last check-in (nil: unknown).
	LastExitCode *int
	// Transport is how the box reaches the mesh (sdk, proxy, system; "" unknown).
	Transport string
	// LastFailure is the last failed or refused deploy the agent reported; nil when none.
	LastFailure *Failure
	// Hold and DeferredUntil are what the agent's last check-in said of a human's hold and of a
	// desired sha waiting for its apply window; nil when none.
	Hold          *Hold
	DeferredUntil *time.Time
}

// Failure is the last failed or refused deploy of an env, as its agent last checked in.
type Failure struct {
	Sha, Code, Detail string
	At                *time.Time
	Attempts          int
}

// Hold is a human's "wait" on a box.
type Hold struct {
	Reason, By   string
	Since, Until time.Time
}

// Backoff is a desired sha whose apply failed and waits for its next try.
type Backoff struct {
	FailedSha string
	Attempts  int
	// NextAttemptAt is nil when the agent did not say.
	NextAttemptAt *time.Time
	// RevertedTo is the release brought back ("" when none); RevertHealthy nil when unknown.
	RevertedTo    string
	RevertHealthy *bool
}

// Mesh is what the ziti controller knows of the env's identity.
type Mesh struct {
	Name string
	// MissingAttributes lists the required role attributes the identity lacks.
	MissingAttributes []string
	// Online is hasEdgeRouterConnection; nil when the controller did not say.
	Online *bool
}

// Input joins the two sources for one env; either side is nil when that source lacks the env.
type Input struct {
	Agent *Agent
	Mesh  *Mesh
}

// Thresholds tune the rules.
type Thresholds struct {
	// Stale 0 means per env, StaleAfter: a host is late against its own deadline.
	Stale time.Duration
	// Drift is how long desired may differ from applied; 0 means 15 min.
	Drift time.Duration
	// MinVersion, when set, makes older agents OUTDATED.
	MinVersion *Version
}

// Result is the verdict of one env.
type Result struct {
	Verdict Verdict
	// Reasons lists every verdict that applies, in table order (OK has none).
	Reasons  []Verdict
	NextStep string
	// Age is how long ago, on tenancy's clock, the agent last checked in; nil when never.
	Age *time.Duration
	// StaleAfter is the age threshold that applied to this env.
	StaleAfter time.Duration
	Stale      bool
	// Cause names the evidence behind a SILENT or OFFLINE env's next step (stale.go); "" otherwise.
	Cause string
	// Short is the next step as the 120-column table shows it (short.go); "" when none.
	Short string
}

// StaleAfter is the default staleness threshold for an agent checking in every interval.
func StaleAfter(interval time.Duration) time.Duration {
	if interval <= 0 {
		interval = defaultInterval
	}
	return max(3*interval, minStale)
}

// Evaluate judges one env at tenancy's now, never the operator's: a laptop ten minutes off must
// neither invent nor hide a silent agent.
func Evaluate(in Input, now time.Time, th Thresholds) Result {
	if in.Agent == nil {
		name := ""
		if in.Mesh != nil {
			name = in.Mesh.Name
		}
		r := Result{
			Verdict:  OrphanIdentity,
			Reasons:  []Verdict{OrphanIdentity},
			NextStep: fmt.Sprintf("tenancy has no backend for identity %s: onboard the env, or delete the identity", name),
		}
		r.Short = shortStep(in, r, now)
		return r
	}
	a := in.Agent
	drift := th.Drift
	if drift <= 0 {
		drift = DefaultDrift
	}
	r := Result{StaleAfter: th.Stale}
	if r.StaleAfter <= 0 {
		r.StaleAfter = StaleAfter(a.Interval)
	}
	if a.LastCheckin != nil {
		age := max(now.Sub(*a.LastCheckin), 0)
		r.Age = &age
		r.Stale = age > r.StaleAfter
	}
	online := in.Mesh != nil && in.Mesh.Online != nil && *in.Mesh.Online

	steps := map[Verdict]string{}
	add := func(v Verdict, step string) {
		r.Reasons = append(r.Reasons, v)
		steps[v] = step
	}
	if in.Mesh == nil {
		add(NoIdentity, fmt.Sprintf("no ziti identity monky-host.%s: re-run fleetctl onboard %s --site %s", a.EnvID, a.EnvID, cmp.Or(a.Site, "SITE")))
	} else if len(in.Mesh.MissingAttributes) > 0 {
		add(AttrsMissing, fmt.Sprintf("identity lacks %s: fleetctl repair-attrs %s", hashList(in.Mesh.MissingAttributes), a.EnvID))
	}
	if a.LastCheckin == nil {
		add(NeverCheckedIn, "never checked in: install kit not run, or the first tick is failing (journalctl -u monky-deployd)")
	}
	if r.Stale {
		cause, step := staleStep(a, online, *r.Age)
		r.Cause = cause
		if online {
			add(Silent, step)
		} else {
			add(Offline, step)
		}
	}
	bo := a.Backoff
	if bo != nil && (bo.FailedSha == "" || bo.FailedSha != a.DesiredSha) {
		bo = nil // about a sha tenancy no longer wants
	}
	failing := false
	switch a.LastResult {
	case "failed", "refused", "unhealthy":
		failing = !servesPrevious(a, bo)
	}
	if failing {
		d := oneLine(a.LastDetail)
		if d == "" {
			d = "(no detail)"
		}
		// Whole: the table fits it to its column, the JSON and describe carry all of it.
		step := a.LastResult + ": " + d
		if bo != nil {
			step += "; " + backoffPhrase(a, bo, now)
		}
		add(Failing, step)
	} else if bo != nil && !servesPrevious(a, bo) {
		// Backing off with no release of its own serving (a first deploy that failed).
		failing = true
		add(Failing, "no release serves: "+backoffPhrase(a, bo, now))
	}
	if bo != nil && !failing {
		add(BackingOff, backoffPhrase(a, bo, now)+": the box serves the previous release; fix the failed one and publish a new bundle (a kit re-run retries at once)")
	}
	holdAndDeferral(a, now, add)
	if a.DesiredSha != "" && a.DesiredSha != a.AppliedSha && a.DesiredAt != nil && now.Sub(*a.DesiredAt) > drift {
		step := fmt.Sprintf("desired %s not applied for %s: look at the last result and the agent's journal",
			Short(a.DesiredSha), Human(now.Sub(*a.DesiredAt)))
		if f := a.LastFailure; f != nil && f.Sha == a.DesiredSha {
			step = fmt.Sprintf("desired %s not applied for %s: it failed %s", Short(a.DesiredSha), Human(now.Sub(*a.DesiredAt)), failureWords(f))
		}
		add(Drift, step)
	}
	if th.MinVersion != nil {
		v, err := ParseVersion(a.Version)
		switch {
		case err != nil:
			add(Outdated, fmt.Sprintf("agent version %q unknown, %s required: upgrade monky-deployd", a.Version, th.MinVersion))
		case v.Compare(*th.MinVersion) < 0:
			add(Outdated, fmt.Sprintf("agent %s < %s: upgrade monky-deployd", a.Version, th.MinVersion))
		}
	}
	if len(r.Reasons) == 0 {
		r.Verdict = OK
		return r
	}
	r.Verdict = r.Reasons[0]
	r.NextStep = steps[r.Verdict]
	r.Short = shortStep(in, r, now)
	return r
}

// holdAndDeferral adds HELD while a hold runs (by tenancy's clock), and DEFERRED while the
// desired sha waits for the box's apply window: both come before DRIFT, which stays a reason.
func holdAndDeferral(a *Agent, now time.Time, add func(Verdict, string)) {
	if h := a.Hold; h != nil && h.Until.After(now) {
		add(Held, fmt.Sprintf("held by %s until %s (in %s): %s; monky-deployd unhold on the box ends it",
			h.By, h.Until.UTC().Format("2006-01-02T15:04Z"), Human(h.Until.Sub(now)), oneLine(h.Reason)))
	}
	if d := a.DeferredUntil; d != nil && d.After(now) && a.DesiredSha != "" && a.DesiredSha != a.AppliedSha {
		add(Deferred, fmt.Sprintf("desired %s waits for the box's apply window until %s (in %s); a check-in answer with ignore_window applies it at once",
			Short(a.DesiredSha), d.UTC().Format("2006-01-02T15:04Z"), Human(d.Sub(now))))
	}
}

// servesPrevious: a backing-off box runs its reverted-to release, healthy (heartbeat or revert says so).
func servesPrevious(a *Agent, bo *Backoff) bool {
	if bo == nil || a.AppliedSha == "" {
		return false
	}
	switch a.LastResult {
	case "healthy", "applied":
		return true
	case "failed":
		return bo.RevertedTo != "" && bo.RevertHealthy != nil && *bo.RevertHealthy
	}
	return false
}

// backoffPhrase: `9f3e21d0 failed 3× (UNHEALTHY: not healthy after 5m0s: api: exited), reverted
// to 7a10c4e2 (healthy), next try in 8m`; the reason is the agent's last failure of that sha.
func backoffPhrase(a *Agent, bo *Backoff, now time.Time) string {
	s := fmt.Sprintf("%s failed %d×", Short(bo.FailedSha), bo.Attempts)
	if f := a.LastFailure; f != nil && f.Sha == bo.FailedSha {
		s += " (" + f.Code + ": " + cmp.Or(oneLine(f.Detail), "no detail") + ")"
	}
	switch {
	case bo.RevertedTo != "" && bo.RevertHealthy != nil && *bo.RevertHealthy:
		s += ", reverted to " + Short(bo.RevertedTo) + " (healthy)"
	case bo.RevertedTo != "" && bo.RevertHealthy != nil:
		s += ", reverted to " + Short(bo.RevertedTo) + " (unhealthy)"
	case bo.RevertedTo != "":
		s += ", reverting to " + Short(bo.RevertedTo)
	default:
		s += ", not reverted"
	}
	switch {
	case bo.NextAttemptAt == nil:
	case bo.NextAttemptAt.After(now):
		s += ", next try in " + Human(bo.NextAttemptAt.Sub(now))
	default:
		s += ", next try due"
	}
	return s
}

// Human writes a duration the way the table shows ages: 45s, 12m, 3h5m, 2d4h.
func Human(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return twoUnits(int(d.Hours()), "h", int(d.Minutes())%60, "m")
	default:
		return twoUnits(int(d.Hours())/24, "d", int(d.Hours())%24, "h")
	}
}

func twoUnits(a int, au string, b int, bu string) string {
	if b == 0 {
		return fmt.Sprintf("%d%s", a, au)
	}
	return fmt.Sprintf("%d%s%d%s", a, au, b, bu)
}

// Short is the 8-character prefix a table shows of a sha.
func Short(sha string) string {
	if len(sha) > 8 {
		return sha[:8]
	}
	return sha
}

func hashList(attrs []string) string {
	out := make([]string, len(attrs))
	for i, a := range attrs {
		out[i] = "#" + a
	}
	return strings.Join(out, " and ")
}

// oneLine folds whitespace, so that a multi-line compose error stays on its table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
