package admin

import (
	"encoding/json"
	"testing"
)

func TestPeekNext(t *testing.T) {
	for _, tc := range []struct {
		body   string
		want   string // "" means nil
		wantOK bool
	}{
		{`{"now":"x","agents":[],"next":"abc"}`, "abc", true},
		{`{"next": null, "agents": []}`, "", true},
		{`{"agents":[{"next":"inner","timer":{"next":"deeper"}}],"next":"outer"}`, "outer", true},
		{`{"agents":[{"x":"a \"next\": \"fake\""}],"next":"real"}`, "real", true},
		{`{"next":"a","next":"b"}`, "b", true},
		{`{"Next":"a"}`, "", false},
		{`{"ne\u0078t":"a"}`, "", false},
		{`{"next":"a\"b"}`, "", false},
		{`{"next":5}`, "", false},
		{`{"agents":[]}`, "", false},
		{`{"next":"a"`, "", false},
		{`{"next":"a`, "", false},
		{`"next"`, "", false},
	} {
		got, ok := peekNext([]byte(tc.body))
		if ok != tc.wantOK {
			t.Errorf("%s: ok %v, want %v", tc.body, ok, tc.wantOK)
			continue
		}
		if ok && ((got == nil) != (tc.want == "") || (got != nil && *got != tc.want)) {
			t.Errorf("%s: got %v, want %q", tc.body, got, tc.want)
		}
	}
}

// Whenever peekNext answers, it answers what encoding/json would.
func FuzzPeekNext(f *testing.F) {
	for _, s := range []string{
		`{"now":"x","agents":[{"env_id":"a"}],"next":"c1"}`, `{"next":null}`, `{"next":"a","next":"b"}`,
		`{"a":{"next":"x"},"next":"y"}`, `{"NEXT":"a"}`, `[]`, `{"next":"\u0041"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := peekNext(b)
		if !ok {
			return
		}
		var head struct {
			Next *string `json:"next"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return // the full parse refuses the page anyway
		}
		if (got == nil) != (head.Next == nil) || (got != nil && *got != *head.Next) {
			t.Fatalf("peekNext %v, encoding/json %v", got, head.Next)
		}
	})
}
