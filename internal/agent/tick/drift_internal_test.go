package tick

import (
	"slices"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

func TestFindDrift(t *testing.T) {
	h1, h2 := strings.Repeat("a", 64), strings.Repeat("b", 64)
	mem := &state.DriftMemory{Sha: "x", Services: map[string]state.ServiceHash{
		"api": {ConfigHash: h1, Containers: 2}, "worker": {ConfigHash: h2, Containers: 1}}}
	c := func(svc, st, hash string) protocol.Container {
		return protocol.Container{Service: svc, Name: svc + "-" + st, State: st, ConfigHash: hash}
	}
	for _, tc := range []struct {
		name string
		mem  *state.DriftMemory
		cs   []protocol.Container
		want []string
	}{
		{"as applied", mem, []protocol.Container{c("api", "running", h1), c("api", "running", h1), c("worker", "running", h2)}, nil},
		{"restarting is compose's own restart policy at work", mem, []protocol.Container{c("api", "restarting", h1), c("api", "running", h1), c("worker", "restarting", h2)}, nil},
		{"paused is reported by health, not recreated", mem, []protocol.Container{c("api", "paused", h1), c("api", "running", h1), c("worker", "running", h2)}, nil},
		{"a replica gone", mem, []protocol.Container{c("api", "running", h1), c("worker", "running", h2)}, []string{"api: 1 of 2 containers missing"}},
		{"created and dead", mem, []protocol.Container{c("api", "created", h1), c("api", "dead", h1), c("worker", "exited", h2)}, []string{"api: created", "api: dead", "worker: exited"}},
		{"the same finding once", mem, []protocol.Container{c("api", "exited", h1), c("api", "exited", h1), c("worker", "running", h2)}, []string{"api: exited"}},
		{"a hash unknown is not drift", mem, []protocol.Container{c("api", "running", ""), c("api", "running", h1), c("worker", "running", h2)}, nil},
		{"another hash", mem, []protocol.Container{c("api", "running", h2), c("api", "running", h1), c("worker", "running", h2)}, []string{"api: config differs from the release"}},
		{"an orphan and a missing service", mem, []protocol.Container{c("api", "running", h1), c("api", "running", h1), c("db", "running", h1)}, []string{"db: not in the release", "worker: missing"}},
		{"nothing at all", mem, nil, []string{"api: missing", "worker: missing"}},
		{"nothing, hashes unknown", &state.DriftMemory{Sha: "x"}, nil, []string{"no containers"}},
		{"nothing, no memory", nil, []protocol.Container{}, []string{"no containers"}},
		{"no memory: states only", nil, []protocol.Container{c("api", "exited", h1), c("db", "running", h2)}, []string{"api: exited"}},
	} {
		if got := findDrift(tc.mem, tc.cs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// BenchmarkFindDrift is what drift detection adds to a converged tick: no process, no write,
// one pass over the `ps` it already ran (here 20 services, one replica each).
func BenchmarkFindDrift(b *testing.B) {
	mem := &state.DriftMemory{Sha: "x", Services: map[string]state.ServiceHash{}}
	var cs []protocol.Container
	for i := range 20 {
		svc := "svc" + strings.Repeat("x", i)
		h := strings.Repeat(string(rune('a'+i%6)), 64)
		mem.Services[svc] = state.ServiceHash{ConfigHash: h, Containers: 1}
		cs = append(cs, protocol.Container{Service: svc, Name: svc + "-1", State: "running", Health: "healthy", ConfigHash: h})
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := findDrift(mem, cs); d != nil {
			b.Fatal(d)
		}
	}
}
