package itest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Fatal/Skip instead of acting on the real test; like the
// real ones, both end the goroutine.
type recorder struct {
	testing.TB
	fatal, skip bool
	msg         string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatal(args ...any)                 { r.fatal, r.msg = true, fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal(fmt.Sprintf(format, args...)) }
func (r *recorder) Skip(args ...any)                  { r.skip, r.msg = true, fmt.Sprint(args...); runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any)  { r.Skip(fmt.Sprintf(format, args...)) }

func runRecorded(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{
		"": false, "false": false, "0": false, "FALSE": false, " false ": false,
		"true": true, "1": true, "yes": true, "TRUE": true, "woodpecker": true,
	} {
		if got := InCI(v); got != want {
			t.Errorf("InCI(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestUnavailableFailsInCI(t *testing.T) {
	for _, tc := range []struct {
		ci              bool
		wantFatal, skip bool
	}{{ci: false, skip: true}, {ci: true, wantFatal: true}} {
		r := runRecorded(t, func(tb testing.TB) { unavailableIn(tb, tc.ci, "needs root") })
		if r.fatal != tc.wantFatal || r.skip != tc.skip || !strings.HasPrefix(r.msg, "needs root") {
			t.Errorf("ci=%v: fatal=%v skip=%v (%q)", tc.ci, r.fatal, r.skip, r.msg)
		}
	}
}
