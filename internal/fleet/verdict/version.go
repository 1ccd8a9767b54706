package verdict

import (
	"fmt"
	"strconv"
	"strings"
)

// Version is a release version, MAJOR.MINOR.PATCH with an optional pre-release (-rc.1, -dev)
// and build (+deb12). Pre-releases sort before their release (0.2.0-dev < 0.2.0), as in semver.
type Version struct {
	Major, Minor, Patch int
	Pre                 string
	raw                 string
}

func (v Version) String() string { return v.raw }

// ParseVersion reads a version; a leading "v" is accepted.
func ParseVersion(s string) (Version, error) {
	raw := s
	s = strings.TrimPrefix(s, "v")
	if s == "" {
		return Version{}, fmt.Errorf("version %q: empty", raw)
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		if i == len(s)-1 {
			return Version{}, fmt.Errorf("version %q: empty build", raw)
		}
		s = s[:i]
	}
	core, pre, hasPre := strings.Cut(s, "-")
	if hasPre && pre == "" {
		return Version{}, fmt.Errorf("version %q: empty pre-release", raw)
	}
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return Version{}, fmt.Errorf("version %q: want MAJOR.MINOR.PATCH", raw)
	}
	var n [3]int
	for i, p := range parts {
		if p == "" || len(p) > 9 || strings.TrimLeft(p, "0123456789") != "" {
			return Version{}, fmt.Errorf("version %q: %q is not a number", raw, p)
		}
		n[i], _ = strconv.Atoi(p)
	}
	for _, id := range strings.Split(pre, ".") {
		if hasPre && (id == "" || strings.Trim(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-") != "") {
			return Version{}, fmt.Errorf("version %q: bad pre-release %q", raw, pre)
		}
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Pre: pre, raw: raw}, nil
}

// Compare returns -1, 0 or +1 as v sorts before, with, or after w. Build metadata is ignored.
func (v Version) Compare(w Version) int {
	for _, d := range []int{v.Major - w.Major, v.Minor - w.Minor, v.Patch - w.Patch} {
		if d != 0 {
			return sign(d)
		}
	}
	switch {
	case v.Pre == w.Pre:
		return 0
	case v.Pre == "":
		return 1
	case w.Pre == "":
		return -1
	}
	a, b := strings.Split(v.Pre, "."), strings.Split(w.Pre, ".")
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := comparePreID(a[i], b[i]); c != 0 {
			return c
		}
	}
	return sign(len(a) - len(b))
}

func comparePreID(a, b string) int {
	na, errA := strconv.Atoi(a)
	nb, errB := strconv.Atoi(b)
	switch {
	case errA == nil && errB == nil:
		return sign(na - nb)
	case errA == nil:
		return -1 // numeric identifiers sort before alphanumeric ones
	case errB == nil:
		return 1
	}
	return strings.Compare(a, b)
}

func sign(d int) int {
	switch {
	case d < 0:
		return -1
	case d > 0:
		return 1
	}
	return 0
}
