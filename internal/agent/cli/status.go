package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

type statusOptions struct {
	json bool
}

// statusDoc is `status --json`. Fields are only ever added; Schema changes when one is not.
type statusDoc struct {
	Schema         int             `json:"schema"`
	AgentVersion   string          `json:"agent_version"`
	Config         string          `json:"config"`
	EnvID          string          `json:"env_id"`
	Site           string          `json:"site"`
	Transport      string          `json:"transport"`
	Tenancy        string          `json:"tenancy"`
	Bao            string          `json:"bao"`
	StateDir       string          `json:"state_dir"`
	AppliedSha     string          `json:"applied_sha"`
	CurrentRelease string          `json:"current_release"`
	LastResult     string          `json:"last_result"`
	LastDetail     string          `json:"last_detail"`
	LastCheckinAt  *time.Time      `json:"last_checkin_at"`
	LastApplyAt    *time.Time      `json:"last_apply_at"`
	TokenSource    string          `json:"token_source"`
	TokenTTLSec    *int64          `json:"token_ttl_s"`
	History        []string        `json:"history"`
	Timer          *protocol.Timer `json:"timer"`
	// Backoff is the failing desired sha and its next try; null when none is failing.
	Backoff *state.DeployBackoff `json:"deploy_backoff"`
	// BackoffNote is Backoff in words, as the journal writes it.
	BackoffNote string `json:"-"`
	// SupersededToken is the token tenancy refused, kept aside; null when there is none.
	SupersededToken *supersededToken `json:"superseded_token"`

	// LastFailure is the last failed or refused deploy, until a success makes it moot; null: none.
	LastFailure *state.Failure `json:"last_failure"`
	// LastExitCode is the exit code of the last tick that ran; null until one was recorded.
	LastExitCode *int `json:"last_exit_code"`
	// Issue 22: the hold while it runs, a change waiting for its apply window, drift correction.
	Hold             *state.Hold        `json:"hold"`
	Deferred         *state.Deferral    `json:"deferred"`
	Drift            *state.DriftMemory `json:"drift"`
	DriftCorrections int64              `json:"drift_corrections"`
}

// statusError is `status --json` when the config or state cannot be read: a document still,
// saying why, so that a script reading it is not left with nothing.
type statusError struct {
	Schema       int    `json:"schema"`
	AgentVersion string `json:"agent_version"`
	Config       string `json:"config"`
	Error        string `json:"error"`
}

type supersededToken struct {
	Path    string    `json:"path"`
	MovedAt time.Time `json:"moved_at"`
}

func newStatusCommand(g *cliDeps) *cobra.Command {
	var opts statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show config, state, token and timer (reads files only; contacts nothing)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runStatus(cmd.Context(), opts, g, runner.Exec{}, time.Now()))
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print a JSON document")
	return cmd
}

