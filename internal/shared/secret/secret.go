// Package secret keeps secret values out of logs, reports and errors: a Value prints as `***`,
// and a Redactor replaces every value it has been told about in any text on its way out.
package secret

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

const mask = "***"

// Value is a secret string. Its String, GoString and LogValue print `***`; Reveal is the one way
// to the bytes, so a grep for Reveal finds every place a secret leaves the process.
type Value struct{ s string }

// New wraps s.
func New(s string) Value { return Value{s: s} }

// Reveal returns the secret itself.
func (v Value) Reveal() string { return v.s }

// Empty reports whether the value is the empty string.
func (v Value) Empty() bool { return v.s == "" }

func (v Value) String() string       { return mask }
func (v Value) GoString() string     { return mask }
func (v Value) LogValue() slog.Value { return slog.StringValue(mask) }

// MarshalText keeps a Value out of any JSON or YAML document by accident.
func (v Value) MarshalText() ([]byte, error) { return []byte(mask), nil }

// Redactor replaces known secret values with `***`; safe for concurrent use (parallel KV reads add).
type Redactor struct {
	mu     sync.RWMutex
	values []string
}

// minLen: masking one or two characters would shred every log line and protect nothing.
const minLen = 3

// Add registers values, also trimmed, line by line and escaped (JSON, %q, URL, .env) as they
// reach text; derived forms (base64 `auth`) are the caller's to add.
func (r *Redactor) Add(values ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range values {
		for _, cand := range variants(v) {
			if len(cand) >= minLen && !slices.Contains(r.values, cand) {
				r.values = append(r.values, cand)
			}
		}
	}
	// Longest first, so a value that contains another is masked whole.
	sort.Slice(r.values, func(i, j int) bool { return len(r.values[i]) > len(r.values[j]) })
}

func variants(v string) []string {
	base := []string{v, strings.TrimSpace(v)}
	if strings.ContainsAny(v, "\r\n") {
		for _, line := range strings.FieldsFunc(v, func(c rune) bool { return c == '\n' || c == '\r' }) {
			base = append(base, strings.TrimSpace(line))
		}
	}
	out := make([]string, 0, len(base)*7)
	for _, b := range base {
		// A value too short to mask is not masked escaped either: `\"a` is no secret.
		if len(b) < minLen {
			continue
		}
		out = append(out, b)
		out = append(out, escapedForms(b)...)
	}
	return out
}

// escapedForms returns v as JSON (with and without HTML escapes), %q, %+q, URL and .env write it.
func escapedForms(v string) []string {
	var forms []string
	for _, html := range []bool{true, false} {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) == nil {
			forms = append(forms, unquote(strings.TrimSuffix(buf.String(), "\n")))
		}
	}
	return append(forms,
		unquote(strconv.Quote(v)),
		unquote(strconv.QuoteToASCII(v)),
		url.QueryEscape(v),
		url.PathEscape(v),
		dotenvQuoted.Replace(v), // a double-quoted `.env` value, as the agent writes one
		strings.ReplaceAll(v, "$", "$$"),
	)
}

var dotenvQuoted = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "$", "$$")

// unquote drops the quotes around a quoted string.
func unquote(q string) string {
	if len(q) >= 2 {
		return q[1 : len(q)-1]
	}
	return q
}

// Redact returns s with every registered value replaced by `***`, and with the part of one that
// a clip cut beside its mark (clip.Mark): text clipped before it was redacted no longer holds
// the whole value, only its start before the mark or its end after it (seed: 10 of a 14-byte
// password's bytes reached a report that way).
func (r *Redactor) Redact(s string) string { return r.redactWith(s, mask) }

// MinFragment is the shortest part of a value masked beside a clip's mark. Fewer bytes tell a
// reader little (at most 3, of a value they cannot tell is one), while 1 to 3 bytes of the start
// or end of some registered value (KV values include plain words and host names) would mask
// ordinary text beside every "…".
const MinFragment = 4

// redactWith is Redact with another mask, so a test can tell a survivor from mask-spelt text.
// Every value's occurrences and every cut part are found in s as given, then masked together:
// masking one value first could hide the start of another from the search.
func (r *Redactor) redactWith(s, m string) string {
	if r == nil {
		return s
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	var spans []span
	for _, v := range r.values {
		for off := 0; off < len(s); {
			i := strings.Index(s[off:], v)
			if i < 0 {
				break
			}
			spans = append(spans, span{off + i, off + i + len(v)})
			off += i + 1 // occurrences may overlap
		}
	}
	if strings.Contains(s, clip.Mark) {
		spans = r.cutParts(s, spans)
	}
	return maskSpans(s, spans, m)
}

// span is the bytes [from, to) of a text.
type span struct{ from, to int }

// cutParts adds, at each clip mark, the longest start of a value just before it (a head clip's
// cut) and the longest end of one just after it (a tail clip's cut). Each side is read whole, so
// a value that holds the mark itself is found too.
func (r *Redactor) cutParts(s string, spans []span) []span {
	for off := 0; ; {
		i := strings.Index(s[off:], clip.Mark)
		if i < 0 {
			return spans
		}
		i += off
		j := i + len(clip.Mark)
		if k := r.startAtEnd(s[:i]); k > 0 {
			spans = append(spans, span{i - k, i})
		}
		if k := r.endAtStart(s[j:]); k > 0 {
			spans = append(spans, span{j, j + k})
		}
		off = j
	}
}

// maskSpans replaces each run of overlapping or touching spans of s by one m.
func maskSpans(s string, spans []span, m string) string {
	if len(spans) == 0 {
		return s
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].from < spans[b].from })
	var b strings.Builder
	at := 0
	for i := 0; i < len(spans); {
		from, to := spans[i].from, spans[i].to
		for i++; i < len(spans) && spans[i].from <= to; i++ {
			to = max(to, spans[i].to)
		}
		b.WriteString(s[at:from])
		b.WriteString(m)
		at = to
	}
	b.WriteString(s[at:])
	return b.String()
}

