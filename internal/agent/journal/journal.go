// Package journal formats the agent's log for the systemd journal as docs/OPERATIONS.md quotes
// it: `LEVEL message key=value …`, no timestamp (journald adds its own).
package journal

import (
	"context"

	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// Handler writes `LEVEL msg k=v` lines, quoting values with strconv.Quote where needed.
type Handler struct {
	mu    *sync.Mutex
	w     io.Writer
	level slog.Leveler
	attrs []slog.Attr
	group string
	// tail ends every line: ` tick_id=…`, so that all lines of one tick are found by one grep.
	tail string
}

// New returns a Handler writing to w at or above level.
func New(w io.Writer, level slog.Leveler) *Handler {
	return &Handler{mu: &sync.Mutex{}, w: w, level: level}
}

func (h *Handler) Enabled(_ context.Context, lvl slog.Level) bool { return lvl >= h.level.Level() }

func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(levelName(r.Level))
	b.WriteByte(' ')
	b.WriteString(r.Message)
	for _, a := range h.attrs {
		writeAttr(&b, "", a) // already carry the group they were added under
	}
	r.Attrs(func(a slog.Attr) bool {
		writeAttr(&b, h.group, a)
		return true
	})
	b.WriteString(h.tail)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func writeAttr(b *strings.Builder, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	b.WriteByte(' ')
	if group != "" {
		b.WriteString(group)
		b.WriteByte('.')
	}
	b.WriteString(a.Key)
	b.WriteByte('=')
	b.WriteString(quote(a.Value.String()))
}

// TickKey is the field every line of a tick ends in.
const TickKey = "tick_id"

// WithTick returns a Handler whose every line ends in `tick_id=<id>`, whatever group or fields
// are added later: one grep finds a whole tick, and fleetctl shows the id of a box's last tick.
func (h *Handler) WithTick(id string) *Handler {
	c := *h
	c.tail = ""
	if id != "" {
		c.tail = " " + TickKey + "=" + quote(id)
	}
	return &c
}

// WithAttrs returns a Handler that adds attrs to every line, under the current group.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]slog.Attr(nil), h.attrs...)
	for _, a := range attrs {
		if h.group != "" {
			a.Key = h.group + "." + a.Key
		}
		c.attrs = append(c.attrs, a)
	}
	return &c
}

// WithGroup prefixes later keys with name.
func (h *Handler) WithGroup(name string) slog.Handler {
	c := *h
	if c.group != "" {
		name = c.group + "." + name
	}
	c.group = name
	return &c
}

func levelName(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return "ERROR"
	case l >= slog.LevelWarn:
		return "WARN"
	case l >= slog.LevelInfo:
		return "INFO"
	default:
		return "DEBUG"
	}
}

func quote(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\r\"=") {
		return strconv.Quote(s)
	}
	return s
}

// Discard is a logger that writes nothing, for tests and library defaults.
func Discard() *slog.Logger { return slog.New(New(io.Discard, slog.LevelError+100)) }