func runStatus(ctx context.Context, opts statusOptions, g *cliDeps, run runner.Runner, now time.Time) (err error) {
	if opts.json {
		defer func() {
			if err != nil {
				// The exit code and the stderr line stay the text form's; stdout says the same.
				_ = writeJSON(g.stdout, statusError{Schema: 1, AgentVersion: version.Version, Config: g.configPath, Error: err.Error()})
			}
		}()
	}
	cfg, err := config.Load(g.configPath)
	if err != nil {
		return err
	}
	st, err := state.Load(cfg.StatePath())
	if err != nil {
		return fmt.Errorf("state %s: %w", cfg.StatePath(), err)
	}
	doc := statusDoc{
		Schema:        1,
		AgentVersion:  version.Version,
		Config:        cfg.Path,
		EnvID:         cfg.EnvID,
		Site:          cfg.Site,
		Transport:     cfg.Transport,
		Tenancy:       cfg.TenancyURL(),
		Bao:           cfg.Bao.Addr,
		StateDir:      cfg.StateDir,
		AppliedSha:    st.AppliedSha,
		LastResult:    st.LastResult,
		LastDetail:    st.LastDetail,
		LastCheckinAt: st.LastCheckinAt,
		LastApplyAt:   st.LastApplyAt,
		History:       st.History,
		Timer:         systemd.TimerState(ctx, run, systemd.TimerUnit, now),
		LastFailure:   st.LastFailure,
		LastExitCode:  st.LastExitCode,
	}
	if st.Backoff != nil {
		doc.Backoff = st.Backoff
		doc.BackoffNote = tick.BackoffNote(st.Backoff, now)
	}
	if doc.History == nil {
		doc.History = []string{}
	}
	if sha, _, err := release.Current(cfg.EnvDir()); err == nil {
		doc.CurrentRelease = sha
	}
	if t := st.Token; t != nil {
		doc.TokenSource = t.Source
		if t.TTLSec > 0 {
			left := t.TTLSec - int64(now.Sub(t.ObtainedAt)/time.Second)
			if left < 0 {
				left = 0
			}
			doc.TokenTTLSec = &left
		}
	}
	doc.SupersededToken = findSupersededToken(cfg)
	if st.Hold.Active(now) {
		doc.Hold = st.Hold
	}
	doc.Deferred, doc.Drift, doc.DriftCorrections = st.Deferred, st.Drift, st.Counters.DriftCorrections
	if opts.json {
		return writeJSON(g.stdout, doc)
	}
	return printStatus(g.stdout, doc)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// failureLine is a last failure for `status`: `9f3e21d07a1b PULL_FAILED at …, 2 attempts: detail`.
func failureLine(f *state.Failure) string {
	if f == nil {
		return "-"
	}
	n := "1 attempt"
	if f.Attempts != 1 {
		n = fmt.Sprintf("%d attempts", f.Attempts)
	}
	return fmt.Sprintf("%s %s at %s, %s: %s", protocol.ShortSha(f.Sha), f.Code, f.At.UTC().Format(time.RFC3339), n, f.Detail)
}

func exitText(c *int) string {
	if c == nil {
		return "-"
	}
	return strconv.Itoa(*c)
}

func holdText(h *state.Hold) string {
	if h == nil {
		return "-"
	}
	return h.Note() + " (since " + h.Since.UTC().Format(time.RFC3339) + "; monky-deployd unhold ends it)"
}

func deferredText(d *state.Deferral) string {
	if d == nil {
		return "-"
	}
	what := "apply of " + protocol.ShortSha(d.Sha)
	if d.Action == protocol.ActionDown {
		what = "retire"
	}
	return fmt.Sprintf("%s waits for the apply window until %s (since %s)", what, d.Until.UTC().Format(time.RFC3339), d.Since.UTC().Format(time.RFC3339))
}

func driftText(m *state.DriftMemory, corrections int64) string {
	s := fmt.Sprintf("%d correction(s)", corrections)
	if m != nil && m.NextAttemptAt != nil {
		s += fmt.Sprintf("; the next correction waits until %s (%d failed)", m.NextAttemptAt.UTC().Format(time.RFC3339), m.Attempts)
		if m.Refused != "" {
			s += "; " + m.Refused
		}
	}
	return s
}

// findSupersededToken finds the token a tick put aside on a 401; its mtime (touched) says when.
func findSupersededToken(cfg *config.Config) *supersededToken {
	p := token.In(cfg).Superseded
	fi, err := os.Lstat(p)
	if err != nil {
		return nil
	}
	return &supersededToken{Path: p, MovedAt: fi.ModTime().UTC()}
}

func printStatus(w io.Writer, d statusDoc) error {
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	when := func(t *time.Time) string {
		if t == nil {
			return "never"
		}
		return t.UTC().Format(time.RFC3339)
	}
	ttl := "-"
	if d.TokenTTLSec != nil {
		ttl = (time.Duration(*d.TokenTTLSec) * time.Second).String()
	}
	timer := "unknown (no systemd)"
	if d.Timer != nil && d.Timer.Enabled != nil {
		timer = fmt.Sprintf("enabled=%t", *d.Timer.Enabled)
		if d.Timer.Active != nil {
			timer += fmt.Sprintf(" active=%t", *d.Timer.Active)
		}
		if d.Timer.NextElapse != nil {
			timer += " next=" + *d.Timer.NextElapse
		}
	}
	rows := [][2]string{
		{"agent", d.AgentVersion},
		{"config", d.Config},
		{"env", d.EnvID + " (site " + orDash(d.Site) + ")"},
		{"transport", d.Transport},
		{"tenancy", d.Tenancy},
		{"openbao", d.Bao},
		{"state dir", d.StateDir},
		{"applied", orDash(d.AppliedSha)},
		{"current release", orDash(d.CurrentRelease)},
		{"last result", orDash(d.LastResult)},
		{"last detail", orDash(d.LastDetail)},
		{"backoff", orDash(d.BackoffNote)},
		{"last failure", failureLine(d.LastFailure)},
		{"last check-in", when(d.LastCheckinAt)},
		{"last apply", when(d.LastApplyAt)},
		{"token", orDash(d.TokenSource) + ", ttl " + ttl},
		{"timer", timer},
		{"last tick exit", exitText(d.LastExitCode)},
		{"hold", holdText(d.Hold)},
		{"deferred", deferredText(d.Deferred)},
		{"drift", driftText(d.Drift, d.DriftCorrections)},
	}
	if t := d.SupersededToken; t != nil {
		rows = append(rows, [2]string{"refused token", fmt.Sprintf("%s (tenancy refused it, AGENT_UNAUTHENTICATED, %s; kept as evidence, delete it when done)", t.Path, t.MovedAt.UTC().Format(time.RFC3339))})
	}
	for _, r := range rows {
		if _, err := fmt.Fprintf(w, "%-16s %s\n", r[0]+":", r[1]); err != nil {
			return err
		}
	}
	return nil
}
