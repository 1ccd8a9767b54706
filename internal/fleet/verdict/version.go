package verdict

import (
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// Version is a release version, MAJOR.MINOR.PATCH with an optional pre-release (-rc.1, -dev)
// and build (+deb12), compared as semver: 0.2.0-dev < 0.2.0, build ignored.
type Version struct {
	v   *semver.Version
	raw string
}

func (v Version) String() string { return v.raw }

// ParseVersion reads a strict semver version; a leading "v" is accepted.
func ParseVersion(s string) (Version, error) {
	v, err := semver.StrictNewVersion(strings.TrimPrefix(s, "v"))
	if err != nil {
		return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH[-PRE][+BUILD]: %w", s, err)
	}
	return Version{v: v, raw: s}, nil
}

// Compare returns -1, 0 or +1 as v sorts before, with, or after w.
func (v Version) Compare(w Version) int { return v.v.Compare(w.v) }
