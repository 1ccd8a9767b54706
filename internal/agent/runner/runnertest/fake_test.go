package runnertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// recorder stands in for *testing.T so the Fake's own failures can be asserted.
type recorder struct {
	testing.TB
	mu       sync.Mutex
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Cleanup(f func()) { r.cleanups = append(r.cleanups, f) }
func (r *recorder) finish() []string {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
	return r.errs
}

func newRecorded(t *testing.T) (*Fake, *recorder) {
	rec := &recorder{TB: t}
	return New(rec), rec
}

func TestFakeAnswersAndRecords(t *testing.T) {
	f, rec := newRecorded(t)
	f.Expect("docker", []string{"compose", "pull"}).Returns("out", "err", 1)
	f.ExpectPrefix("docker", []string{"info"}).Returns("{}", "", 0)

	res, err := f.Run(context.Background(), runner.Cmd{Name: "docker", Args: []string{"compose", "pull"}, Env: []string{"DOCKER_CONFIG=/a", "DOCKER_CONFIG=/b"}})
	if err != nil || string(res.Stdout) != "out" || string(res.Stderr) != "err" || res.ExitCode != 1 {
		t.Errorf("exact: got %+v, %v", res, err)
	}
	res, err = f.Run(context.Background(), runner.Cmd{Name: "docker", Args: []string{"info", "--format", "{{json .}}"}})
	if err != nil || string(res.Stdout) != "{}" {
		t.Errorf("prefix: got %+v, %v", res, err)
	}

	calls := f.Calls()
	if len(calls) != 2 {
		t.Fatalf("calls = %d, want 2", len(calls))
	}
	if v, ok := calls[0].Getenv("DOCKER_CONFIG"); !ok || v != "/b" {
		t.Errorf("Getenv(DOCKER_CONFIG) = %q, %v; want the last value /b", v, ok)
	}
	if _, ok := calls[1].Getenv("DOCKER_CONFIG"); ok {
		t.Error("Getenv found a variable the call never set")
	}
	if errs := rec.finish(); len(errs) != 0 {
		t.Errorf("fake reported failures: %q", errs)
	}
}

func TestFakeUnexpectedCallsFail(t *testing.T) {
	tests := []struct {
		name string
		cmd  runner.Cmd
	}{
		{"other program", runner.Cmd{Name: "systemctl", Args: []string{"compose", "pull"}}},
		{"extra argument on an exact expectation", runner.Cmd{Name: "docker", Args: []string{"compose", "pull", "-q"}}},
		{"missing argument", runner.Cmd{Name: "docker", Args: []string{"compose"}}},
		{"prefix that does not match", runner.Cmd{Name: "docker", Args: []string{"image", "prune"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, rec := newRecorded(t)
			f.Expect("docker", []string{"compose", "pull"}).AnyTimes()
			f.ExpectPrefix("docker", []string{"info"}).AnyTimes()
			_, err := f.Run(context.Background(), tt.cmd)
			if !errors.Is(err, ErrUnexpected) {
				t.Errorf("err = %v, want ErrUnexpected", err)
			}
			errs := rec.finish()
			if len(errs) != 1 || !strings.Contains(errs[0], tt.cmd.String()) {
				t.Errorf("fake reported %q, want one failure naming %q", errs, tt.cmd.String())
			}
		})
	}
}

func TestFakeSequencesAndCounts(t *testing.T) {
	f, rec := newRecorded(t)
	ps := []string{"compose", "ps"}
	f.Expect("docker", ps).Returns("first", "", 0)
	f.Expect("docker", ps).Returns("second", "", 0).Times(2)
	for i, want := range []string{"first", "second", "second"} {
		res, err := f.Run(context.Background(), runner.Cmd{Name: "docker", Args: ps})
		if err != nil || string(res.Stdout) != want {
			t.Errorf("call %d: got %q, %v; want %q", i, res.Stdout, err, want)
		}
	}
	if _, err := f.Run(context.Background(), runner.Cmd{Name: "docker", Args: ps}); !errors.Is(err, ErrUnexpected) {
		t.Errorf("a call beyond the declared count: err = %v, want ErrUnexpected", err)
	}
	if errs := rec.finish(); len(errs) != 1 {
		t.Errorf("fake reported %q, want exactly the one extra call", errs)
	}
}

func TestFakeUnusedExpectationsFail(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(*Fake)
		wantFails int
	}{
		{"never called", func(f *Fake) { f.Expect("docker", []string{"info"}) }, 1},
		{"called too few times", func(f *Fake) {
			f.Expect("docker", []string{"info"}).Times(2)
			_, _ = f.Run(context.Background(), runner.Cmd{Name: "docker", Args: []string{"info"}})
		}, 1},
		{"AnyTimes may stay unused", func(f *Fake) { f.Expect("docker", []string{"info"}).AnyTimes() }, 0},
		{"Times(0) may stay unused", func(f *Fake) { f.Expect("docker", []string{"info"}).Times(0) }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, rec := newRecorded(t)
			tt.setup(f)
			if errs := rec.finish(); len(errs) != tt.wantFails {
				t.Errorf("fake reported %q, want %d failure(s)", errs, tt.wantFails)
			}
		})
	}
}

func TestFakeFailsAndDo(t *testing.T) {
	f, rec := newRecorded(t)
	missing := fmt.Errorf("start systemctl: %w", runner.ErrNotFound)
	f.Expect("systemctl", []string{"show"}).Fails(missing)
	f.Expect("sh", nil).Do(func(_ context.Context, c runner.Cmd) (runner.Result, error) {
		return runner.Result{Stdout: c.Stdin}, nil
	})
	if _, err := f.Run(context.Background(), runner.Cmd{Name: "systemctl", Args: []string{"show"}}); !errors.Is(err, runner.ErrNotFound) {
		t.Errorf("Fails: err = %v, want ErrNotFound", err)
	}
	res, err := f.Run(context.Background(), runner.Cmd{Name: "sh", Stdin: []byte("echo")})
	if err != nil || string(res.Stdout) != "echo" {
		t.Errorf("Do: got %q, %v", res.Stdout, err)
	}
	if errs := rec.finish(); len(errs) != 0 {
		t.Errorf("fake reported failures: %q", errs)
	}
}

func TestFakeConcurrentUse(t *testing.T) {
	f, rec := newRecorded(t)
	const n = 32
	f.ExpectPrefix("docker", []string{"compose"}).Returns("ok", "", 0).Times(n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := f.Run(context.Background(), runner.Cmd{Name: "docker", Args: []string{"compose", fmt.Sprint(i)}}); err != nil {
				t.Errorf("call %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if got := len(f.Calls()); got != n {
		t.Errorf("recorded %d calls, want %d", got, n)
	}
	if errs := rec.finish(); len(errs) != 0 {
		t.Errorf("fake reported failures: %q", errs)
	}
}
