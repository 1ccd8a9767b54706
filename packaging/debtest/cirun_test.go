package debtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// .ci/run starts the integration set-up beside make test and lint, and fuzz beside the
// integration tests; a stage that fails ends the run, and what runs beside it must end with it,
// down to the processes it started (apt-get, the box image's bootstrap, a fuzz binary and its
// workers), not only the shell that started them: those were left running after the failed run.
// Here .ci/run drives a stub Makefile and stub scripts whose deepest process writes its pid.
func TestCIRunEndsWhatRunsBesideAFailedStage(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go on PATH (.ci/run prints its version)")
	}
	for _, tc := range []struct {
		name, fail, job string
	}{
		{"the integration set-up, when make test fails", "test", "set-up"},
		{"fuzz, when make test-integration fails", "test-integration", "fuzz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			run := readAll(t, filepath.Join(moduleRoot(t), ".ci", "run"))
			pidFile := filepath.Join(dir, "deepest.pid")
			// The deepest process: a subshell of a shell of the background job, as in the real
			// set-up (bash scripts/… → apt-get) and fuzz (make → the recipe's shell → the binary).
			deepest := `(sh -c 'echo $$ > "$PIDFILE"; exec sleep 300')`
			files := map[string]string{
				".ci/run": run,
				"Makefile": "SHELL := /bin/bash\n" +
					"tidy-check lint test-rules deb deb-check:\n\t@true\n" +
					"test test-integration:\n" +
					"\t@if [ \"$$FAIL\" = \"$@\" ]; then for i in $$(seq 200); do [ -s \"$$PIDFILE\" ] && break; sleep 0.05; done; echo \"$@ fails\"; exit 1; fi\n" +
					"fuzz:\n\t@echo the fuzz job was here; for i in 1; do " + strings.ReplaceAll(deepest, "$", "$$") + "; done\n",
				"scripts/integration-setup.sh": "echo the set-up job was here\nif [ \"$FAIL\" = test ]; then for i in 1; do " + deepest + "; done; fi\n",
				"scripts/prometheus-deps.sh":   "true\n",
			}
			for name, body := range files {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", filepath.Join(dir, ".ci", "run"))
			// TMPDIR: .ci/run keeps the background jobs' output in a mktemp -d of its own.
			cmd.Env = append(os.Environ(), "FAIL="+tc.fail, "PIDFILE="+pidFile, "TMPDIR="+dir)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			cmd.WaitDelay = time.Minute // should a process left running hold the output open
			err := cmd.Run()
			if err == nil || !strings.Contains(out.String(), tc.fail+" fails") {
				t.Fatalf(".ci/run did not fail at make %s: %v\n%s", tc.fail, err, out.String())
			}
			// The failed stage has its line in the closing table, marked: where the time went
			// is wanted most when the run failed.
			table := out.String()[strings.LastIndex(out.String(), "== stage durations"):]
			marked := false
			for _, l := range strings.Split(table, "\n") {
				_, stageName, _ := strings.Cut(l, "% busy  ")
				marked = marked || strings.HasPrefix(stageName, "make "+tc.fail) && strings.HasSuffix(l, ": FAILED (exit 2)") &&
					!strings.HasPrefix(stageName, "make "+tc.fail+"-")
			}
			if !marked {
				t.Errorf("the table of stage durations has no FAILED line for make %s:\n%s", tc.fail, table)
			}
			// What the stopped job printed is shown, and the jobs' logs do not outlive the run.
			// (Run under make, as CI runs it, the stub make also says which directory it enters.)
			_, shown, _ := strings.Cut(out.String(), "(stopped: the run failed beside it)\n")
			shown, _, _ = strings.Cut(shown, "== stage durations")
			if !strings.Contains(shown, "the "+tc.job+" job was here\n") {
				t.Errorf("the output of the %s job, stopped, is not shown:\n%s", tc.job, out.String())
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "tmp.*")); len(left) > 0 {
				t.Errorf(".ci/run left its logs behind: %v", left)
			}
			b, rerr := os.ReadFile(pidFile)
			pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
			if rerr != nil || perr != nil {
				t.Fatalf("the stub's deepest process wrote no pid (%v, %v)\n%s", rerr, perr, out.String())
			}
			t.Cleanup(func() {
				if alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL) // the stub's own sleep, started by this test
				}
			})
			for end := time.Now().Add(5 * time.Second); alive(pid) && time.Now().Before(end); {
				time.Sleep(50 * time.Millisecond)
			}
			if alive(pid) {
				t.Errorf("process %d, started beside the failed stage, still runs after .ci/run ended\n%s", pid, out.String())
			}
		})
	}
}

// alive: pid runs (a zombie left to a parent that does not reap is as good as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}
