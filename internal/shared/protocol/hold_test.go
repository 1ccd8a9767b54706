package protocol

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// The agent writes a hold's text by CheckHoldText and fleetctl reads it by CheckSentHoldText;
// both count characters, not bytes, and refuse control and format characters alike.
func TestCheckHoldText(t *testing.T) {
	for _, tc := range []struct {
		name, v string
		max     int
		want    string // "" accepted by both
	}{
		{"plain", "debugging the db", MaxHoldReason, ""},
		{"200 euro signs: 600 bytes, 200 characters", strings.Repeat("€", 200), MaxHoldReason, ""},
		{"201 euro signs", strings.Repeat("€", 201), MaxHoldReason, "201 characters, at most 200"},
		{"64 characters of a name", strings.Repeat("ü", 64), MaxHoldBy, ""},
		{"65 characters of a name", strings.Repeat("ü", 65), MaxHoldBy, "65 characters, at most 64"},
		{"accents, CJK and emoji", "ünïcode — 日本語 🚧 ok", MaxHoldReason, ""},
		{"a no-break space and an ideographic space", "wait\u00a0for\u3000db", MaxHoldReason, ""},
		{"empty", "", MaxHoldReason, "empty"},
		{"blank", " \u00a0 ", MaxHoldReason, "empty"},
		{"invalid UTF-8", "a\xffb", MaxHoldReason, "invalid UTF-8"},
		{"a newline", "a\nb", MaxHoldReason, "contains U+000A, a control or format character"},
		{"an escape", "red \x1b[31m", MaxHoldReason, "contains U+001B"},
		{"DEL", "a\x7f", MaxHoldReason, "contains U+007F"},
		{"a C1 control", "a\u0085b", MaxHoldReason, "contains U+0085"},
		{"a right-to-left override", "alice\u202eevil", MaxHoldBy, "contains U+202E"},
		{"a zero-width space", "ali\u200bce", MaxHoldBy, "contains U+200B"},
		{"a byte order mark", "\ufeffalice", MaxHoldBy, "contains U+FEFF"},
		{"a line separator", "a\u2028b", MaxHoldReason, "contains U+2028"},
		{"a paragraph separator", "a\u2029b", MaxHoldReason, "contains U+2029"},
		{"private use", "a\ue000b", MaxHoldReason, "contains U+E000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, check := range map[string]func(string, int) error{"CheckHoldText": CheckHoldText, "CheckSentHoldText": CheckSentHoldText} {
				err := check(tc.v, tc.max)
				if tc.want == "" && err != nil {
					t.Errorf("%s: %v", name, err)
				}
				if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
					t.Errorf("%s: %v, want %q", name, err, tc.want)
				}
			}
		})
	}
}

// A character this build's Unicode tables do not know may be a letter to an agent built on a
// later Unicode: the agent does not write it, fleetctl lets it through. (U+FDD0 is a
// noncharacter, unassigned for good, so the test does not age with Go's tables.)
func TestCheckSentHoldTextLetsUnassignedThrough(t *testing.T) {
	const unassigned = "a\ufdd0b"
	if err := CheckHoldText(unassigned, MaxHoldReason); err == nil || !strings.Contains(err.Error(), "U+FDD0") {
		t.Errorf("CheckHoldText: %v, want a refusal naming U+FDD0", err)
	}
	if err := CheckSentHoldText(unassigned, MaxHoldReason); err != nil {
		t.Errorf("CheckSentHoldText: %v", err)
	}
}

// Whatever the agent writes, fleetctl reads: one hold fleetctl refused would refuse the listing
// of the whole fleet.
func FuzzHoldText(f *testing.F) {
	f.Add(strings.Repeat("€", 200), MaxHoldReason)
	f.Add("alice", MaxHoldBy)
	f.Add("a\u202eb", MaxHoldReason)
	f.Add("wait\u00a0for\u3000db", MaxHoldReason)
	f.Add("a\ufdd0b", MaxHoldReason)
	f.Fuzz(func(t *testing.T, v string, max int) {
		if CheckHoldText(v, max) != nil {
			return
		}
		if err := CheckSentHoldText(v, max); err != nil {
			t.Fatalf("the agent writes %q, fleetctl refuses it: %v", v, err)
		}
		if strings.TrimSpace(v) == "" || !utf8.ValidString(v) || utf8.RuneCountInString(v) > max || strings.ContainsAny(v, "\n\r\t\x1b\u202e\u200b\u2028") {
			t.Fatalf("the agent writes %q", v)
		}
	})
}
