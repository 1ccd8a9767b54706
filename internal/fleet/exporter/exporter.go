package exporter

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
)

// Reader reads both sources once; a failure names its Source, for the error count.
type Reader func(ctx context.Context) (*report.Document, error)

// Source names the sources a Reader's error says failed ("ziti controller", "tenancy"); none
// when it cannot tell. A source of Sources it does not name was read to the end: it is up.
type Source func(err error) []string

// Options configure an Exporter.
type Options struct {
	Read    Reader
	Source  Source
	Sources []string      // every source, so each has its series before its first failure
	Refresh time.Duration // the least time between two readings
	Timeout time.Duration // bounds one reading
	Now     func() time.Time
	Log     *slog.Logger
}

// Exporter serves scrapes from the last good view; only Run reads the sources, once per Refresh.
type Exporter struct {
	o Options

	mu sync.RWMutex
	// page is the exposition served, gzipped, rebuilt after every reading: 10,000 envs are
	// 19 MB of text and 1 MB of gzip, held for as long as they are served.
	page []byte
	h    health
}

// health is what the exporter says of itself.
type health struct {
	views       int64 // readings that gave a view
	viewAt      time.Time
	lastAttempt time.Time
	lastOK      bool
	took        time.Duration
	view        View
	sources     map[string]*sourceHealth
}

type sourceHealth struct {
	up          bool
	lastSuccess time.Time
	errors      int64
}

// New returns an Exporter that has not read anything yet: it serves its own health only.
func New(o Options) *Exporter {
	e := &Exporter{o: o}
	e.h.sources = map[string]*sourceHealth{}
	for _, s := range o.Sources {
		e.h.sources[s] = &sourceHealth{}
	}
	e.render()
	return e
}

// Run reads the fleet now and then every Refresh until ctx ends.
func (e *Exporter) Run(ctx context.Context) {
	t := time.NewTicker(e.o.Refresh)
	defer t.Stop()
	for {
		e.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh rebuilds the exposition; a failed reading keeps the last good view (view_fresh 0).
func (e *Exporter) Refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, e.o.Timeout)
	defer cancel()
	start := e.o.Now()
	doc, err := e.o.Read(ctx)
	var v View
	if err == nil {
		v, err = NewView(doc)
	}
	end := e.o.Now()
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return // stopping: not a source failure
	}
	e.mu.Lock()
	h := &e.h
	h.lastAttempt, h.took, h.lastOK = end, end.Sub(start), err == nil
	if err == nil {
		h.views++
		h.view, h.viewAt = v, end
		for _, s := range h.sources {
			s.up, s.lastSuccess = true, end
		}
	} else {
		failed := e.o.Source(err)
		if len(failed) == 0 {
			failed = []string{"unknown"}
		}
		down := map[string]bool{}
		for _, name := range failed {
			s := h.sources[name]
			if s == nil {
				s = &sourceHealth{}
				h.sources[name] = s
			}
			s.up = false
			s.errors++
			down[name] = true
		}
		if !down["unknown"] {
			// Every source is read to its end whatever the others do: one not named answered.
			for name, s := range h.sources {
				if !down[name] && name != "unknown" {
					s.up, s.lastSuccess = true, end
				}
			}
		}
	}
	e.mu.Unlock()
	if err != nil {
		e.o.Log.Warn("exporter: reading the fleet failed; serving the last good view", "error", err.Error())
	}
	e.render()
}

// render rebuilds the exposition from the current view and health.
func (e *Exporter) render() {
	e.mu.RLock()
	h := e.h
	srcs := make(map[string]sourceHealth, len(h.sources))
	for k, v := range h.sources {
		srcs[k] = *v
	}
	e.mu.RUnlock()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // the level is valid
	err := encode(zw, append(envFamilies(h.view), healthCollector{h: h, sources: srcs})...)
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		e.o.Log.Error("exporter: " + err.Error())
		return
	}
	e.mu.Lock()
	e.page = buf.Bytes()
	e.mu.Unlock()
}

// ServeHTTP serves /metrics from the last exposition.
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/metrics":
	case "/":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("fleetctl exporter: the fleet's verdicts are at /metrics\n"))
		return
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	e.mu.RLock()
	page := e.page
	e.mu.RUnlock()
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	w.Header().Set("Vary", "Accept-Encoding")
	if acceptsGzip(r) { // Prometheus does, as promhttp's handlers serve it
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(len(page)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(page)
		}
		return
	}
	if r.Method == http.MethodHead {
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(page))
	if err != nil { // the exporter wrote it: never
		http.Error(w, "exporter: "+err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.Copy(w, zr)
}

// acceptsGzip reads Accept-Encoding as promhttp does: gzip listed, without q=0.
func acceptsGzip(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept-Encoding") {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
			if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
				continue
			}
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

var (
	descUp        = newDesc("exporter_source_up", "1 when the last reading of the source succeeded.", "source")
	descSuccess   = newDesc("exporter_source_last_success_timestamp_seconds", "When the source was last read successfully (Unix time; absent: never).", "source")
	descErrors    = newDesc("exporter_source_errors_total", "Readings that failed because of the source.", "source")
	descTook      = newDesc("exporter_listing_duration_seconds", "How long the last reading of both sources took.")
	descViewAt    = newDesc("exporter_view_timestamp_seconds", "When the view served was read (Unix time; absent: no view yet).")
	descFresh     = newDesc("exporter_view_fresh", "1 when the view served is the latest reading's; 0 when the latest reading failed and an older view is served.")
	descViews     = newDesc("exporter_views_total", "Readings that gave a view.")
	descAttemptAt = newDesc("exporter_last_reading_timestamp_seconds", "When the exporter last tried to read the sources (Unix time).")
)

// healthCollector emits the exporter's own series.
type healthCollector struct {
	h       health
	sources map[string]sourceHealth
}

func (c healthCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descSuccess, descErrors, descTook, descViewAt, descFresh, descViews, descAttemptAt} {
		ch <- d
	}
}

func (c healthCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	ts := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	for name, s := range c.sources {
		g(descUp, b2f(s.up), name)
		if !s.lastSuccess.IsZero() {
			g(descSuccess, ts(s.lastSuccess), name)
		}
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(s.errors), name)
	}
	ch <- prometheus.MustNewConstMetric(descViews, prometheus.CounterValue, float64(c.h.views))
	if c.h.lastAttempt.IsZero() {
		return
	}
	g(descAttemptAt, ts(c.h.lastAttempt))
	g(descTook, c.h.took.Seconds())
	g(descFresh, b2f(c.h.lastOK))
	if !c.h.viewAt.IsZero() {
		g(descViewAt, ts(c.h.viewAt))
	}
}
