package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Blocked is why this process cannot replace the identity file with a renewed one keeping its
// owner, group and mode, and the command that lets it.
type Blocked struct {
	Reason string
	Fix    string
}

func (b *Blocked) Error() string { return b.Reason + ": " + b.Fix }

// Stat is what the check needs of a file, without following a symlink.
type Stat struct {
	Mode     fs.FileMode
	UID, GID uint32
}

// Perms are the system calls the check makes; the zero value asks the real system.
type Perms struct {
	Lstat func(path string) (Stat, error)
	// Euid and Groups are this process's effective uid and groups (primary included).
	Euid   func() int
	Groups func() ([]uint32, error)
	// DirWritable is access(2) W_OK|X_OK on a directory with the effective ids.
	DirWritable func(dir string) error
	UserName    func(uid uint32) string
	GroupName   func(gid uint32) string
}

func (p Perms) lstat(path string) (Stat, error) {
	if p.Lstat != nil {
		return p.Lstat(path)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return Stat{}, &fs.PathError{Op: "lstat", Path: path, Err: err}
	}
	return Stat{Mode: fileMode(st.Mode), UID: st.Uid, GID: st.Gid}, nil
}

func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFREG:
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

func (p Perms) euid() int {
	if p.Euid != nil {
		return p.Euid()
	}
	return os.Geteuid()
}

func (p Perms) groups() ([]uint32, error) {
	if p.Groups != nil {
		return p.Groups()
	}
	gs, err := os.Getgroups()
	if err != nil {
		return nil, err
	}
	out := []uint32{uint32(os.Getegid())}
	for _, g := range gs {
		out = append(out, uint32(g))
	}
	return out, nil
}

func (p Perms) dirWritable(dir string) error {
	if p.DirWritable != nil {
		return p.DirWritable(dir)
	}
	return unix.Faccessat(unix.AT_FDCWD, dir, unix.W_OK|unix.X_OK, unix.AT_EACCESS)
}

func (p Perms) userName(uid uint32) string {
	if p.UserName != nil {
		if n := p.UserName(uid); n != "" {
			return n
		}
	}
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		return u.Username
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10)
}

func (p Perms) groupName(gid uint32) string {
	if p.GroupName != nil {
		if n := p.GroupName(gid); n != "" {
			return n
		}
	}
	if g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10)); err == nil {
		return g.Name
	}
	return "gid " + strconv.FormatUint(uint64(gid), 10)
}

// CanReplace is nil when this process can put a renewed file in path's place with the same
// owner, group and mode: it must own the file (or be root), be in its group, and create and
// rename files in its directory. Else a *Blocked says what stops it and the fix.
func (p Perms) CanReplace(path string) error {
	st, err := p.lstat(path)
	if err != nil {
		return &Blocked{Reason: fmt.Sprintf("cannot look at %s: %v", path, unwrapPath(err)), Fix: "check the `identity` path in the config"}
	}
	switch {
	case st.Mode&fs.ModeSymlink != 0:
		return &Blocked{Reason: path + " is a symlink, which a renewal would replace with a file",
			Fix: "set `identity` in the config to the file it points at"}
	case !st.Mode.IsRegular():
		return &Blocked{Reason: path + " is not a regular file", Fix: "re-enrol the identity into a regular file"}
	}
	euid := p.euid()
	me := p.userName(uint32(euid))
	owner, group := p.userName(st.UID), p.groupName(st.GID)
	if euid != 0 && st.UID != uint32(euid) {
		return &Blocked{
			Reason: fmt.Sprintf("%s belongs to %s, and a renewed file written by %s would belong to %s", path, owner, me, me),
			Fix:    fmt.Sprintf("chown %s %s (install.sh and the ansible role give the identity to the agent for transports sdk and proxy)", me, path),
		}
	}
	if euid != 0 {
		gs, err := p.groups()
		if err != nil {
			return &Blocked{Reason: "cannot list this process's groups: " + err.Error(), Fix: "run the agent as its own user"}
		}
		if !slices.Contains(gs, st.GID) {
			return &Blocked{
				Reason: fmt.Sprintf("%s has group %s, which %s is not in, so a renewed file could not keep it", path, group, me),
				Fix:    fmt.Sprintf("usermod -a -G %s %s", group, me),
			}
		}
	}
	dir := filepath.Dir(path)
	switch err := p.dirWritable(dir); {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EROFS):
		return &Blocked{
			Reason: fmt.Sprintf("%s is read-only for this process (systemd's ProtectSystem=strict)", dir),
			Fix:    fmt.Sprintf("the 0.3.0 units list %s in ReadWritePaths=; for an identity elsewhere add a drop-in: systemctl edit monky-deployd.service (and monky-deployd-proxy.service) with [Service] ReadWritePaths=%s", TunnellerDir, dir),
		}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		dst, serr := p.lstat(dir)
		desc := ""
		if serr == nil {
			desc = fmt.Sprintf(" (%s:%s %04o)", p.userName(dst.UID), p.groupName(dst.GID), dst.Mode.Perm())
		}
		return &Blocked{
			Reason: fmt.Sprintf("%s cannot create files in %s%s", me, dir, desc),
			Fix:    fmt.Sprintf("chgrp %s %s && chmod g+rwx %s (install.sh and the ansible role do this for transports sdk and proxy)", group, dir, dir),
		}
	default:
		return &Blocked{Reason: fmt.Sprintf("cannot check %s: %v", dir, err), Fix: "check the identity's directory"}
	}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
