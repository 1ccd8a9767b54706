// Package exporter turns fleetctl's status document into per-env Prometheus series (env and site
// labels, no free text), served from a view refreshed at most once per interval.
package exporter

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Namespace prefixes every series.
const Namespace = "monky_fleet"

// results label monky_fleet_env_last_result; anything else is "other": no label set grows unseen.
var results = map[string]bool{
	protocol.ResultApplied: true, protocol.ResultHealthy: true, protocol.ResultUnhealthy: true,
	protocol.ResultFailed: true, protocol.ResultRefused: true, protocol.ResultDown: true,
}

var envLabels = []string{"env", "site"}

func newDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// The per-env series; every verdict of verdict.All() gets one, a new one without a change here.
var (
	descVerdict  = newDesc("env_verdict", "1 for the env's verdict (the one fleetctl status prints), 0 for every other verdict.", "env", "site", "verdict")
	descAge      = newDesc("env_checkin_age_seconds", "Seconds since the env's agent last checked in, on tenancy's clock (absent: never).", envLabels...)
	descStale    = newDesc("env_stale_after_seconds", "The check-in age beyond which the env's agent is stale: max(3 × its interval, 3m), or --stale.", envLabels...)
	descInterval = newDesc("env_checkin_interval_seconds", "The check-in interval the env's agent declared.", envLabels...)
	descOnline   = newDesc("env_mesh_online", "1 when the env's host identity is online on the mesh (absent: no identity, or the controller did not say).", envLabels...)
	descMissing  = newDesc("env_identity_missing_attributes", "Required role attributes the env's identity lacks (#monky-deploy-agent, #openbao-client).", envLabels...)
	descEnabled  = newDesc("env_timer_enabled", "1 when the agent's last check-in said its systemd timer is enabled (absent: unknown).", envLabels...)
	descActive   = newDesc("env_timer_active", "1 when the agent's last check-in said its systemd timer is active (absent: unknown).", envLabels...)
	descAgent    = newDesc("env_agent_info", "The agent version the env last reported.", "env", "site", "version")
	descResult   = newDesc("env_last_result", "1 for the result of the env's last report.", "env", "site", "result")
	descDrift    = newDesc("env_drift_seconds", "Seconds the desired release has differed from the applied one (0 when they agree).", envLabels...)
	descTTL      = newDesc("env_token_ttl_seconds", "Seconds the agent's OpenBao token had left at its last check-in.", envLabels...)
	descAttempts = newDesc("env_deploy_attempts", "Failed applies of the env's desired sha while it backs off (absent: not backing off).", envLabels...)
	descNextTry  = newDesc("env_deploy_next_attempt_timestamp_seconds", "When the env's agent tries its backing-off desired sha next (Unix time; absent: not backing off or unknown).", envLabels...)
	descEnvs     = newDesc("envs", "Envs in the view, by verdict.", "verdict")
	// issue 21: the identity certificate's horizon.
	descCertExpiry = newDesc("env_identity_cert_expiry_timestamp_seconds", "When the env's ziti identity certificate expires (Unix time): the controller's cert authenticator, else the agent's check-in (absent: neither knows).", envLabels...)

	// Operator truth (issue 20): why a stale env is stale, and why its deploy failed. An alert
	// cannot compute the next step; these carry the evidence, and fleetctl describe ENV the step.
	descCause   = newDesc("env_stale_cause", "1 for the evidence behind a SILENT or OFFLINE env's next step (cause: "+strings.Join(verdict.Causes(), ", ")+"); absent when the env is not stale.", "env", "site", "cause")
	descFailure = newDesc("env_last_failure_info", "The last failed or refused deploy the env's agent reported, until a success makes it moot: its sha and code (refusal code or failed step); the value is its attempts.", "env", "site", "sha", "code")
	descFailAt  = newDesc("env_last_failure_timestamp_seconds", "When that deploy failed (Unix time; absent: none).", envLabels...)
	// Issue 22: a human's hold and an apply-window deferral, as the env's agent last checked in.
	descHoldSince = newDesc("env_hold_since_timestamp_seconds", "When the hold on the env's box (monky-deployd hold) began (Unix time; absent: not held).", envLabels...)
	descHoldUntil = newDesc("env_hold_until_timestamp_seconds", "When the hold on the env's box ends by itself (Unix time; absent: not held).", envLabels...)
	descDeferred  = newDesc("env_deferred_until_timestamp_seconds", "Until when the env's desired release waits for the box's apply window (Unix time; absent: nothing waits).", envLabels...)
)

// View is one complete reading of the fleet and how it went.
type View struct {
	Doc *report.Document
	// Now is tenancy's clock at the reading (Doc.Now, parsed).
	Now time.Time
}

