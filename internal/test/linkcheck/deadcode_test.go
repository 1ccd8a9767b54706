// Package linkcheck holds tests of how the linker builds the two binaries.
package linkcheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestBinariesKeepDeadCodeElimination: nothing reachable in monky-deployd or fleetctl calls
// reflect's Method or MethodByName with a name the compiler cannot see. One such call anywhere
// (the linker marks its function <ReflectMethod>) makes the linker keep every exported method of
// every type that is ever held in an interface: monky-deployd grew from 21 to 35 MB, and every
// run's RSS, a converged tick's included, by 4 MiB of pages the kernel maps around the text it
// touches (issue 24). The two callers found were cobra's SetVersionTemplate (text/template) and
// protobuf before v1.36.12 (descfmt's MethodByName("Methods") kept Go 1.26's reflect method
// iterators, which call Method(i)). On failure the path from main to the first such function
// says which import brought it in.
func TestBinariesKeepDeadCodeElimination(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{"./cmd/deployd", "./cmd/fleetctl"} {
		t.Run(filepath.Base(pkg), func(t *testing.T) {
			t.Parallel()
			d := dumpdep(t, root, pkg)
			if d.first != "" {
				t.Errorf("%s reaches %s, a reflective method call: the linker keeps every exported method of every type. Reached by:\n  %s",
					pkg, d.first, strings.Join(d.pathTo(d.first), "\n  ")+
						"\n(where the path passes a type's method table, \"type:T -> T.M\", M was kept because something calls a method of that name,"+
						" e.g. MethodByName(\"M\"): go build -ldflags=-v=2 lists each \"reached generic iface method\")")
			}
		})
	}
	// The check must see a reflective call where there is one: were the linker's <ReflectMethod>
	// spelled otherwise (a new Go), the binaries above would pass whatever they call.
	t.Run("canary", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		for name, text := range map[string]string{
			"go.mod":  "module canary\n",
			"main.go": "package main\n\nimport (\n\t\"os\"\n\t\"reflect\"\n)\n\ntype T struct{}\n\nfunc (T) Hello() {}\n\nfunc main() { reflect.ValueOf(T{}).MethodByName(os.Args[1]).Call(nil) }\n",
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		bin := filepath.Join(t.TempDir(), "canary")
		goBuild(t, dir, "-trimpath", "-o", bin, ".") // as `make build` does
		d := dumpdep(t, dir, ".")
		if path := d.pathTo(d.first); d.first == "" || !slices.Contains(path, "main.main") {
			t.Fatalf("a program calling MethodByName(os.Args[1]) reaches no <ReflectMethod> function by main.main (first %q, path %q): the check sees nothing",
				d.first, path)
		}
		// The binary built before is up to date: building it again links nothing, and must not
		// print the dump go cached from the build above (make build, after make test, did: 12 MB).
		if again := goBuild(t, dir, "-trimpath", "-o", bin, "."); len(again) != 0 {
			t.Errorf("a build after the check prints its linker dump:\n%s", tail(again))
		}
	})
}

// dumpdep builds pkg in dir as the release does (CGO_ENABLED=0, -trimpath) and reads what the
// linker's -dumpdep printed: one "from -> to" line per symbol it marked reachable.
//
// go keeps a link's output under the main package's compile, to print again when a later build
// finds its binary up to date; with -trimpath, -ldflags is no part of that compile (nor of the
// build info), so `make build` after this test printed the dump. -tags is: the tag, which no
// file uses, keeps the dump to builds of this test.
func dumpdep(t *testing.T, dir, pkg string) dump {
	t.Helper()
	out := goBuild(t, dir, "-trimpath", "-tags=linkcheck", "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), "bin"), pkg)
	d := readDumpdep(out)
	if d.edges == 0 {
		t.Fatalf("go build -ldflags=-dumpdep %s printed no edges: the test reads nothing\n%s", pkg, tail(out))
	}
	return d
}

// goBuild runs go build with args in dir and returns what it printed.
func goBuild(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", append([]string{"build"}, args...)...)
	cmd.Dir = dir
	// The module alone, for Linux, as released: a developer's Mac checks what ships too.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, tail(out))
	}
	return out
}

// flagRE: the flags dumpdep appends to a name, run together ("T <UsedInIface><ReflectMethod>").
var flagRE = regexp.MustCompile(` (<\w+>)+$`)

// dump is what the linker's -dumpdep said, read once.
type dump struct {
	edges int
	// first is the first reachable function marked <ReflectMethod>, if any.
	first string
	// parent is, for each symbol, the one by whose edge the linker first reached it (dumpdep
	// prints edges in the order it marks).
	parent map[string]string
}

// readDumpdep reads the linker's "from -> to" edges.
func readDumpdep(out []byte) dump {
	d := dump{parent: map[string]string{}}
	for line := range bytes.Lines(out) { // a scanner would stop, unsaid, at a line past its buffer
		from, to, ok := strings.Cut(strings.TrimSuffix(string(line), "\n"), " -> ")
		if !ok {
			continue
		}
		d.edges++
		for _, s := range []string{from, to} {
			if d.first == "" && strings.Contains(s, "<ReflectMethod>") {
				d.first = flagRE.ReplaceAllString(s, "")
			}
		}
		from, to = flagRE.ReplaceAllString(from, ""), flagRE.ReplaceAllString(to, "")
		if _, seen := d.parent[to]; !seen {
			d.parent[to] = from
		}
	}
	return d
}

// pathTo follows sym back to the program's entry.
func (d dump) pathTo(sym string) []string {
	var path []string
	for s := sym; s != "" && len(path) < 30; s = d.parent[s] {
		path = append(path, s)
		if _, ok := d.parent[s]; !ok {
			break
		}
	}
	return path
}

// tail is the end of the linker's output, for a failure message.
func tail(out []byte) string {
	if len(out) > 4000 {
		out = out[len(out)-4000:]
	}
	return string(out)
}

// readDumpdep and pathTo read the flags dumpdep appends, alone or run together.
func TestReadDumpdep(t *testing.T) {
	out := []byte("_ -> main.main\n" +
		"main.main -> a.F <UsedInIface>\n" +
		"a.F <UsedInIface> -> b.G <UsedInIface><ReflectMethod>\n" +
		"b.G <UsedInIface><ReflectMethod> -> c.H <ReflectMethod>\n" +
		"not an edge\n")
	d := readDumpdep(out)
	if d.edges != 4 || d.first != "b.G" {
		t.Errorf("readDumpdep: %d edges, first %q; want 4, b.G", d.edges, d.first)
	}
	// a long name (a type of many fields) is read past, not where the reading ends
	long := []byte("main.main -> type:struct { " + strings.Repeat("F int; ", 300_000) + "}\n" +
		"main.main -> d.K <ReflectMethod>")
	if l := readDumpdep(long); l.edges != 2 || l.first != "d.K" {
		t.Errorf("readDumpdep past a 2 MB line: %d edges, first %q; want 2, d.K", l.edges, l.first)
	}
	if got, want := d.pathTo("b.G"), []string{"b.G", "a.F", "main.main", "_"}; !slices.Equal(got, want) {
		t.Errorf("pathTo b.G = %q, want %q", got, want)
	}
}
