// Package version holds the release version, commit and build date embedded in both binaries at
// link time.
package version

import (
	"fmt"
	"runtime/debug"
)

// Version, Commit and Date are set with -ldflags "-X .../internal/shared/version.Version=0.3.0
// -X ….Commit=3f9a0c1d2e4b -X ….Date=2026-12-02T10:00:00Z" by the Makefile and packaging.mk; a
// plain `go build` reports the development marker and, from Go's own build stamp when the tree
// is a git checkout, its commit and time.
var (
	Version = "0.3.0-dev"
	Commit  = ""
	Date    = ""
)

// Build is the commit and build date, "unknown" where neither the link nor Go's stamp says.
func Build() (commit, date string) {
	commit, date = Commit, Date
	if commit == "" || date == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				switch {
				case s.Key == "vcs.revision" && commit == "":
					commit = s.Value
				case s.Key == "vcs.time" && date == "":
					date = s.Value
				}
			}
		}
	}
	if len(commit) > 12 {
		commit = commit[:12]
	}
	if commit == "" {
		commit = "unknown"
	}
	if date == "" {
		date = "unknown"
	}
	return commit, date
}

// Line is what `version` and `--version` print after the program's name:
// `0.3.0 (commit 3f9a0c1d2e4b, built 2026-12-02T10:00:00Z, go1.25.4, linux/amd64)`.
func Line(goVersion, platform string) string {
	commit, date := Build()
	return fmt.Sprintf("%s (commit %s, built %s, %s, %s)", Version, commit, date, goVersion, platform)
}
