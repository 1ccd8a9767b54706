package secret

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
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

func FuzzRedact(f *testing.F) {
	f.Add("s3cret", "a s3cret b")
	f.Add("multi\nline", "x multi y line z")
	f.Fuzz(func(t *testing.T, value, text string) {
		var r Redactor
		r.Add(value)
		out := r.Redact(strings.ReplaceAll(text, "VALUE", value) + value)
		if v := strings.TrimSpace(value); len(v) >= minLen && !strings.ContainsAny(value, "\r\n") && strings.Contains(out, v) && !strings.Contains(mask, v) {
			t.Errorf("value %q survives in %q", v, out)
		}
	})
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
