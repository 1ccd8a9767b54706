package secret

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A parser that splits a value and quotes a part of it leaves no part of MinFragment bytes or
// more: compose-go quoted `00::` of a value `00:::` as an ip address.
func TestRedactFragments(t *testing.T) {
	r := &Redactor{}
	r.Add("00:::", "hunter2-long")
	for in, want := range map[string]string{
		"Invalid ip address xxxx00:: address": "Invalid ip address xxxx*** address",
		"bad port hunter2 and -long":          "bad port *** and ***",
		"the whole 00::: value":               "the whole *** value",
		"nothing of them here: 00: hun":       "nothing of them here: 00: hun",
	} {
		if got := r.RedactFragments(in); got != want {
			t.Errorf("RedactFragments(%q) = %q, want %q", in, got, want)
		}
	}
	if got := (*Redactor)(nil).RedactFragments("x"); got != "x" {
		t.Errorf("a nil Redactor changed the text: %q", got)
	}
	// Redact alone leaves the fragments: RedactFragments is the one that finds them.
	if got := r.Redact("Invalid ip address xxxx00:: address"); !strings.Contains(got, "00::") {
		t.Errorf("Redact masked a fragment (%q): the test above proves nothing", got)
	}
}

// A masked part starting or ending inside a multibyte character takes the whole character: the
// loader's words were made valid UTF-8 before, and stay so.
func TestRedactFragmentsKeepsUTF8(t *testing.T) {
	r := &Redactor{}
	r.Add("©1234", "abcd€")
	for _, in := range []string{"é1234 x", "x abcd€ and abcd\xe2\x82 y", "1234©1234"} {
		in = strings.ToValidUTF8(in, "?")
		if got := r.RedactFragments(in); !utf8.ValidString(got) || strings.Contains(got, "1234") || strings.Contains(got, "abcd") {
			t.Errorf("RedactFragments(%q) = %q: want valid UTF-8 and no part of a secret", in, got)
		}
	}
}
