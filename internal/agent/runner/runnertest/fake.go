// Package runnertest provides a scripted runner.Runner for tests: every command a test expects is
// declared up front, and any other command fails the test, so a change in argv or environment
// (a missing DOCKER_CONFIG, a flag that moved) cannot pass unnoticed.
package runnertest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// ErrUnexpected is returned (wrapped) for a call no expectation matched.
var ErrUnexpected = errors.New("runnertest: unexpected call")

// Call is one command the code under test ran, as it asked for it.
type Call struct {
	runner.Cmd
}

// Getenv returns the value the call set for key in Cmd.Env (the last one wins, as for a real
// process), and whether it set it at all. The inherited environment is not consulted.
func (c Call) Getenv(key string) (string, bool) {
	val, found := "", false
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			val, found = v, true
		}
	}
	return val, found
}

// Fake is a runner.Runner that answers from expectations. It is safe for concurrent use.
//
// A call is matched against the expectations in the order they were declared; the first one
// whose name and args match and that has uses left answers it. A call no expectation matches is
// reported with t.Errorf (naming the command and its env) and gets an error wrapping
// ErrUnexpected. When the test ends, every expectation not marked AnyTimes must have been used
// exactly as often as declared.
type Fake struct {
	t     testing.TB
	mu    sync.Mutex
	exps  []*Expectation
	calls []Call
}

// New returns a Fake bound to t; the check of unused expectations runs at t's cleanup.
func New(t testing.TB) *Fake {
	t.Helper()
	f := &Fake{t: t}
	t.Cleanup(f.verify)
	return f
}

// Expectation is one scripted command. Configure it with Returns/Do/Fails and Times/AnyTimes
// before the code under test runs.
type Expectation struct {
	name   string
	args   []string
	prefix bool
	times  int // -1: any number
	used   int
	do     func(context.Context, runner.Cmd) (runner.Result, error)
}

// Expect declares a command whose args must equal args exactly. By default it answers once with
// exit code 0 and no output.
func (f *Fake) Expect(name string, args []string) *Expectation {
	return f.add(&Expectation{name: name, args: slices.Clone(args), times: 1})
}

// ExpectPrefix declares a command whose args must start with prefix.
func (f *Fake) ExpectPrefix(name string, prefix []string) *Expectation {
	return f.add(&Expectation{name: name, args: slices.Clone(prefix), prefix: true, times: 1})
}

func (f *Fake) add(e *Expectation) *Expectation {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exps = append(f.exps, e)
	return e
}

// Returns sets the output and exit code the command answers with.
func (e *Expectation) Returns(stdout, stderr string, code int) *Expectation {
	e.do = func(context.Context, runner.Cmd) (runner.Result, error) {
		return runner.Result{Stdout: []byte(stdout), Stderr: []byte(stderr), ExitCode: code}, nil
	}
	return e
}

// Fails makes the command fail to start with err, as runner.Exec does for a missing program
// (pass an error wrapping runner.ErrNotFound) or an ended context.
func (e *Expectation) Fails(err error) *Expectation {
	e.do = func(context.Context, runner.Cmd) (runner.Result, error) { return runner.Result{}, err }
	return e
}

// Do answers the command with fn, for answers that depend on the call or on the test's state.
func (e *Expectation) Do(fn func(ctx context.Context, c runner.Cmd) (runner.Result, error)) *Expectation {
	e.do = fn
	return e
}

// Times sets how many calls this expectation answers; the test fails at cleanup unless it
// answered exactly that many.
func (e *Expectation) Times(n int) *Expectation {
	e.times = n
	return e
}

// AnyTimes lets the expectation answer any number of calls, including none.
func (e *Expectation) AnyTimes() *Expectation {
	e.times = -1
	return e
}

func (e *Expectation) matches(c runner.Cmd) bool {
	if c.Name != e.name || (e.times >= 0 && e.used >= e.times) {
		return false
	}
	if e.prefix {
		return len(c.Args) >= len(e.args) && slices.Equal(c.Args[:len(e.args)], e.args)
	}
	return slices.Equal(c.Args, e.args)
}

func (e *Expectation) String() string {
	s := e.name + " " + strings.Join(e.args, " ")
	if e.prefix {
		s += " …"
	}
	return s
}

// Run implements runner.Runner.
func (f *Fake) Run(ctx context.Context, c runner.Cmd) (runner.Result, error) {
	c.Args = slices.Clone(c.Args)
	c.Env = slices.Clone(c.Env)
	c.Stdin = slices.Clone(c.Stdin)
	f.mu.Lock()
	f.calls = append(f.calls, Call{Cmd: c})
	var hit *Expectation
	for _, e := range f.exps {
		if e.matches(c) {
			hit = e
			break
		}
	}
	if hit == nil {
		f.mu.Unlock()
		f.t.Errorf("runnertest: unexpected call: %s (env %q)", c, c.Env)
		return runner.Result{ExitCode: -1}, fmt.Errorf("%w: %s", ErrUnexpected, c)
	}
	hit.used++
	do := hit.do
	f.mu.Unlock()
	if do == nil {
		return runner.Result{}, nil
	}
	return do(ctx, c)
}

// Calls returns every call made so far, matched or not, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *Fake) verify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.exps {
		if e.times >= 0 && e.used != e.times {
			f.t.Errorf("runnertest: expected %s to run %d time(s), ran %d", e, e.times, e.used)
		}
	}
}