// NewView parses doc's clock.
func NewView(doc *report.Document) (View, error) {
	now, err := time.Parse(time.RFC3339, doc.Now)
	if err != nil {
		return View{}, fmt.Errorf("exporter: the document's now %q: %w", doc.Now, err)
	}
	return View{Doc: doc, Now: now}, nil
}

// envDescs are the per-env families, in the order they are written.
var envDescs = []*prometheus.Desc{descVerdict, descAge, descStale, descInterval, descOnline, descMissing,
	descEnabled, descActive, descAgent, descResult, descDrift, descTTL, descAttempts, descNextTry, descHoldSince, descHoldUntil, descDeferred, descEnvs,
	descCause, descFailure, descFailAt, descCertExpiry}

// envCollector emits one family's per-env series of envs [from, to) of a view: gathering all
// at once held every series of 10,000 envs in memory, several times the page's size, and one
// family whole (env_verdict: 15 series an env) still held 150,000.
type envCollector struct {
	v        View
	only     *prometheus.Desc
	from, to int
	skip     []bool // envs whose row an earlier one of the same name already wrote
}

func (c envCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range envDescs {
		if c.only == nil || c.only == d {
			ch <- d
		}
	}
}

func (c envCollector) Collect(ch chan<- prometheus.Metric) {
	if c.v.Doc == nil {
		return
	}
	want := func(d *prometheus.Desc) bool { return c.only == nil || c.only == d }
	all := verdict.All()
	for i := c.from; i < c.to; i++ {
		e := &c.v.Doc.Envs[i]
		env, site := label(e.EnvID), label(e.Site)
		if c.skip[i] {
			continue
		}
		g := func(d *prometheus.Desc, v float64, extra ...string) {
			if want(d) {
				ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{env, site}, extra...)...)
			}
		}
		gb := func(d *prometheus.Desc, b *bool) {
			if b != nil {
				g(d, b2f(*b))
			}
		}
		if want(descVerdict) {
			for _, v := range all {
				g(descVerdict, b2f(e.Verdict == string(v)), string(v))
			}
		}
		gb(descOnline, e.MeshOnline)
		if c := e.Cert; c != nil && want(descCertExpiry) {
			if at, err := time.Parse(time.RFC3339, c.NotAfter); err == nil {
				g(descCertExpiry, float64(at.Unix()))
			}
		}
		if e.Verdict == string(verdict.OrphanIdentity) {
			continue // tenancy knows nothing else of it
		}
		if e.CheckinAgeS != nil {
			g(descAge, float64(*e.CheckinAgeS))
		}
		g(descStale, float64(e.StaleAfterS))
		g(descInterval, float64(e.CheckinIntervalS))
		if e.IdentityID != nil {
			g(descMissing, float64(len(e.MissingAttributes)))
		}
		if t := e.Timer; t != nil {
			gb(descEnabled, t.Enabled)
			gb(descActive, t.Active)
		}
		if e.AgentVersion != "" {
			g(descAgent, 1, label(e.AgentVersion))
		}
		if e.LastResult != "" {
			r := e.LastResult
			if !results[r] {
				r = "other"
			}
			g(descResult, 1, r)
		}
		if want(descDrift) {
			g(descDrift, c.drift(e))
		}
		if e.TokenTTLS != nil {
			g(descTTL, float64(*e.TokenTTLS))
		}
		if e.StaleCause != "" {
			g(descCause, 1, label(e.StaleCause))
		}
		if f := e.LastFailure; f != nil {
			g(descFailure, float64(f.Attempts), label(verdict.Short(f.Sha)), label(f.Code))
			if at, err := time.Parse(time.RFC3339, f.At); err == nil {
				g(descFailAt, float64(at.UnixNano())/1e9)
			}
		}
		holdSeries(e, g)
		if e.BackingOff() {
			g(descAttempts, float64(e.Attempts))
			if e.NextAttemptAt != nil {
				if at, err := time.Parse(time.RFC3339, *e.NextAttemptAt); err == nil {
					g(descNextTry, float64(at.UnixNano())/1e9)
				}
			}
		}
	}
	if !want(descEnvs) || c.from != 0 {
		return
	}
	for _, v := range all {
		ch <- prometheus.MustNewConstMetric(descEnvs, prometheus.GaugeValue, float64(c.v.Doc.Summary[string(v)]), string(v))
	}
}

// holdSeries writes the hold of a HELD env and the deferral of a DEFERRED one (issue 22).
func holdSeries(e *report.Env, g func(d *prometheus.Desc, v float64, extra ...string)) {
	stamp := func(d *prometheus.Desc, s string) {
		if at, err := time.Parse(time.RFC3339, s); err == nil {
			g(d, float64(at.UnixNano())/1e9)
		}
	}
	if h := e.Hold; h != nil && slices.Contains(e.Reasons, string(verdict.Held)) {
		stamp(descHoldSince, h.Since)
		stamp(descHoldUntil, h.Until)
	}
	if e.DeferredUntil != nil && slices.Contains(e.Reasons, string(verdict.Deferred)) {
		stamp(descDeferred, *e.DeferredUntil)
	}
}