// startAtEnd is the length of the longest start of a value (at least MinFragment bytes) that t
// ends with, 0 when none.
func (r *Redactor) startAtEnd(t string) int {
	best := 0
	for _, v := range r.values {
		for k := min(len(v), len(t)); k >= MinFragment && k > best; k-- {
			if t[len(t)-k] == v[0] && t[len(t)-k:] == v[:k] {
				best = k
				break
			}
		}
	}
	return best
}

// endAtStart is the length of the longest end of a value (at least MinFragment bytes) that t
// starts with, 0 when none.
func (r *Redactor) endAtStart(t string) int {
	best := 0
	for _, v := range r.values {
		for k := min(len(v), len(t)); k >= MinFragment && k > best; k-- {
			if t[k-1] == v[len(v)-1] && t[:k] == v[len(v)-k:] {
				best = k
				break
			}
		}
	}
	return best
}

// Truncate redacts s and keeps its last n bytes: a log's last lines explain a failure. Redacting
// first is the order that matters: a cut through a value would leave a part no redactor knows.
func (r *Redactor) Truncate(s string, n int) string {
	return clip.LastBytes(r.Redact(s), n)
}

// TruncateHead redacts s and keeps its first n bytes ("…" last when cut): operators grep `CODE:`.
func (r *Redactor) TruncateHead(s string, n int) string {
	s = r.Redact(s)
	switch {
	case len(s) <= n:
		return s
	case n < len("…"):
		return ""
	}
	return clip.Head(s, n-len("…"))
}

// Mask replaces every non-empty value in s with `***`, for a client's one or two secrets.
func Mask(s string, values ...string) string {
	for _, v := range values {
		if v != "" {
			s = strings.ReplaceAll(s, v, mask)
		}
	}
	return s
}

// MaskError masks values in err's text (holding no value); errors.Is/As still see the chain.
func MaskError(err error, values ...string) error {
	return maskedError{err: err, msg: Mask(err.Error(), values...)}
}

type maskedError struct {
	err error
	msg string
}

func (m maskedError) Error() string { return m.msg }
func (m maskedError) Unwrap() error { return m.err }

// RedactFragments is Redact for the words of a parser that may quote a part of a value it split
// or trimmed before it failed (compose-go's loader: `Invalid ip address: …` quotes what stood
// before a `:`): besides every whole value, every run of s of at least MinFragment bytes that is
// also a part of a registered value is masked. It masks more than Redact (four bytes of a value
// may be an ordinary word's too), so it is for such messages only, which are short and rare.
func (r *Redactor) RedactFragments(s string) string {
	if r == nil {
		return s
	}
	s = r.Redact(s)
	r.mu.RLock()
	defer r.mu.RUnlock()
	grams := map[string]bool{}
	for _, v := range r.values {
		for i := 0; i+MinFragment <= len(v); i++ {
			grams[v[i:i+MinFragment]] = true
		}
	}
	partOfValue := func(t string) bool {
		for _, v := range r.values {
			if strings.Contains(v, t) {
				return true
			}
		}
		return false
	}
	var spans []span
	end := 0 // where the runs found so far end: a start inside one grows only past it
	for i := 0; i+MinFragment <= len(s); i++ {
		if !grams[s[i:i+MinFragment]] {
			continue
		}
		k := max(MinFragment, end-i) // what a run found before masks already
		if k > MinFragment && !partOfValue(s[i:i+k]) {
			k = MinFragment // that run was widened to whole characters: grow from the start
		}
		for i+k < len(s) && partOfValue(s[i:i+k+1]) {
			k++
		}
		from, to := i, i+k
		// Whole characters: a run may start or end inside a multibyte one.
		for from > 0 && !utf8.RuneStart(s[from]) {
			from--
		}
		for to < len(s) && !utf8.RuneStart(s[to]) {
			to++
		}
		spans = append(spans, span{from, to})
		end = max(end, to)
	}
	return maskSpans(s, spans, mask)
}
