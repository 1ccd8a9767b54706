package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// Access bits, as in the mode's rwx triplets.
const (
	permR fs.FileMode = 4
	permW fs.FileMode = 2
	permX fs.FileMode = 1
)

// modeAllows reports whether mode bits alone let a access fi for want; ACLs are the system's to
// judge (tryAs).
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

// pathVerdict is whether a reaches one file.
type pathVerdict struct {
	// Denied names the first path that stops a and why ("" when none); DeniedAt is that path.
	Denied   string
	DeniedAt string
	// ViaACL lists paths the mode bits alone deny and the system still lets a through: an ACL.
	ViaACL []string
}

// tryAs asks the system (test(1)) whether a may access path for want; when doctor runs as
// someone else, via setpriv with a's uid and database groups (what a timer tick gets).
func (c *checker) tryAs(ctx context.Context, a Account, path, want string) (bool, error) {
	cmd := runner.Cmd{Name: "test", Args: []string{want, path}}
	if a.UID != c.env.Self.UID {
		gid := a.UID
		if len(a.GIDs) > 0 {
			gid = a.GIDs[0]
		}
		cmd = runner.Cmd{Name: "setpriv", Args: []string{"--reuid=" + itoa(a.UID), "--regid=" + itoa(gid), "--init-groups", "test", want, path}}
	}
	res, err := c.env.Runner.Run(ctx, cmd)
	switch {
	case err != nil:
		return false, err
	case res.ExitCode == 0:
		return true, nil
	case res.ExitCode == 1:
		return false, nil
	}
	return false, fmt.Errorf("%s: exit %d: %s", cmd, res.ExitCode, compose.Tail(c.red.Redact(string(res.Stderr)), 200))
}

// judgePath asks whether a reaches path; if not, tries each directory from / to name the blocker.
func (c *checker) judgePath(ctx context.Context, a Account, path, want string) (pathVerdict, error) {
	var v pathVerdict
	clean := filepath.Clean(path)
	var dirs []string
	for d := filepath.Dir(clean); ; d = filepath.Dir(d) {
		dirs = append([]string{d}, dirs...)
		if d == filepath.Dir(d) {
			break
		}
	}
	fi, err := c.env.Stat(clean)
	if err != nil {
		return v, err
	}
	ok, err := c.tryAs(ctx, a, clean, want)
	if err != nil {
		return v, err
	}
	if ok {
		for _, p := range append(dirs, clean) {
			bits := permX
			if p == clean {
				bits = wantBits[want]
			}
			if pfi, err := c.env.Stat(p); err == nil && !modeAllows(a, pfi, bits) {
				v.ViaACL = append(v.ViaACL, p)
			}
		}
		return v, nil
	}
	for _, d := range dirs {
		if enter, err := c.tryAs(ctx, a, d, "-x"); err != nil || !enter {
			dfi, serr := c.env.Stat(d)
			if err == nil && serr == nil {
				v.Denied, v.DeniedAt = fmt.Sprintf("cannot enter %s (%s)", d, c.describe(dfi)), d
				return v, nil
			}
			return v, errors.Join(err, serr)
		}
	}
	verb := map[string]string{"-r": "read", "-w": "use"}[want]
	v.Denied, v.DeniedAt = fmt.Sprintf("cannot %s %s (%s)", verb, clean, c.describe(fi)), clean
	return v, nil
}

// wantBits are test(1)'s access flags as mode bits.
var wantBits = map[string]fs.FileMode{"-r": permR, "-w": permW, "-x": permX}

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
