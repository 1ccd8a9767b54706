package capread

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

var errBig = errors.New("too large")

func TestReader(t *testing.T) {
	for _, tc := range []struct {
		body string
		want error
	}{
		{"", nil}, {"abc", nil}, {"abcd", nil}, {"abcde", errBig}, {strings.Repeat("x", 1<<16), errBig},
	} {
		// One byte a read, as a slow network gives them, and whole.
		for _, r := range []io.Reader{strings.NewReader(tc.body), iotest.OneByteReader(strings.NewReader(tc.body))} {
			got, err := io.ReadAll(New(r, 4, errBig))
			if !errors.Is(err, tc.want) {
				t.Errorf("%d bytes: err %v, want %v", len(tc.body), err, tc.want)
			}
			if tc.want == nil && string(got) != tc.body {
				t.Errorf("%d bytes read as %q", len(tc.body), got)
			}
			if len(got) > 4 {
				t.Errorf("%d bytes: %d read past the cap", len(tc.body), len(got))
			}
		}
	}
}
