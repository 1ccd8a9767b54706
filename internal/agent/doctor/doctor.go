// Package doctor checks every tick precondition, one line each, with the fix. Each fault once passed
// for another (a dropped ACL as a mesh fault, a full containerd disk as a registry fault).
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// Status is the outcome of one check.
type Status string

// Statuses. Skip is for a check that does not apply to this box; its detail says why. Warn is
// a state an operator must know of that stops no tick (a hold): it fails nothing.
const (
	OK   Status = "OK"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
	Warn Status = "WARN"
)

// Result is one check's finding and, for a failure, its Fix; never a token, grant or credential.
type Result struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// Check is one precondition.
type Check struct {
	Name string
	Run  func(ctx context.Context) Result
	// Timeout bounds Run (0: only ctx): a docker CLI facing a hung engine waits forever.
	Timeout time.Duration
}

// Run runs the checks in order, one result each, and whether none failed; a panicking check is a
// failure, not a crash.
func Run(ctx context.Context, checks []Check) ([]Result, bool) {
	results := make([]Result, 0, len(checks))
	allOK := true
	for _, c := range checks {
		r := runOne(ctx, c)
		r.Name = c.Name
		r.Detail = oneLine(r.Detail)
		r.Fix = oneLine(r.Fix)
		if r.Status == Fail {
			allOK = false
		}
		results = append(results, r)
	}
	return results, allOK
}

func runOne(ctx context.Context, c Check) (r Result) {
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	defer func() {
		if p := recover(); p != nil {
			r = Result{Status: Fail, Detail: fmt.Sprintf("the check itself crashed: %v", p), Fix: "report this as a bug of monky-deployd doctor"}
		}
	}()
	r = c.Run(ctx)
	if r.Status == "" {
		r.Status = Fail
	}
	if ctx.Err() != nil && r.Status == Fail && c.Timeout > 0 {
		r.Detail += fmt.Sprintf(" (gave up after %s)", c.Timeout)
	}
	return r
}

// oneLine folds command output and multi-line errors onto one line.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	out := lines[:0]
	for _, l := range lines {
		if l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, " | ")
}

// Failed counts the failures among results.
func Failed(results []Result) int {
	n := 0
	for _, r := range results {
		if r.Status == Fail {
			n++
		}
	}
	return n
}

// Print writes one aligned line per result:
//
//	OK   config         /etc/monky-deployd/config.yaml loads
//	FAIL identity-group monky-deployd is not in group ziti … — fix: usermod -a -G ziti monky-deployd …
func Print(w io.Writer, results []Result) error {
	width := 0
	for _, r := range results {
		width = max(width, len(r.Name))
	}
	for _, r := range results {
		line := fmt.Sprintf("%-4s %-*s %s", r.Status, width, r.Name, r.Detail)
		if (r.Status == Fail || r.Status == Warn) && r.Fix != "" {
			line += " — fix: " + r.Fix
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// Document is `doctor --json`. Fields are only ever added; Schema changes when one is not.
type Document struct {
	Schema int      `json:"schema"`
	OK     bool     `json:"ok"`
	Config string   `json:"config"`
	Checks []Result `json:"checks"`
}

// WriteJSON writes the results as a schema-1 Document.
func WriteJSON(w io.Writer, configPath string, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Document{Schema: 1, OK: Failed(results) == 0, Config: configPath, Checks: results})
}
