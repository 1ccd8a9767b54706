package cli_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// currentDir is the release directory the box's `current` link names (releases/<sha>).
func currentDir(box string) string {
	env := filepath.Join(box, "state", benchEnv)
	target, _ := os.Readlink(filepath.Join(env, "current"))
	return filepath.Join(env, target)
}

// A FIFO put in place of any file a tick reads cannot hang the tick. A plain open of a FIFO
// waits for a writer, and the timer's tick would wait until systemd's timeout, reporting nothing
// meanwhile: each such file is opened without blocking and read only when it is a regular file.
// The tick says which file it refused, and where the file is not needed for the work it still
// checks in and reports.
func TestAFIFOInPlaceOfAFileTheTickReadsCannotHangIt(t *testing.T) {
	dir := t.TempDir()
	agentBin, dockerBin := buildBinaries(t, filepath.Join(dir, "bin"))
	for _, tc := range []struct {
		name string
		// path is the file the FIFO replaces, in the box at box (state is box/state).
		path func(box string) string
		// before runs before the FIFO is made (nil: nothing).
		before func(t *testing.T, box string)
		// wantCode is the tick's exit code; wantLog is in what it printed; wantReport is whether
		// tenancy got a report.
		wantCode   int
		wantLog    string
		wantReport bool
	}{
		{name: "config.yaml", path: func(box string) string { return filepath.Join(box, "config.yaml") },
			wantCode: 78, wantLog: "not a regular file (fifo)"},
		{name: "state.json", path: func(box string) string { return filepath.Join(box, "state", "state.json") },
			// No state: the tick applies the desired release afresh (the fake docker refuses
			// the judgement's `compose config`, and the failure is reported).
			wantCode: 1, wantLog: "state unreadable; moved aside, starting fresh", wantReport: true},
		{name: "state.json's reserve", path: func(box string) string {
			return filepath.Join(box, "state", "state.json"+state.ReserveSuffix)
		}, wantCode: 0, wantReport: true},
		{name: "bao.token", path: func(box string) string { return filepath.Join(box, "state", "bao.token") },
			wantCode: 1, wantLog: "not a regular file (fifo)"},
		{name: "the bootstrap grant, with no token", path: func(box string) string { return filepath.Join(box, "bootstrap.jwt") },
			before: func(t *testing.T, box string) {
				if err := os.Remove(filepath.Join(box, "state", "bao.token")); err != nil {
					t.Fatal(err)
				}
			}, wantCode: 1, wantLog: "not a regular file (fifo)"},
		{name: "the package's upgraded-from file", path: func(box string) string {
			return filepath.Join(box, "state", state.UpgradedFromFile)
		}, wantCode: 0, wantLog: "upgraded-from file is unusable", wantReport: true},
		{name: "the applied release's bundle.json", path: func(box string) string {
			return filepath.Join(box, "state", benchEnv, "current", "bundle.json")
		}, wantCode: 0, wantReport: true},
		// A held tick reads the applied release to learn its secrets before it redacts the
		// hold's reason: the release directory itself (os.OpenRoot opened it without O_DIRECTORY).
		{name: "the applied release's directory, on a held box", path: currentDir, before: func(t *testing.T, box string) {
			sp := filepath.Join(box, "state", "state.json")
			st, err := state.Load(sp)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			st.Hold = &state.Hold{Reason: "maintenance", By: "ops", Since: now, Until: now.Add(time.Hour)}
			if err := state.Save(sp, st); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(currentDir(box)); err != nil {
				t.Fatal(err)
			}
		}, wantCode: 0, wantLog: "hold: the release's secrets could not all be read", wantReport: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := t.TempDir()
			cfgPath, ts, cleanup := convergedBoxWithTenancy(t, box, dockerBin)
			defer cleanup()
			if tc.before != nil {
				tc.before(t, box)
			}
			p := tc.path(box)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, agentBin, "--config", cfgPath, "tick")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if ctx.Err() != nil {
				t.Fatalf("the tick hung on the FIFO at %s (killed after 30 s)\n%s", p, out.String())
			}
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.wantCode {
				t.Errorf("exit %d, want %d\n%s", code, tc.wantCode, out.String())
			}
			if !strings.Contains(out.String(), tc.wantLog) {
				t.Errorf("the tick's output does not say %q:\n%s", tc.wantLog, out.String())
			}
			if got := len(ts.Reports(benchEnv)) > 0; got != tc.wantReport {
				t.Errorf("tenancy got a report: %v, want %v\n%s", got, tc.wantReport, out.String())
			}
		})
	}
}
