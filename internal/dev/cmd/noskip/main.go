// Command noskip reads `go test -json` on stdin and fails the run when a test skipped: CI
// promised the machine every test needs, so a skip there is a test that did not run and passed
// green. It prints what plain `go test` would (a failed or skipped test's output, each package's
// result), then every skip with its reason, and exits 1 on a skip, a failure or no test at all.
//
// A package that passes without running a test fails the run too: a TestMain that exits 0
// before m.Run ("no docker here") skips every test of its package and go test still says ok.
// A package without test files (go test's skip, "[no test files]") is fine. noskip reads whole
// runs, never one filtered with -run: a package with no test matching would fail it.
//
// A fuzz target that skips one of its inputs (t.Skip inside f.Fuzz) skipped no test: the
// target ran and filtered that input, so subtests of a Fuzz* target are not counted. A target
// whose every input skipped, or that passed with no input at all, checked nothing: it fails the
// run as a skip does.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	os.Exit(run(os.Stdin, os.Stdout, os.Stderr))
}

// event is one line of test2json (go doc test2json).
type event struct {
	Action  string `json:"Action"`
	Package string `json:"Package"`
	Test    string `json:"Test"`
	Output  string `json:"Output"`
}

// skip is one skipped test and the lines it logged (t.Skip's reason among them).
type skip struct {
	pkg, test string
	lines     []string
}

// chatter is what -json's implied -v adds to plain `go test` output (and its bare PASS line).
var chatter = regexp.MustCompile(`^\s*(=== (RUN|PAUSE|CONT|NAME)\s|--- (PASS|SKIP): )`)

func run(in io.Reader, out, errw io.Writer) int {
	held := map[string][]string{} // package + test → its output until it ends
	ran := map[string]int{}       // package → tests that ended in it
	var skips []skip
	var empty []string // packages that passed without running a test
	// inputs counts each fuzz target's inputs that passed and that skipped: a target whose every
	// input skipped, or that passed with no input at all, checked nothing.
	inputs := map[string]*fuzzInputs{}
	inputsOf := func(pkg, target string) *fuzzInputs {
		in := inputs[pkg+"\x00"+target]
		if in == nil {
			in = &fuzzInputs{}
			inputs[pkg+"\x00"+target] = in
		}
		return in
	}
	var fuzzTargets []string // package + target, in the order they ended
	failed, tests, lines := false, 0, 0
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		lines++
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			// go test writes a build failure's compiler output outside the JSON stream
			// before Go 1.24, and so does a crash of go itself: pass it through.
			fmt.Fprintln(out, sc.Text())
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output", "build-output":
			if e.Test == "" {
				if !chatter.MatchString(e.Output) && e.Output != "PASS\n" {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			held[key] = append(held[key], e.Output)
		case "pass":
			if top, ok := fuzzTarget(e.Test); ok {
				in := inputsOf(e.Package, top)
				if top == e.Test {
					fuzzTargets = append(fuzzTargets, e.Package+"\x00"+top)
				} else {
					in.passed++
				}
			}
			if e.Test != "" {
				tests++
				ran[e.Package]++
			} else if ran[e.Package] == 0 {
				empty = append(empty, e.Package)
			}
			delete(held, key)
		case "fail":
			failed = true
			if e.Test != "" {
				tests++
				ran[e.Package]++
			}
			for _, l := range held[key] {
				fmt.Fprint(out, l)
			}
			delete(held, key)
			if e.Test == "" {
				// The package failed with tests that never ended (a crash, an os.Exit, the
				// -timeout panic): what they printed is all there is to tell why.
				prefix := e.Package + "\x00"
				for _, k := range slices.Sorted(maps.Keys(held)) {
					if strings.HasPrefix(k, prefix) {
						fmt.Fprintf(out, "--- DID NOT END: %s\n", strings.TrimPrefix(k, prefix))
						for _, l := range held[k] {
							fmt.Fprint(out, l)
						}
						delete(held, k)
					}
				}
			}
		case "skip":
			if e.Test == "" { // a package without tests
				continue
			}
			if fuzzInput(e.Test) {
				top, _ := fuzzTarget(e.Test)
				inputsOf(e.Package, top).skipped++
				delete(held, key)
				continue
			}
			tests++
			ran[e.Package]++
			var why []string
			for _, l := range held[key] {
				if !chatter.MatchString(l) {
					why = append(why, strings.TrimRight(l, "\n"))
				}
			}
			skips = append(skips, skip{e.Package, e.Test, why})
			delete(held, key)
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(errw, "noskip: reading go test -json:", err)
		return 1
	}
	for _, s := range skips {
		fmt.Fprintf(out, "--- SKIP: %s %s\n", s.pkg, s.test)
		for _, l := range s.lines {
			fmt.Fprintln(out, l)
		}
	}
	for _, p := range empty {
		fmt.Fprintf(out, "--- NO TEST RAN: %s\n", p)
	}
	idle := 0
	for _, k := range fuzzTargets {
		in := inputs[k]
		if in.passed > 0 {
			continue
		}
		pkg, target, _ := strings.Cut(k, "\x00")
		idle++
		if in.skipped > 0 {
			fmt.Fprintf(out, "--- EVERY INPUT SKIPPED: %s %s (%d inputs)\n", pkg, target, in.skipped)
		} else {
			fmt.Fprintf(out, "--- NO INPUT RAN: %s %s\n", pkg, target)
		}
	}
	code := 0
	if len(skips) > 0 {
		fmt.Fprintf(errw, "noskip: %d test(s) skipped where every test must run (CI set): each one above; "+
			"give the machine what it needs, or stop the test through itest.Unavailable so it fails here\n", len(skips))
		code = 1
	}
	if len(empty) > 0 {
		fmt.Fprintf(errw, "noskip: %d package(s) passed without running a test: each one above; a TestMain that exits "+
			"before m.Run skips every test unseen: run m.Run and stop each test through itest.Unavailable so it fails here\n", len(empty))
		code = 1
	}
	if idle > 0 {
		fmt.Fprintf(errw, "noskip: %d fuzz target(s) passed without checking an input: each one above; give the target "+
			"a seed (f.Add or testdata/fuzz) that it does not skip\n", idle)
		code = 1
	}
	if failed {
		fmt.Fprintln(errw, "noskip: tests failed")
		code = 1
	}
	if code == 0 && tests == 0 {
		fmt.Fprintf(errw, "noskip: no test ran (%d lines read): was this `go test -json`?\n", lines)
		code = 1
	}
	if code == 0 {
		fmt.Fprintf(out, "noskip: %d tests ran, none skipped\n", tests)
	}
	return code
}

// fuzzInputs is what a fuzz target's inputs did.
type fuzzInputs struct{ passed, skipped int }

// fuzzTarget is the fuzz target test belongs to (itself, or the target of an input).
func fuzzTarget(test string) (string, bool) {
	top, _, _ := strings.Cut(test, "/")
	return top, strings.HasPrefix(top, "Fuzz")
}

// fuzzInput: a subtest of a fuzz target is one of its inputs (seed#N or a corpus file).
func fuzzInput(test string) bool {
	_, ok := fuzzTarget(test)
	return ok && strings.Contains(test, "/")
}
