package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner/runnertest"
)

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name   string
		checks []Check
		want   []Result
		allOK  bool
	}{
		{"all pass, skips count as passing", []Check{
			{Name: "a", Run: func(context.Context) Result { return ok("fine") }},
			{Name: "b", Run: func(context.Context) Result { return skip("does not apply: transport system") }},
		}, []Result{{Name: "a", Status: OK, Detail: "fine"}, {Name: "b", Status: Skip, Detail: "does not apply: transport system"}}, true},
		{"one failure fails the run, and the rest still run", []Check{
			{Name: "a", Run: func(context.Context) Result { return fail("broken", "mend it") }},
			{Name: "b", Run: func(context.Context) Result { return ok("fine") }},
		}, []Result{{Name: "a", Status: Fail, Detail: "broken", Fix: "mend it"}, {Name: "b", Status: OK, Detail: "fine"}}, false},
		{"multi-line output is folded onto one line", []Check{
			{Name: "a", Run: func(context.Context) Result { return fail("line one\n\n  line   two\r\n", "a\nb") }},
		}, []Result{{Name: "a", Status: Fail, Detail: "line one | line two", Fix: "a | b"}}, false},
		{"a check without a status failed", []Check{
			{Name: "a", Run: func(context.Context) Result { return Result{Detail: "?"} }},
		}, []Result{{Name: "a", Status: Fail, Detail: "?"}}, false},
		{"a panicking check fails and the next one runs", []Check{
			{Name: "a", Run: func(context.Context) Result { panic("nil map") }},
			{Name: "b", Run: func(context.Context) Result { return ok("fine") }},
		}, []Result{{Name: "a", Status: Fail, Detail: "the check itself crashed: nil map", Fix: "report this as a bug of monky-deployd doctor"}, {Name: "b", Status: OK, Detail: "fine"}}, false},
		{"a check past its timeout gives up and says so", []Check{
			{Name: "a", Timeout: time.Nanosecond, Run: func(ctx context.Context) Result {
				<-ctx.Done()
				return fail("docker did not answer", "")
			}},
		}, []Result{{Name: "a", Status: Fail, Detail: "docker did not answer (gave up after 1ns)"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, allOK := Run(context.Background(), tc.checks)
			if allOK != tc.allOK {
				t.Errorf("allOK = %t, want %t", allOK, tc.allOK)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("results %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("result %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestPrintAlignsAndShowsFixesOfFailuresOnly(t *testing.T) {
	var b bytes.Buffer
	err := Print(&b, []Result{
		{Name: "config", Status: OK, Detail: "/etc/monky-deployd/config.yaml loads", Fix: "not shown"},
		{Name: "identity-group", Status: Fail, Detail: "monky-deployd is not in group ziti", Fix: "usermod -a -G ziti monky-deployd"},
		{Name: "timer", Status: Skip, Detail: "laptop_mode"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "OK   config         /etc/monky-deployd/config.yaml loads\n" +
		"FAIL identity-group monky-deployd is not in group ziti — fix: usermod -a -G ziti monky-deployd\n" +
		"SKIP timer          laptop_mode\n"
	if b.String() != want {
		t.Errorf("Print =\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWriteJSON(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []Result
		ok      bool
	}{
		{"passing", []Result{{Name: "config", Status: OK, Detail: "loads"}}, true},
		{"failing", []Result{{Name: "config", Status: OK}, {Name: "timer", Status: Fail, Detail: "disabled", Fix: "systemctl enable --now monky-deployd.timer"}}, false},
		{"no results", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteJSON(&b, "/etc/monky-deployd/config.yaml", tc.results); err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, b.String())
			}
			if doc["schema"] != float64(1) || doc["ok"] != tc.ok || doc["config"] != "/etc/monky-deployd/config.yaml" {
				t.Errorf("document %s", b.String())
			}
			checks, _ := doc["checks"].([]any)
			if len(checks) != len(tc.results) {
				t.Fatalf("checks %v", doc["checks"])
			}
			for _, c := range checks {
				m := c.(map[string]any)
				for _, k := range []string{"name", "status", "detail", "fix"} {
					if _, ok := m[k]; !ok {
						t.Errorf("check %v lacks %q", m, k)
					}
				}
			}
		})
	}
}

func TestComposeMajor(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"2.40.3\n", 2, false},
		{"v2.20.2", 2, false},
		{"1.29.2", 1, false},
		{"5.0.0", 5, false},
		{"2", 2, false},
		{"", 0, true},
		{"v", 0, true},
		{"Docker Compose version v2.40.3", 0, true},
		{"-1.2", 0, true},
		{"99999999999999999999.1", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := composeMajor(tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("composeMajor(%q) = %d, %v; want %d (error %t)", tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// FuzzComposeMajor: the output of `docker compose version --short` is outside input.
func FuzzComposeMajor(f *testing.F) {
	for _, s := range []string{"2.40.3\n", "v2.20.2", "1.29.2", "", "v", "x.y", "2.", "\x00", strings.Repeat("9", 30)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := composeMajor(s)
		if err != nil {
			if n != 0 || !strings.Contains(err.Error(), "is not a version number") {
				t.Errorf("composeMajor(%q) = %d, %v", s, n, err)
			}
			return
		}
		if n < 0 || n > 9999 {
			t.Errorf("composeMajor(%q) = %d", s, n)
		}
	})
}

func TestBytesText(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {100 << 20, "100.0 MiB"},
		{2 << 30, "2.0 GiB"}, {2800 << 20, "2.7 GiB"}, {93 << 30, "93.0 GiB"}, {3 << 40, "3.0 TiB"},
	} {
		if got := bytesText(tc.n); got != tc.want {
			t.Errorf("bytesText(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestModeAllows(t *testing.T) {
	agent := Account{Name: "monky-deployd", UID: 998, GIDs: []uint32{998, 990}}
	for _, tc := range []struct {
		name string
		a    Account
		fi   FileInfo
		want fs.FileMode
		ok   bool
	}{
		{"group read", agent, FileInfo{Mode: 0o640, UID: 997, GID: 990}, permR, true},
		{"not in the group", agent, FileInfo{Mode: 0o640, UID: 997, GID: 991}, permR, false},
		{"other read", agent, FileInfo{Mode: 0o644, UID: 997, GID: 991}, permR, true},
		{"the owner class wins even when it denies", agent, FileInfo{Mode: 0o070, UID: 998, GID: 990}, permR, false},
		{"the group class wins over other", agent, FileInfo{Mode: 0o604, UID: 997, GID: 990}, permR, false},
		{"search on a directory", agent, FileInfo{Mode: fs.ModeDir | 0o711, UID: 0, GID: 0}, permX, true},
		{"write and search", agent, FileInfo{Mode: fs.ModeDir | 0o500, UID: 998, GID: 998}, permW | permX, false},
		{"root", Account{Name: "root"}, FileInfo{Mode: 0o000, UID: 997, GID: 990}, permR, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := modeAllows(tc.a, tc.fi, tc.want); got != tc.ok {
				t.Errorf("modeAllows = %t, want %t", got, tc.ok)
			}
		})
	}
}

// TestTryAs: the access is the system's to judge, asked as the agent — through setpriv with the
// group database's groups when doctor is root, as doctor itself otherwise — and a test(1) that
// cannot answer is an error, not a denial.
func TestTryAs(t *testing.T) {
	agent := Account{Name: "monky-deployd", UID: 998, GIDs: []uint32{997, 990}}
	for _, tc := range []struct {
		name    string
		self    uint32
		argv    []string
		code    int
		ok      bool
		wantErr bool
	}{
		{"root asks as the agent", 0, []string{"setpriv", "--reuid=998", "--regid=997", "--init-groups", "test", "-r", "/f"}, 0, true, false},
		{"root is told no", 0, []string{"setpriv", "--reuid=998", "--regid=997", "--init-groups", "test", "-r", "/f"}, 1, false, false},
		{"the agent tries itself", 998, []string{"test", "-r", "/f"}, 1, false, false},
		{"setpriv cannot run", 0, []string{"setpriv", "--reuid=998", "--regid=997", "--init-groups", "test", "-r", "/f"}, 127, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := runnertest.New(t)
			run.Expect(tc.argv[0], tc.argv[1:]).Returns("", "setpriv: failed", tc.code)
			c := &checker{env: &Env{Self: Account{UID: tc.self}, Runner: run}}
			ok, err := c.tryAs(context.Background(), agent, "/f", "-r")
			if ok != tc.ok || (err != nil) != tc.wantErr {
				t.Errorf("tryAs = %t, %v; want %t, error %t", ok, err, tc.ok, tc.wantErr)
			}
		})
	}
}

func TestOSHelpers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	fi, err := OSStat(p)
	if err != nil || fi.Mode.Perm() != 0o640 || fi.UID != uint32(os.Geteuid()) || fi.GID != uint32(os.Getegid()) || fi.ACL {
		t.Errorf("OSStat = %+v, %v", fi, err)
	}
	if _, err := OSStat(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OSStat(absent) err = %v", err)
	}
	self := CurrentAccount()
	if self.UID != uint32(os.Geteuid()) || self.Name == "" {
		t.Errorf("CurrentAccount = %+v", self)
	}
	root, err := LookupAccount("root")
	if err != nil || root.UID != 0 || len(root.GIDs) == 0 || root.GIDs[0] != 0 {
		t.Errorf("LookupAccount(root) = %+v, %v", root, err)
	}
	if UserName(0) != "root" || GroupName(0) != "root" {
		t.Errorf("UserName(0) = %q, GroupName(0) = %q", UserName(0), GroupName(0))
	}
	if gid, err := LookupGroup("root"); err != nil || gid != 0 {
		t.Errorf("LookupGroup(root) = %d, %v", gid, err)
	}
	if _, err := LookupAccount("no-such-user-monky"); err == nil {
		t.Error("LookupAccount of an unknown user succeeded")
	}
}
