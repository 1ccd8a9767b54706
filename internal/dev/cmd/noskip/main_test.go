package main

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTestJSON runs the real `go test -json` over a module of the given test file, and of the
// other files given by path: what noskip reads in CI, not a hand-written imitation of it.
func goTestJSON(t *testing.T, testFile string, other map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod":     "module example.com/m\n\ngo 1.24\n",
		"m.go":       "package m\n",
		"m_test.go":  testFile,
		"sub/doc.go": "package sub\n", // a package without tests: its skip event is no skipped test
	}
	maps.Copy(files, other)
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	out, _ := cmd.Output() // a failing test exits 1: the stream is what counts
	if !bytes.Contains(out, []byte(`"Action":`)) {
		t.Fatalf("go test -json wrote no events:\n%s", out)
	}
	return out
}

func TestNoskip(t *testing.T) {
	const header = "package m\n\nimport \"testing\"\n\n"
	for _, tc := range []struct {
		name, tests string
		other       map[string]string // more files of the module
		code        int
		want, not   []string // in stdout+stderr, and not
	}{
		{"all pass, a fuzz target skips one input", header +
			"func TestA(t *testing.T) { t.Log(\"chatter of a passing test\") }\n" +
			"func TestB(t *testing.T) { t.Run(\"sub\", func(t *testing.T) {}) }\n" +
			"func FuzzF(f *testing.F) { f.Add(0); f.Add(1); f.Fuzz(func(t *testing.T, n int) { if n == 1 { t.Skip(\"odd input\") } }) }\n",
			// Test files of a build tag not given: go test says "[no test files]", as for sub.
			map[string]string{"tagged/t.go": "package tagged\n", "tagged/t_test.go": "//go:build nosuchtag\n\npackage tagged\n\n" +
				"import \"testing\"\n\nfunc TestT(t *testing.T) {}\n"},
			0, []string{"noskip: 5 tests ran, none skipped", "ok  \texample.com/m"},
			[]string{"chatter of a passing test", "=== RUN", "--- PASS", "SKIP", "PASS\n"}},
		{"a skipped test fails the run, naming it and its reason", header +
			"func TestA(t *testing.T) {}\n" +
			"func TestRoot(t *testing.T) { t.Skip(\"needs root\") }\n",
			nil, 1, []string{"--- SKIP: example.com/m TestRoot", "needs root", "noskip: 1 test(s) skipped"},
			[]string{"none skipped"}},
		{"a skipped subtest too", header +
			"func TestA(t *testing.T) { t.Run(\"needs docker\", func(t *testing.T) { t.Skipf(\"no %s\", \"docker\") }) }\n",
			nil, 1, []string{"--- SKIP: example.com/m TestA/needs_docker", "no docker"}, nil},
		{"a failure shows its output and fails the run", header +
			"func TestA(t *testing.T) { t.Log(\"what went wrong\"); t.Fail() }\n" +
			"func TestB(t *testing.T) { t.Log(\"quiet\") }\n",
			nil, 1, []string{"what went wrong", "--- FAIL: TestA", "noskip: tests failed"}, []string{"quiet"}},
		// A test that never ends (the binary exits under it) has no fail event of its own: what
		// it printed is shown with the package's failure, or the log says nothing of why.
		{"a test cut short by an exit shows its output", "package m\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\n" +
			"func TestA(t *testing.T) {}\n" +
			"func TestExits(t *testing.T) { t.Log(\"the last words\"); os.Exit(3) }\n",
			nil, 1, []string{"--- DID NOT END: TestExits", "the last words", "noskip: tests failed"}, []string{"none skipped"}},
		{"a build failure fails the run", header + "func TestA(t *testing.T) { undefined() }\n",
			nil, 1, []string{"undefined: undefined"}, []string{"none skipped"}},
		// go test says ok for a package whose TestMain exits 0 without m.Run: every test of it
		// skipped unseen, while the other package's tests ran.
		{"a TestMain that exits before m.Run fails the run", "package m\n\nimport (\n\t\"os\"\n\t\"testing\"\n)\n\n" +
			"func TestMain(m *testing.M) {\n\tif os.Getenv(\"NOSKIP_NO_SUCH_PART\") == \"\" {\n\t\tos.Exit(0) // no docker here\n\t}\n\tos.Exit(m.Run())\n}\n\n" +
			"func TestNeedsDocker(t *testing.T) { t.Fatal(\"would fail\") }\n",
			map[string]string{"other/o_test.go": "package other\n\nimport \"testing\"\n\nfunc TestO(t *testing.T) {}\n"},
			1, []string{"ok  \texample.com/m\t", "--- NO TEST RAN: example.com/m\n", "noskip: 1 package(s) passed without running a test"},
			[]string{"none skipped", "NO TEST RAN: example.com/m/", "skipped where"}},
		// A fuzz target whose every input skipped, or that had none, passed having checked nothing.
		{"a fuzz target whose every input skipped fails the run", header +
			"func TestA(t *testing.T) {}\n" +
			"func FuzzF(f *testing.F) { f.Add(0); f.Add(1); f.Fuzz(func(t *testing.T, n int) { t.Skip(\"no docker\") }) }\n",
			nil, 1, []string{"--- EVERY INPUT SKIPPED: example.com/m FuzzF (2 inputs)", "noskip: 1 fuzz target(s) passed without checking an input"},
			[]string{"none skipped"}},
		{"a fuzz target without an input fails the run", header +
			"func TestA(t *testing.T) {}\n" +
			"func FuzzF(f *testing.F) { f.Fuzz(func(t *testing.T, n int) {}) }\n" +
			"func FuzzG(f *testing.F) { f.Add(0); f.Fuzz(func(t *testing.T, n int) {}) }\n",
			nil, 1, []string{"--- NO INPUT RAN: example.com/m FuzzF\n", "noskip: 1 fuzz target(s) passed without checking an input"},
			[]string{"none skipped", "FuzzG"}},
		{"test files without a test fail the run", header + "func BenchmarkA(b *testing.B) {}\n",
			map[string]string{"other/o_test.go": "package other\n\nimport \"testing\"\n\nfunc TestO(t *testing.T) {}\n"},
			1, []string{"--- NO TEST RAN: example.com/m\n", "noskip: 1 package(s) passed without running a test"}, []string{"none skipped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errw bytes.Buffer
			code := run(bytes.NewReader(goTestJSON(t, tc.tests, tc.other)), &out, &errw)
			all := out.String() + errw.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, all)
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("output lacks %q:\n%s", w, all)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(all, n) {
					t.Errorf("output has %q:\n%s", n, all)
				}
			}
		})
	}
}

// What is not a test stream, or an empty one, is no passing run.
func TestNoskipWithoutTests(t *testing.T) {
	for _, in := range []string{"", "not json\n", `{"Action":"skip","Package":"example.com/m/sub"}` + "\n"} {
		var out, errw bytes.Buffer
		if code := run(strings.NewReader(in), &out, &errw); code != 1 || !strings.Contains(errw.String(), "no test ran") {
			t.Errorf("%q: exit %d, stderr %q", in, code, errw.String())
		}
	}
}

func TestFuzzInput(t *testing.T) {
	for test, want := range map[string]bool{"FuzzF/seed#1": true, "FuzzF/771e938e4458e983": true, "FuzzF": false,
		"TestFuzzy/x": false, "TestA/FuzzF": false} {
		if got := fuzzInput(test); got != want {
			t.Errorf("fuzzInput(%q) = %v", test, got)
		}
	}
}
