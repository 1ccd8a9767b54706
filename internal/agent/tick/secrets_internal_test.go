package tick

import (
	"slices"
	"testing"
)

// markedValues reads each marker's value out of a .env value when the line reads one way only,
// and otherwise only what every reading gives it, naming the markers it could not pin down.
func TestMarkedValues(t *testing.T) {
	const a, b = "MONKYMARK0X", "MONKYMARK1X"
	for _, tc := range []struct {
		name, stand, real string
		proven, unsure    []string
	}{
		{"whole value", a, "s3cret", []string{"s3cret"}, nil},
		{"inside a url", "https://" + a + "/api", "https://db.internal/api", []string{"db.internal"}, nil},
		{"dsn", "postgres://app:" + a + "@" + b + "/app", "postgres://app:s3cr3t-db-p4ss@db.internal/app",
			[]string{"s3cr3t-db-p4ss", "db.internal"}, nil},
		{"user:pass", a + ":" + b, "svc-user:pa55-w0rd", []string{"svc-user", "pa55-w0rd"}, nil},
		{"the same marker twice", a + "/" + a, "pw/pw", []string{"pw", "pw"}, nil},
		// `svc-user:pa55` + `w0rd` or `svc-user` + `pa55:w0rd`: each is sure only of what both give it.
		{"a piece inside a value", a + ":" + b, "svc-user:pa55:w0rd", []string{"svc-user", "w0rd"}, []string{a, b}},
		// No piece between them: any split reads, so nothing per marker is proven.
		{"side by side", a + b, "firstsecond", nil, []string{a, b}},
		// The third marker is pinned by the pieces around it, the first two are not.
		{"side by side then pinned", a + b + "@" + "MONKYMARK2X", "firstsecond@host", []string{"host"}, []string{a, b}},
		{"hand-edited", "postgres://app:" + a + "@db/app", "mysql://other", nil, []string{a}},
		{"piece missing", a + "@" + b, "no-at-sign", nil, []string{a, b}},
		{"head and tail overlap", "ab" + a + "ba", "aba", nil, []string{a}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proven, unsure := markedValues(tc.stand, tc.real)
			if !slices.Equal(proven, tc.proven) || !slices.Equal(unsure, tc.unsure) {
				t.Errorf("markedValues(%q, %q) = %q, unsure %q; want %q, unsure %q", tc.stand, tc.real, proven, unsure, tc.proven, tc.unsure)
			}
		})
	}
}