// drift is how long desired has differed from applied, on tenancy's clock.
func (c envCollector) drift(e *report.Env) float64 {
	if e.DesiredSha == "" || e.DesiredSha == e.AppliedSha || e.DesiredAt == nil {
		return 0
	}
	at, err := time.Parse(time.RFC3339, *e.DesiredAt)
	if err != nil {
		return 0
	}
	return max(c.v.Now.Sub(at).Seconds(), 0)
}

// maxLabel bounds a label from tenancy's answer: a hostile agent reports its own version.
const maxLabel = 128

// label is s as a label value: valid UTF-8, at most maxLabel bytes (cut on a rune, marked "…").
func label(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxLabel {
		return s
	}
	return clip.Head(s, maxLabel-len("…"))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// chunkEnvs is how many envs' series of one family are gathered at once: 250 envs of
// env_verdict are 3,750 metrics and their text, a few MB (1,000 made the exporter's live heap
// jump from ~19 to 31 MB while it wrote a view).
const chunkEnvs = 250

// encode writes each collector's families, each gathered from its own registry in turn, so one's
// series are garbage before the next; the per-env families chunk by chunk, one family's chunks
// one after the other (a family's samples stay together, its HELP and TYPE written once).
func encode(w io.Writer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := encodeChunks(w, c); err != nil {
			return err
		}
	}
	return nil
}

func encodeChunks(buf io.Writer, c prometheus.Collector) error {
	chunks := []prometheus.Collector{c}
	if ec, ok := c.(envCollector); ok && ec.v.Doc != nil {
		chunks = chunks[:0]
		for from := 0; from < len(ec.v.Doc.Envs) || from == 0; from += chunkEnvs {
			part := ec
			part.from, part.to = from, min(from+chunkEnvs, len(ec.v.Doc.Envs))
			chunks = append(chunks, part)
		}
	}
	headerDone := map[string]bool{}
	for _, chunk := range chunks {
		reg := prometheus.NewRegistry()
		if err := reg.Register(chunk); err != nil {
			return fmt.Errorf("exporter: %w", err)
		}
		mfs, err := reg.Gather()
		if err != nil {
			return fmt.Errorf("exporter: %w", err)
		}
		for _, mf := range mfs {
			if !headerDone[mf.GetName()] {
				headerDone[mf.GetName()] = true
				if _, err := expfmt.MetricFamilyToText(buf, mf); err != nil {
					return fmt.Errorf("exporter: encode: %w", err)
				}
				continue
			}
			// A later chunk of a family already begun: its samples only. The encoder always
			// leads with the family's TYPE line (and HELP, cleared here).
			mf.Help = nil
			var part bytes.Buffer
			if _, err := expfmt.MetricFamilyToText(&part, mf); err != nil {
				return fmt.Errorf("exporter: encode: %w", err)
			}
			samples, ok := bytes.CutPrefix(part.Bytes(), []byte("# TYPE "+mf.GetName()+" "))
			if !ok {
				return fmt.Errorf("exporter: encode: %s: the encoder did not lead with the TYPE line", mf.GetName())
			}
			_, samples, _ = bytes.Cut(samples, []byte("\n"))
			if _, err := buf.Write(samples); err != nil {
				return fmt.Errorf("exporter: encode: %w", err)
			}
		}
	}
	return nil
}

// envFamilies are v's per-env collectors, a family each.
func envFamilies(v View) []prometheus.Collector {
	var skip []bool
	if v.Doc != nil {
		skip = make([]bool, len(v.Doc.Envs))
		seen := make(map[string]bool, len(v.Doc.Envs))
		for i := range v.Doc.Envs {
			env := label(v.Doc.Envs[i].EnvID)
			// An orphan named after an env with another identity: the env's own row comes
			// first, and a second series with the same labels would fail the whole scrape.
			skip[i] = seen[env]
			seen[env] = true
		}
	}
	cs := make([]prometheus.Collector, len(envDescs))
	for i, d := range envDescs {
		cs[i] = envCollector{v: v, only: d, skip: skip}
		if v.Doc != nil {
			cs[i] = envCollector{v: v, only: d, skip: skip, to: len(v.Doc.Envs)}
		}
	}
	return cs
}

// Encode is the fleet's series for one reading: what `fleetctl status -o prometheus` prints.
func Encode(doc *report.Document) ([]byte, error) {
	v, err := NewView(doc)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := encode(&buf, envFamilies(v)...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
