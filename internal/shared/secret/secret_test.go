package secret

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

func TestValueNeverPrints(t *testing.T) {
	v := New("hunter2-secret")
	var logBuf bytes.Buffer
	slog.New(slog.NewTextHandler(&logBuf, nil)).Info("x", "token", v)
	js, _ := json.Marshal(map[string]any{"v": v})
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", v), "String": v.String(), "%#v": fmt.Sprintf("%#v", v),
		"%+v struct": fmt.Sprintf("%+v", struct{ V Value }{v}), "slog": logBuf.String(), "json": string(js),
	} {
		if strings.Contains(s, "hunter2") || !strings.Contains(s, "***") {
			t.Errorf("%s printed %q", name, s)
		}
	}
	if v.Reveal() != "hunter2-secret" || v.Empty() || !New("").Empty() {
		t.Error("Reveal/Empty")
	}
}

func TestRedactor(t *testing.T) {
	var r Redactor
	r.Add("s3cret", "  padded-value  ", "ab", "line-one\nline-two", "s3cret-longer")
	for _, tc := range []struct{ in, want string }{
		{"pw=s3cret!", "pw=***!"},
		{"pw=s3cret-longer", "pw=***"},  // the longer value is masked whole
		{"x padded-value y", "x *** y"}, // trimmed variant
		{"ab is too short to mask", "ab is too short to mask"},
		{"got line-two only", "got *** only"}, // a line of a multi-line value
		{"nothing here", "nothing here"},
	} {
		if got := r.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var nilR *Redactor
	if nilR.Redact("s3cret") != "s3cret" {
		t.Error("nil redactor must pass text through")
	}
}

func TestTruncateKeepsTheEndAndRedactsFirst(t *testing.T) {
	var r Redactor
	r.Add("topsecret")
	got := r.Truncate("start "+strings.Repeat("x", 50)+" topsecret end", 20)
	if len(got) > 20 || !strings.HasSuffix(got, "*** end") || strings.Contains(got, "topsecret") {
		t.Errorf("Truncate = %q", got)
	}
	// Never splits a UTF-8 sequence.
	got = r.Truncate("ééééé", 3)
	if !strings.HasPrefix(got, "é") && got != "" {
		t.Errorf("Truncate split a rune: %q", got)
	}
}

func TestRedactorConcurrent(t *testing.T) {
	var r Redactor
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r.Add(fmt.Sprintf("value-%02d", i))
			_ = r.Redact("value-00 value-15")
		}(i)
	}
	wg.Wait()
	if got := r.Redact("value-00 value-15"); got != "*** ***" {
		t.Errorf("after concurrent adds: %q", got)
	}
}

