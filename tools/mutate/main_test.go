package main

import (
	"strings"
	"testing"
)

// The shape gremlins v0.6.0 writes with --output (its internal/report/internal.OutputResult).
const sample = `{"go_module": "m", "test_efficacy": 66.6, "files": [
 {"file_name": "verdict.go", "mutations": [
  {"type": "CONDITIONALS_BOUNDARY", "status": "KILLED", "line": 204, "column": 80},
  {"type": "CONDITIONALS_NEGATION", "status": "LIVED", "line": 235, "column": 30},
  {"type": "ARITHMETIC_BASE", "status": "KILLED", "line": 120, "column": 9},
  {"type": "INCREMENT_DECREMENT", "status": "TIMED OUT", "line": 99, "column": 2},
  {"type": "INVERT_NEGATIVES", "status": "NOT COVERED", "line": 12, "column": 5},
  {"type": "INVERT_LOGICAL", "status": "NOT VIABLE", "line": 13, "column": 5}]}]}`

func TestSummarize(t *testing.T) {
	s, err := summarize("fleet/verdict", strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if s.killed != 2 || s.lived != 1 || s.timedOut != 1 || s.notCovered != 1 || s.all != 6 {
		t.Errorf("counts %+v", s)
	}
	if e := s.efficacy(); e < 66.6 || e > 66.7 {
		t.Errorf("efficacy %.2f, want 66.67 (killed ÷ killed+lived; timed out and not covered apart)", e)
	}
	var b strings.Builder
	report(&b, []summary{s, {name: "shared/protocol"}})
	out := b.String()
	for _, want := range []string{
		"fleet/verdict                    2      1         1           1     66.7%",
		"shared/protocol                  0      0         0           0         -",
		"LIVED fleet/verdict internal/fleet/verdict/verdict.go:235:30 CONDITIONALS_NEGATION",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "LIVED") != 1 {
		t.Errorf("survivors other than the one LIVED:\n%s", out)
	}
	if _, err := summarize("x", strings.NewReader(`{"files": 3}`)); err == nil {
		t.Error("a result that is not gremlins' shape was read")
	}
}
