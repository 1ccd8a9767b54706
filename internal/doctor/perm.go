package doctor

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
)

// Access bits, as in the mode's rwx triplets.
const (
	permR fs.FileMode = 4
	permW fs.FileMode = 2
	permX fs.FileMode = 1
)

// modeAllows reports whether a may access a file of fi for want (a mix of permR, permW, permX)
// by the mode bits alone, with POSIX's precedence: the owner class when a owns the file (even if
// it denies and the group would allow), else the group class when a is in the file's group, else
// other. Root is allowed everything. ACLs are not read; see FileInfo.ACL.
func modeAllows(a Account, fi FileInfo, want fs.FileMode) bool {
	if a.UID == 0 {
		return true
	}
	perm := fi.Mode.Perm()
	var bits fs.FileMode
	switch {
	case fi.UID == a.UID:
		bits = perm >> 6
	case a.InGroup(fi.GID):
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&7&want == want
}

// pathVerdict is what the mode bits say about a reaching one file.
type pathVerdict struct {
	// Denied names the first path that stops a ("" when none does) and why; DeniedAt is that
	// path.
	Denied   string
	DeniedAt string
	// ViaACL lists paths the mode bits deny but an ACL may open: readable now, perhaps.
	ViaACL []string
}

// judgePath walks from / down to path: a needs search (x) on every directory and want on the
// file itself. Where the mode bits deny but the path carries an ACL, the ACL is given the
// benefit of the doubt and the path is listed in ViaACL.
func judgePath(a Account, path string, want fs.FileMode, stat func(string) (FileInfo, error), describe func(FileInfo) string) (pathVerdict, error) {
	var v pathVerdict
	clean := filepath.Clean(path)
	var dirs []string
	for d := filepath.Dir(clean); ; d = filepath.Dir(d) {
		dirs = append(dirs, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		fi, err := stat(dirs[i])
		if err != nil {
			return v, err
		}
		if !modeAllows(a, fi, permX) {
			if fi.ACL {
				v.ViaACL = append(v.ViaACL, dirs[i])
				continue
			}
			v.Denied = fmt.Sprintf("cannot enter %s (%s)", dirs[i], describe(fi))
			v.DeniedAt = dirs[i]
			return v, nil
		}
	}
	fi, err := stat(clean)
	if err != nil {
		return v, err
	}
	if !modeAllows(a, fi, want) {
		if fi.ACL {
			v.ViaACL = append(v.ViaACL, clean)
			return v, nil
		}
		v.Denied = fmt.Sprintf("cannot %s %s (%s)", verb(want), clean, describe(fi))
		v.DeniedAt = clean
	}
	return v, nil
}

func verb(want fs.FileMode) string {
	switch want {
	case permR:
		return "read"
	case permW | permX:
		return "create files in"
	}
	return "use"
}

// describe renders owner:group and mode the way ls and chmod spell them: "ziti:ziti 0640".
func (c *checker) describe(fi FileInfo) string {
	owner := strings.TrimPrefix(c.userName(fi.UID), "uid ")
	s := fmt.Sprintf("%s:%s %04o", owner, c.groupName(fi.GID), fi.Mode.Perm())
	if fi.ACL {
		s += " +acl"
	}
	return s
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func sprintf(format string, args ...any) string {
	if len(args) == 0 {
		return format
	}
	return fmt.Sprintf(format, args...)
}

// bytesText renders a byte count in binary units with one decimal: "2.0 GiB".
func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