// FuzzRedact checks that no registered value, raw or escaped, survives in any text around it.
// The oracle redacts with a sentinel byte the value does not contain, so a value that the
// `***` mask and its neighbours happen to spell (a value ending in `*` beside a mask) is not
// taken for a leak, while a real survivor still is: with a mask that shares no byte with the
// value, every occurrence in the output lies in text the redactor left alone.
func FuzzRedact(f *testing.F) {
	f.Add("s3cret", "a s3cret b")
	f.Add("multi\nline", "x multi y line z")
	f.Add("a**", "aVALUE") // the mask beside "a" spells the value: no leak
	f.Add(`pa"ss\word`, `{"p": "VALUE"}`)
	f.Add("p@ss w/rd&", "https://u:VALUE@h/?x=VALUE")
	f.Add(`d0llar$ign"pw`, "P: VALUE")
	f.Fuzz(func(t *testing.T, value, text string) {
		sentinel, ok := absentByte(value)
		if !ok {
			t.Skip("the value holds every byte")
		}
		var r Redactor
		r.Add(value)
		in := strings.ReplaceAll(text, "VALUE", value) + value
		forms := []string{value}
		if v := strings.TrimSpace(value); len(v) >= minLen && !strings.ContainsAny(value, "\r\n") {
			js, _ := json.Marshal(v)
			forms = append(forms, v, string(js[1:len(js)-1]), strconv.Quote(v), strconv.QuoteToASCII(v), url.QueryEscape(v), url.PathEscape(v),
				strings.ReplaceAll(v, "$", "$$"),                                // compose's escape
				strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", "$$").Replace(v)) // a double-quoted .env value
			for _, f := range forms[1:] {
				in += " " + f
			}
		}
		out := r.redactWith(in, sentinel)
		for _, f := range forms {
			if len(f) >= minLen && len(strings.TrimSpace(value)) >= minLen && strings.Contains(out, f) {
				t.Errorf("form %q of %q survives in %q", f, value, out)
			}
		}
		// The real mask is the same substitution.
		if got, want := r.Redact(in), r.redactWith(in, mask); got != want {
			t.Errorf("Redact = %q, redactWith(mask) = %q", got, want)
		}
	})
}

// absentByte returns a one-byte string that s does not contain.
func absentByte(s string) (string, bool) {
	for b := 0; b < 256; b++ {
		if strings.IndexByte(s, byte(b)) < 0 {
			return string([]byte{byte(b)}), true
		}
	}
	return "", false
}

func TestRedactorMasksEscapedForms(t *testing.T) {
	var r Redactor
	r.Add(`pa"ss\w<rd> &x`, "d0llar$ign-pw")
	if got := r.Redact("x=d0llar$$ign-pw"); got != "x=***" { // compose's $$
		t.Errorf("Redact = %q", got)
	}
	// Compose's `$$` where it differs from the .env form (which also escapes the quote).
	r.Add(`d0llar$ign"pw`)
	if got := r.Redact(`environment: {P: 'd0llar$$ign"pw'}`); got != `environment: {P: '***'}` {
		t.Errorf("Redact = %q: the $$-escaped form survives", got)
	}
	if got := r.Redact(`P="d0llar$$ign\"pw"`); got != `P="***"` {
		t.Errorf("Redact = %q: the .env form survives", got)
	}
	for _, in := range []string{
		`{"k":"pa\"ss\\w\u003crd\u003e \u0026x"}`,           // encoding/json
		`{"k":"pa\"ss\\w<rd> &x"}`,                          // JSON without HTML escaping
		fmt.Sprintf("error: %q", `pa"ss\w<rd> &x`),          // %q
		"https://h/?p=" + url.QueryEscape(`pa"ss\w<rd> &x`), // a query
		"https://h/" + url.PathEscape(`pa"ss\w<rd> &x`),     // a path
		`DB_PASSWORD="pa\"ss\\w<rd> &x"`,                    // a .env line, double-quoted
	} {
		if got := r.Redact(in); strings.Contains(got, "ss") {
			t.Errorf("Redact(%s) = %s: an escaped form survives", in, got)
		}
	}
}

func TestTruncateHeadKeepsTheStart(t *testing.T) {
	r := &Redactor{}
	r.Add("topsecret")
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"PRIVILEGED_REFUSED: a: privileged, b: privileged", 100, "PRIVILEGED_REFUSED: a: privileged, b: privileged"},
		{"CODE: topsecret " + strings.Repeat("x", 50), 24, "CODE: *** xxxxxxxxxxx…"},
		// "é" is two bytes: the cut never lands inside one.
		{"ab" + strings.Repeat("é", 10), 8, "abé…"},
		{"abcdef", 2, ""},
	} {
		got := r.TruncateHead(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n {
			t.Errorf("TruncateHead(%q, %d) = %q (%d bytes), want %q", tc.in, tc.n, got, len(got), tc.want)
		}
	}
}

func TestLogHandlerRedactsEveryLine(t *testing.T) {
	var r Redactor
	var buf bytes.Buffer
	log := slog.New(LogHandler(slog.NewTextHandler(&buf, nil), &r)).With("env", "env-qa-02")
	r.Add(`pa"ss-word`) // registered after the logger was made: lines written later are masked
	log.Info("login with pa\"ss-word failed",
		"error", fmt.Errorf("bao: %q refused", `pa"ss-word`),
		"detail", `{"p":"pa\"ss-word"}`,
		"list", []string{"x", `pa"ss-word`},
		"count", 3,
		slog.Group("g", "url", "https://h/?p="+url.QueryEscape(`pa"ss-word`)))
	out := buf.String()
	for _, leak := range []string{`pa"ss-word`, `pa\"ss-word`, url.QueryEscape(`pa"ss-word`), "ss-word"} {
		if strings.Contains(out, leak) {
			t.Errorf("journal line holds %q: %s", leak, out)
		}
	}
	for _, keep := range []string{"env=env-qa-02", "count=3", "g.url=", "error=", "failed"} {
		if !strings.Contains(out, keep) {
			t.Errorf("journal line lost %q: %s", keep, out)
		}
	}
}

