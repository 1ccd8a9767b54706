// Command mutate-report prints what `make mutate` found: for each package gremlins ran over
// (one JSON result of `gremlins unleash --output` a package), the mutants killed, lived, timed
// out and not covered, and the efficacy, killed ÷ (killed + lived); then every survivor by file
// and line, the list to kill with a test or to judge equivalent.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// result is the part of gremlins' JSON output (internal/report/internal.OutputResult) read here.
type result struct {
	Files []struct {
		Name      string `json:"file_name"`
		Mutations []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
			Line   int    `json:"line"`
			Column int    `json:"column"`
		} `json:"mutations"`
	} `json:"files"`
}

// summary counts one package's mutants by status.
type summary struct {
	name                                     string
	killed, lived, timedOut, notCovered, all int
	survivors                                []string
}

// efficacy is killed ÷ (killed + lived) in percent, as gremlins computes it; -1 without any.
func (s summary) efficacy() float64 {
	if s.killed+s.lived == 0 {
		return -1
	}
	return 100 * float64(s.killed) / float64(s.killed+s.lived)
}

func summarize(name string, r io.Reader) (summary, error) {
	var res result
	if err := json.NewDecoder(r).Decode(&res); err != nil {
		return summary{}, fmt.Errorf("%s: %w", name, err)
	}
	s := summary{name: name}
	for _, f := range res.Files {
		for _, m := range f.Mutations {
			s.all++
			switch m.Status {
			case "KILLED":
				s.killed++
			case "LIVED":
				s.lived++
				file := f.Name
				if !strings.Contains(file, "/") { // gremlins names a file of the package by its base name
					file = "internal/" + name + "/" + file
				}
				s.survivors = append(s.survivors, fmt.Sprintf("%s:%d:%d %s", file, m.Line, m.Column, m.Type))
			case "TIMED OUT":
				s.timedOut++
			case "NOT COVERED":
				s.notCovered++
			}
		}
	}
	sort.Strings(s.survivors)
	return s, nil
}

// report writes the table and the survivors; the names are the packages, in the order given.
func report(w io.Writer, sums []summary) {
	fmt.Fprintf(w, "%-26s %7s %6s %9s %11s %9s\n", "package", "killed", "lived", "timed-out", "not-covered", "efficacy")
	for _, s := range sums {
		eff := "-"
		if e := s.efficacy(); e >= 0 {
			eff = fmt.Sprintf("%.1f%%", e)
		}
		fmt.Fprintf(w, "%-26s %7d %6d %9d %11d %9s\n", s.name, s.killed, s.lived, s.timedOut, s.notCovered, eff)
	}
	for _, s := range sums {
		for _, v := range s.survivors {
			fmt.Fprintf(w, "LIVED %s %s\n", s.name, v)
		}
	}
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: mutate-report RESULT.json… (one gremlins --output file a package, named <pkg path with - for />.json)")
		os.Exit(2)
	}
	var sums []summary
	for _, p := range os.Args[1:] {
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate-report:", err)
			os.Exit(1)
		}
		name := strings.ReplaceAll(strings.TrimSuffix(filepath.Base(p), ".json"), "-", "/")
		s, err := summarize(name, f)
		f.Close()
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate-report:", err)
			os.Exit(1)
		}
		sums = append(sums, s)
	}
	report(os.Stdout, sums)
}
