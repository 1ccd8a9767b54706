// Package clip shortens text from outside for one line of a message or a log, marking the cut
// with "…" and never splitting a UTF-8 sequence.
package clip

import "unicode/utf8"

// Mark is how every clip marks a cut (LastBytes apart): the redactor looks beside it for the
// part of a secret a clip made before redaction left (secret.Redactor).
const Mark = "…"

const ellipsis = Mark

// Head keeps the start of s, at most n bytes of it, followed by "…" when it cut.
func Head(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// Tail keeps the end of s, at most n bytes of it, after "…" when it cut: the last lines of a
// command's output are the ones that explain its failure.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return ellipsis + LastBytes(s, n)
}

// LastBytes is the end of s, at most n bytes, cut on a rune boundary, unmarked.
func LastBytes(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s
}

// Runes keeps at most n runes of s, the last of them "…" when it cut: for a table column.
func Runes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + ellipsis
}
