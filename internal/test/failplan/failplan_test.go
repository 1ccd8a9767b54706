package failplan

import (
	"context"
	"testing"
	"time"
)

func TestNext(t *testing.T) {
	fail := Failure{After: 2, Status: 503}
	tests := []struct {
		name string
		set  []Failure // switched on for "list", in order, before the calls
		want []Failure // what successive calls to "list" suffer
	}{
		{"nothing switched on", nil, []Failure{{}, {}}},
		{"After calls pass first", []Failure{fail}, []Failure{{}, {}, fail, fail}},
		{"the zero Failure restores service", []Failure{fail, {}}, []Failure{{}, {}, {}}},
		{"setting again restarts the count", []Failure{{Status: 500}, fail}, []Failure{{}, {}, fail}},
		{"Times failures, then service", []Failure{{After: 1, Status: 401, Times: 2}},
			[]Failure{{}, {After: 1, Status: 401, Times: 2}, {After: 1, Status: 401, Times: 2}, {}, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Plan[string]
			for _, f := range tc.set {
				p.Set("list", f)
			}
			for i, want := range tc.want {
				got, gone := p.Next(context.Background(), "list")
				if got != want || gone {
					t.Fatalf("call %d: got %+v gone=%v, want %+v", i+1, got, gone, want)
				}
			}
			if got, _ := p.Next(context.Background(), "kit"); got != (Failure{}) {
				t.Errorf("another op suffers %+v", got)
			}
		})
	}
}

func TestNextDelay(t *testing.T) {
	tests := []struct {
		name     string
		delay    time.Duration
		cancel   bool
		wantGone bool
	}{
		{"a delay that runs out answers", time.Nanosecond, false, false},
		// An hour's delay returns at once when the client has gone: the test does not wait it out.
		{"a client that gives up ends the hold", time.Hour, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Plan[string]
			f := Failure{Delay: tc.delay, Malformed: true}
			p.Set("list", f)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			got, gone := p.Next(ctx, "list")
			if got != f || gone != tc.wantGone {
				t.Fatalf("got %+v gone=%v, want %+v gone=%v", got, gone, f, tc.wantGone)
			}
		})
	}
}
