package version

import (
	"regexp"
	"testing"
)

// What `make build` and the package link in (-X …Commit=, -X …Date=) is what --version prints,
// the commit cut to 12 hex digits; a binary linked without them names Go's own stamp or says
// "unknown", never an empty field.
func TestLine(t *testing.T) {
	saved := [3]string{Version, Commit, Date}
	t.Cleanup(func() { Version, Commit, Date = saved[0], saved[1], saved[2] })

	Version, Commit, Date = "0.3.0", "3f9a0c1d2e4b5a6978877665544332211aabbccd", "2026-12-02T10:00:00Z"
	if got, want := Line("go1.25.4", "linux/amd64"), "0.3.0 (commit 3f9a0c1d2e4b, built 2026-12-02T10:00:00Z, go1.25.4, linux/amd64)"; got != want {
		t.Errorf("linked: Line = %q, want %q", got, want)
	}

	Commit, Date = "", ""
	c, d := Build()
	// go test stamps no vcs settings: both unknown. A `go build` in a checkout stamps both.
	if !regexp.MustCompile(`^([0-9a-f]{1,12}|unknown)$`).MatchString(c) || d == "" {
		t.Errorf("unlinked: Build = %q, %q", c, d)
	}
	if got := Line("go1.25.4", "linux/amd64"); !regexp.MustCompile(`^0\.3\.0 \(commit ([0-9a-f]{1,12}|unknown), built [^,]+, go1\.25\.4, linux/amd64\)$`).MatchString(got) {
		t.Errorf("unlinked: Line = %q", got)
	}
}