// BenchmarkRedactLogTail: a report's log tail (2 KiB) against the secrets of a large bundle (40
// values, each in its escaped forms too).
func BenchmarkRedactLogTail(b *testing.B) {
	var r Redactor
	for i := range 40 {
		r.Add(fmt.Sprintf(`secret-value-%02d "quoted" & <tagged>`, i))
	}
	text := strings.Repeat("api-1 | GET /health 200 in 3ms user=someone\n", 2048/44)
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Redact(text)
	}
}

// A text clipped before it was redacted holds only a part of a value beside the clip's mark: its
// start before "…" (a head cut), its end after it (a tail cut). Those are masked from 4 bytes;
// ordinary words beside a mark, and parts elsewhere in the text, are left alone.
func TestRedactorMasksAValueCutBesideTheMark(t *testing.T) {
	const pw = "Q7ZK9W4PV2MJ8H"
	var r Redactor
	r.Add(pw, `pa"ss-word-9`)
	for _, tc := range []struct{ in, want string }{
		{"pull failed: …" + pw[4:] + " (rc=1)", "pull failed: …*** (rc=1)"},
		{"loader: bad port " + pw[:10] + "…", "loader: bad port ***…"},
		{"a " + pw[:4] + "… b …" + pw[10:] + " c", "a ***… b …*** c"},
		{"three bytes tell little: " + pw[:3] + "… …" + pw[11:], "three bytes tell little: " + pw[:3] + "… …" + pw[11:]},
		{"a part away from a mark is no cut: " + pw[:8] + " …", "a part away from a mark is no cut: " + pw[:8] + " …"},
		{"the loader said… then stopped…", "the loader said… then stopped…"},
		{`{"p": "pa\"ss-w…`, `{"p": "***…`}, // a cut through the JSON form
		{"…" + pw + "…", "…***…"},
	} {
		if got := r.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// FuzzClippedValueNeverLeaks cuts a text holding a value with every clip at any length, before
// redacting it (the wrong order, which a careless caller may still take): no part of the value
// of MinFragment bytes or more survives. Filler and mask are bytes the value does not hold, so
// every survivor in the output is a real one.
func FuzzClippedValueNeverLeaks(f *testing.F) {
	f.Add("Q7ZK9W4PV2MJ8H", 40, 600, 60)
	f.Add("pa\"ss-word", 3, 10, 5)
	f.Add("é-secret-é", 1, 1, 7)
	f.Fuzz(func(t *testing.T, value string, before, after, n int) {
		if len(value) < minLen || len(value) > 256 || strings.TrimSpace(value) != value || !utf8.ValidString(value) ||
			strings.Contains(value, clip.Mark) {
			// not a value the redactor keeps whole, not text a clip keeps byte for byte, or a
			// value whose parts the clip's own mark would spell
			t.Skip()
		}
		before, after, n = abs(before)%700, abs(after)%700, abs(n)%1400
		sentinel, ok := absentASCII(value)
		if !ok {
			t.Skip("the value holds every ASCII byte")
		}
		fill, ok := absentASCII(value + sentinel)
		if !ok {
			t.Skip("no filler byte")
		}
		var r Redactor
		r.Add(value)
		in := strings.Repeat(fill, before) + value + strings.Repeat(fill, after)
		for name, clipped := range map[string]string{
			"head": clip.Head(in, n), "tail": clip.Tail(in, n), "runes": clip.Runes(in, max(n, 1)),
		} {
			out := r.redactWith(clipped, sentinel)
			for k := len(value); k >= MinFragment; k-- {
				for i := 0; i+k <= len(value); i++ {
					if strings.Contains(out, value[i:i+k]) {
						t.Fatalf("%s(%d): %q of %q survives in %q", name, n, value[i:i+k], value, out)
					}
				}
			}
		}
	})
}

// absentASCII returns a printable ASCII byte that s does not contain.
func absentASCII(s string) (string, bool) {
	for b := byte('!'); b <= '~'; b++ {
		if strings.IndexByte(s, b) < 0 {
			return string([]byte{b}), true
		}
	}
	return "", false
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// unquote takes off exactly the two quotes, the empty quoted string included.
func TestUnquote(t *testing.T) {
	for q, want := range map[string]string{`""`: "", `"a"`: "a", `"pa\"ss"`: `pa\"ss`} {
		if got := unquote(q); got != want {
			t.Errorf("unquote(%s) = %q, want %q", q, got, want)
		}
	}
}
