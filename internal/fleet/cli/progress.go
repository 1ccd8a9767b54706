package cli

import (
	"fmt"
	"io"
	"sync"
	"time"
)

const progressDelay = time.Second

// progress draws one line on stderr, pages fetched of how many, only on a terminal and only once
// the work has taken longer than progressDelay.
type progress struct {
	w       io.Writer
	enabled bool
	stop    func() bool

	mu                      sync.Mutex
	armed, shown            bool
	zitiDone, zitiTotal     int
	tenancyPages, tenAgents int
}

func (g *globalOptions) newProgress() *progress {
	p := &progress{w: g.stderr, enabled: g.deps.IsTerminal(g.deps.Stderr)}
	if p.enabled {
		p.stop = g.deps.After(progressDelay, p.arm)
	}
	return p
}

func (p *progress) arm() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed = true
	p.drawLocked()
}

func (p *progress) ziti(done, total int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.zitiDone, p.zitiTotal = done, total
	p.drawLocked()
}

func (p *progress) tenancy(pages, agents int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tenancyPages, p.tenAgents = pages, agents
	p.drawLocked()
}

func (p *progress) drawLocked() {
	if !p.enabled || !p.armed {
		return
	}
	z := "ziti: authenticating"
	if p.zitiTotal > 0 {
		z = fmt.Sprintf("ziti: %d/%d pages", p.zitiDone, p.zitiTotal)
	}
	t := "tenancy: waiting"
	if p.tenancyPages > 0 {
		t = fmt.Sprintf("tenancy: %d pages, %d agents", p.tenancyPages, p.tenAgents)
	}
	// \r and erase-line: the line is redrawn in place and left clean.
	fmt.Fprintf(p.w, "\r\x1b[K%s · %s", z, t)
	p.shown = true
}

func (p *progress) done() {
	if p.stop != nil {
		p.stop()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	p.enabled = false
}
