package protocol

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A hold's reason and by are an operator's words, shown on one line by the agent's journal and
// status and by every fleetctl table. The bounds count characters (runes), not bytes: 200 × "€"
// is 600 bytes and a fine reason.
const (
	MaxHoldReason = 200
	MaxHoldBy     = 64
)

// CheckHoldText is the agent's check of a hold's reason or by, before it writes one and when it
// loads one: not blank, valid UTF-8, at most maxRunes characters, and graphic ones only (letters,
// marks, digits, punctuation, symbols, spaces). Control characters break the line; format
// characters (U+202E turns the rest of a table row around, U+200B hides in a name) are invisible
// and have no place in either. The error names no field; callers add it.
func CheckHoldText(v string, maxRunes int) error {
	return checkHoldText(v, maxRunes, func(r rune) bool { return !unicode.IsGraphic(r) })
}

// CheckSentHoldText is fleetctl's check of a hold an agent sent: CheckHoldText, except that a
// character this binary's Unicode tables do not know passes. An agent built on a later Unicode
// may know it as a letter, and fleetctl refusing what an agent writes refuses the whole fleet's
// listing; what is refused is only what is known to be a control or format character.
func CheckSentHoldText(v string, maxRunes int) error {
	return checkHoldText(v, maxRunes, func(r rune) bool {
		return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs, unicode.Zl, unicode.Zp)
	})
}

func checkHoldText(v string, maxRunes int, refused func(rune) bool) error {
	switch {
	case strings.TrimSpace(v) == "":
		return errors.New("empty")
	case !utf8.ValidString(v):
		return errors.New("invalid UTF-8")
	}
	if i := strings.IndexFunc(v, refused); i >= 0 {
		r, _ := utf8.DecodeRuneInString(v[i:])
		return fmt.Errorf("contains %U, a control or format character (a newline, a tab, an escape, an invisible mark); write it on one line", r)
	}
	if n := utf8.RuneCountInString(v); n > maxRunes {
		return fmt.Errorf("%d characters, at most %d", n, maxRunes)
	}
	return nil
}
