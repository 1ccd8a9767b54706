package tick_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// timedBao measures the wall time spent inside ReadMany.
type timedBao struct {
	tick.Bao
	mu    sync.Mutex
	spent time.Duration
}

func (t *timedBao) ReadMany(ctx context.Context, token secret.Value, mount string, reqs []bao.KVRequest, limit int) (map[string]secret.Value, error) {
	start := time.Now()
	out, err := t.Bao.ReadMany(ctx, token, mount, reqs, limit)
	t.mu.Lock()
	t.spent += time.Since(start)
	t.mu.Unlock()
	return out, err
}

// BenchmarkApplyTwentySecrets applies a bundle with 20 secrets while every KV read of the fake
// OpenBao takes 20 ms. The figure of record is reads-per-latency: the wall time spent reading
// divided by one read's latency (target < 3: the reads run concurrently).
func BenchmarkApplyTwentySecrets(b *testing.B) {
	const latency = 20 * time.Millisecond
	var spent time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		h := newBenchHarness(b, latency)
		var entries []string
		var tmpl strings.Builder
		for j := 0; j < 20; j++ {
			name := fmt.Sprintf("SECRET_%02d", j)
			h.bao.Put(env, strings.ToLower(name), "value", fmt.Sprintf("value-%02d-%d", j, i))
			entries = append(entries, fmt.Sprintf(`{"var": %q, "path": %q}`, name, strings.ToLower(name)))
			fmt.Fprintf(&tmpl, "%s=${%s}\n", name, name)
		}
		h.desire(bundleSpec{template: tmpl.String(), manifest: `{"entries": [` + strings.Join(entries, ",") + `]}`})
		tb := &timedBao{}
		deps := h.deps()
		newBao := deps.NewBao
		deps.NewBao = func(addr string) (tick.Bao, error) {
			c, err := newBao(addr)
			tb.Bao = c
			return tb, err
		}
		b.StartTimer()
		if err := tick.New(h.cfg, deps, tick.Options{}).Tick(context.Background()); err != nil {
			b.Fatalf("apply: %v\n%s", err, h.logs.String())
		}
		b.StopTimer()
		spent += tb.spent
		b.StartTimer()
	}
	b.ReportMetric(float64(spent.Microseconds())/float64(b.N)/1000, "read-ms")
	b.ReportMetric(float64(spent)/float64(b.N)/float64(latency), "reads-per-latency")
}
