package admin

import (
	"bytes"
	"unicode/utf8"
)

// peekNext finds the top-level "next" of an agents page without decoding the page: the next
// page is requested as soon as its cursor is known, and a full decode of 500 agents would keep
// it waiting. ok is false whenever the answer is not plainly there — a key spelled another
// way that encoding/json would still match, an escaped string, a value that is neither a
// string nor null, broken JSON — and the caller then decodes properly. The page itself is
// always decoded and checked in full afterwards; this only decides when to ask for the next.
func peekNext(b []byte) (next *string, ok bool) {
	depth := 0
	found := false
	var val *string
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case '"':
			end := stringEnd(b, i)
			if end < 0 {
				return nil, false
			}
			if depth == 1 && isKey(b, end+1) {
				key := b[i+1 : end]
				switch {
				case bytes.Equal(key, []byte("next")):
					v, after, vok := scalar(b, end+1)
					if !vok {
						return nil, false
					}
					found, val = true, v // the last of duplicate keys wins, as in encoding/json
					i = after - 1
					continue
				case bytes.EqualFold(key, []byte("next")), bytes.IndexByte(key, '\\') >= 0:
					return nil, false
				}
			}
			i = end
		}
	}
	if depth != 0 || !found {
		return nil, false
	}
	return val, true
}

// stringEnd returns the index of the quote closing the string opened at i, or -1.
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}

// isKey reports whether the string just closed is followed by a colon.
func isKey(b []byte, i int) bool {
	for ; i < len(b); i++ {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

// scalar reads the value after "next": — null or a string without escapes — and returns the
// index just past it.
func scalar(b []byte, i int) (*string, int, bool) {
	for ; i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r' || b[i] == ':'); i++ {
	}
	switch {
	case bytes.HasPrefix(b[i:], []byte("null")):
		return nil, i + 4, true
	case i < len(b) && b[i] == '"':
		end := stringEnd(b, i)
		// Escapes and invalid UTF-8 (which encoding/json turns into U+FFFD) are left to it.
		if end < 0 || bytes.IndexByte(b[i+1:end], '\\') >= 0 || !utf8.Valid(b[i+1:end]) {
			return nil, 0, false
		}
		s := string(b[i+1 : end])
		return &s, end + 1, true
	}
	return nil, 0, false
}
