package secret

import (
	"context"
	"fmt"
	"log/slog"
)

// LogHandler redacts every record's message and attribute values by r before inner sees them,
// whoever wrote the line. WithAttrs values are redacted once, when given; other kinds are
// replaced by their printed form only when redaction changed it.
func LogHandler(inner slog.Handler, r *Redactor) slog.Handler {
	return &logHandler{inner: inner, r: r}
}

type logHandler struct {
	inner slog.Handler
	r     *Redactor
}

func (h *logHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *logHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.Redact(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.inner.Handle(ctx, out)
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return &logHandler{inner: h.inner.WithAttrs(red), r: h.r}
}

func (h *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{inner: h.inner.WithGroup(name), r: h.r}
}

func (h *logHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve() // a Value's LogValue is already `***`
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.Redact(v.String()))
	case slog.KindGroup:
		group := v.Group()
		red := make([]any, len(group))
		for i, g := range group {
			red[i] = h.attr(g)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		text := fmt.Sprint(v.Any())
		if err, ok := v.Any().(error); ok {
			text = err.Error()
		} else if red := h.r.Redact(text); red == text {
			return slog.Attr{Key: a.Key, Value: v}
		}
		return slog.String(a.Key, h.r.Redact(text))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
