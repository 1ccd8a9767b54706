// Package failplan is the failure switch the fleet fakes (admintest, zititest) share: per
// operation, let a number of calls through, then hold each answer and fail it with a status or a
// malformed body, written in the fake's own error shape. fleetctl's partial-listing, timeout and
// bad-page paths are tested against it.
package failplan

import (
	"context"
	"sync"
	"time"
)

// Failure changes how an operation answers. The zero Failure restores normal service.
type Failure struct {
	// After lets this many calls succeed before the failure applies (e.g. fail page 3 only).
	After int
	// Delay holds every answer this long, or until the client gives up. A Delay with no Status
	// and no Malformed is simply a slow service.
	Delay time.Duration
	// Status answers with this HTTP status, in the fake's error envelope.
	Status int
	// Malformed answers 200 with a body that is not the documented shape.
	Malformed bool
	// Times, when above 0, restores normal service after this many failed calls.
	Times int
}

// Plan holds the Failure switched on per operation. The zero Plan serves normally; it is safe
// for concurrent use.
type Plan[Op comparable] struct {
	mu sync.Mutex
	m  map[Op]*state
}

type state struct {
	Failure
	calls int
}

// Set switches f on for op from now on, counting After from the next call; Set(op, Failure{})
// restores normal service.
func (p *Plan[Op]) Set(op Op, f Failure) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f == (Failure{}) {
		delete(p.m, op)
		return
	}
	if p.m == nil {
		p.m = map[Op]*state{}
	}
	p.m[op] = &state{Failure: f}
}

// Next counts a call to op and returns the Failure it must suffer (the zero Failure once none
// applies), after holding it for the Failure's Delay. gone reports that ctx ended during the
// Delay: the client gave up, and what the fake does then is its own choice.
func (p *Plan[Op]) Next(ctx context.Context, op Op) (f Failure, gone bool) {
	p.mu.Lock()
	if st := p.m[op]; st != nil {
		st.calls++
		if st.calls > st.After && (st.Times <= 0 || st.calls <= st.After+st.Times) {
			f = st.Failure
		}
	}
	p.mu.Unlock()
	if f.Delay > 0 {
		t := time.NewTimer(f.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return f, true
		}
	}
	return f, false
}
