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
// other. Root is allowed everything. ACLs are not read here; see access.
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

// pathVerdict is what the mode bits and ACLs say about a reaching one file.
type pathVerdict struct {
	// Denied names the first path that stops a ("" when none does) and why; DeniedAt is that
	// path.
	Denied   string
	DeniedAt string
	// ViaACL lists paths the mode bits alone deny and a named entry of their ACL grants.
	ViaACL []string
}

// access judges a's access to one file: by its ACL when it carries one (which is then the whole
// truth: the mode's group bits are only its mask), else by the mode bits. An ACL that could not
// be read or parsed cannot be judged: unjudged says why.
func access(a Account, fi FileInfo, want fs.FileMode) (ok, viaACL bool, unjudged error) {
	if !fi.ACL {
		return modeAllows(a, fi, want), false, nil
	}
	if fi.ACLErr != nil || fi.ACLEntries == nil {
		err := fi.ACLErr
		if err == nil {
			err = fmt.Errorf("%s: not read", aclXattr)
		}
		if modeAllows(a, fi, want) && (a.UID == 0 || fi.UID == a.UID) {
			return true, false, nil // the owner class is the mode's, ACL or not
		}
		return false, false, err
	}
	ok, byName := aclAllows(a, fi, fi.ACLEntries, want)
	return ok, ok && byName && !modeAllows(a, fi, want), nil
}

// judgePath walks from / down to path: a needs search (x) on every directory and want on the
// file itself. A path whose ACL cannot be judged stops a too: nothing says it lets a through.
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
	step := func(p string, want fs.FileMode, denied string) (stop bool, err error) {
		fi, err := stat(p)
		if err != nil {
			return true, err
		}
		ok, viaACL, unjudged := access(a, fi, want)
		switch {
		case unjudged != nil:
			v.Denied = fmt.Sprintf("may not be able to %s %s (%s): its ACL cannot be judged (%v)", denied, p, describe(fi), unjudged)
			v.DeniedAt = p
			return true, nil
		case !ok:
			v.Denied = fmt.Sprintf("cannot %s %s (%s)", denied, p, describe(fi))
			v.DeniedAt = p
			return true, nil
		case viaACL:
			v.ViaACL = append(v.ViaACL, p)
		}
		return false, nil
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if stop, err := step(dirs[i], permX, "enter"); stop {
			return v, err
		}
	}
	_, err := step(clean, want, verb(want))
	return v, err
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
