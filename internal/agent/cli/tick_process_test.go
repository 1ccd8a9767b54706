package cli_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// runTickProcess runs `monky-deployd --config cfg tick` and returns its exit code and stderr
// (the journal of the tick).
func runTickProcess(t *testing.T, bin, cfg string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--config", cfg}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String() + stdout.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String() + stdout.String()
	}
	t.Fatalf("%s: %v", bin, err)
	return 0, ""
}

var tickIDLine = regexp.MustCompile(` tick_id=([0-9a-f]{12})$`)

// tickIDOf checks that every line of a tick's journal ends in one and the same tick id, and returns it.
func tickIDOf(t *testing.T, journal string) string {
	t.Helper()
	id := ""
	lines := strings.Split(strings.TrimRight(journal, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("a tick of %d line(s): %q", len(lines), journal)
	}
	for _, l := range lines {
		m := tickIDLine.FindStringSubmatch(l)
		switch {
		case m == nil:
			t.Fatalf("a line of the tick without its tick_id: %q\n%s", l, journal)
		case id == "":
			id = m[1]
		case m[1] != id:
			t.Fatalf("a line with tick_id=%s in the tick %s: %q\n%s", m[1], id, l, journal)
		}
	}
	return id
}

// Through the binary: a deploy fails, and the two ticks after it still tell tenancy why in their
// check-ins (last_failure); every journal line of a tick ends in that tick's id, which its check-in
// and its report carry; `status` shows the failure.
func TestTicksCarryTheLastFailureAndTheirTickID(t *testing.T) {
	dir := t.TempDir()
	agentBin, dockerBin := buildBinaries(t, dir)
	cfg, ts, cleanup := convergedBoxWithTenancy(t, dir, dockerBin)
	defer cleanup()
	defer os.Unsetenv("FAKEDOCKER_PS")
	// The fake docker CLI refuses `compose config`: the post-render judgement cannot run, so the
	// apply of the new bundle fails before anything is promoted.
	bad := ts.SetDesired(benchEnv, map[string]string{
		"bundle.json":        `{"compose_file": "docker-compose.yml"}`,
		"docker-compose.yml": "services:\n  api:\n    image: x/api:2\n",
	})

	var ids []string
	for i := 1; i <= 3; i++ {
		code, journal := runTickProcess(t, agentBin, cfg, "tick")
		if code != 1 {
			t.Fatalf("tick %d: exit %d, want 1\n%s", i, code, journal)
		}
		id := tickIDOf(t, journal)
		for _, seen := range ids {
			if seen == id {
				t.Fatalf("tick %d reuses the tick id %s", i, id)
			}
		}
		ids = append(ids, id)
		if !strings.Contains(journal, "monky-deployd: failed: ") {
			t.Errorf("tick %d: the last line does not say it failed:\n%s", i, journal)
		}

		cs := ts.Checkins(benchEnv)
		req := cs[len(cs)-1].Request
		if req.TickID != id {
			t.Errorf("tick %d: the check-in carries tick_id %q, the journal %s", i, req.TickID, id)
		}
		rs := ts.Reports(benchEnv)
		rep := rs[len(rs)-1].Report
		if rep.TickID != id {
			t.Errorf("tick %d: the report carries tick_id %q, the journal %s", i, rep.TickID, id)
		}
		if i == 1 {
			if req.LastFailure != nil || req.LastExitCode != nil {
				t.Errorf("the first check-in carries last_failure %+v, last_exit_code %v", req.LastFailure, req.LastExitCode)
			}
			if rep.Result != protocol.ResultFailed || rep.Sha != bad {
				t.Fatalf("tick 1 reported %+v", rep)
			}
			continue
		}
		// The second and third ticks back off; their check-ins still carry the failure.
		lf := req.LastFailure
		if lf == nil || lf.Sha != bad || lf.Code != protocol.FailOther || lf.Attempts != 1 || !strings.Contains(lf.Detail, "compose config") {
			t.Errorf("tick %d: check-in last_failure = %+v, want the failure of %.12s", i, lf, bad)
		}
		if req.LastExitCode == nil || *req.LastExitCode != 1 {
			t.Errorf("tick %d: check-in last_exit_code = %v, want 1 (the tick before failed)", i, req.LastExitCode)
		}
		if a, _ := ts.AdminAgent(benchEnv); a.LastFailure == nil || a.LastFailure.Sha != bad || a.CheckinTickID != id || a.ResultTickID != id {
			t.Errorf("tick %d: tenancy's admin view = last_failure %+v, checkin_tick_id %q, result_tick_id %q", i, a.LastFailure, a.CheckinTickID, a.ResultTickID)
		}
	}

	code, out := runTickProcess(t, agentBin, cfg, "status")
	if code != 0 || !strings.Contains(out, "last failure:    "+bad[:12]+" FAILED at ") || !strings.Contains(out, "last tick exit:  1") {
		t.Errorf("status: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "state.json")); err != nil {
		t.Fatal(err)
	}
}
