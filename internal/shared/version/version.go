// Package version holds the release version embedded in both binaries at link time.
package version

// Version is set with -ldflags "-X .../internal/shared/version.Version=0.3.0" by the Makefile from the
// VERSION file; a plain `go build` reports the development marker.
var Version = "0.3.0-dev"
