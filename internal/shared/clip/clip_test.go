package clip

import (
	"testing"
	"unicode/utf8"
)

func TestClip(t *testing.T) {
	cases := []struct {
		name string
		f    func(string, int) string
		in   string
		n    int
		want string
	}{
		{"head fits", Head, "abc", 3, "abc"},
		{"head cut", Head, "abcdef", 3, "abc…"},
		{"head mid rune", Head, "aé", 2, "a…"},
		{"head zero", Head, "é", 0, "…"},
		{"tail fits", Tail, "abc", 3, "abc"},
		{"tail cut", Tail, "abcdef", 3, "…def"},
		{"tail mid rune", Tail, "éa", 2, "…a"},
		{"last bytes", LastBytes, "abcdef", 2, "ef"},
		{"last bytes none", LastBytes, "abc", 0, ""},
		{"runes fit", Runes, "ééé", 3, "ééé"},
		{"runes cut", Runes, "éééé", 3, "éé…"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.f(tc.in, tc.n)
			if got != tc.want || !utf8.ValidString(got) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
