package state

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// GiveBackResult is what GiveBack changed and what it left.
type GiveBackResult struct {
	// Changed are the entries given to the agent's account.
	Changed []string
	// Linked are regular files root owns that have more than one name: left as they are.
	Linked []string
}

// GiveBack gives every entry under dir that root owns to uid:gid: what a tick run as root by an
// agent before 0.2.0 left there (root's state.json, releases and docker/config.json stopped
// every later tick). Each entry is opened without following a symlink and without opening a
// device, and the owner is changed on what was opened, so nothing swapped in while it runs — a
// symlink or a hard link the agent's account plants — is followed or changed; a shell's
// `find -exec chown` cannot promise that. A regular file with a second name (a hard link to a
// file elsewhere, where fs.protected_hardlinks is off) keeps its owner and is listed; other
// owners' entries (a container's, written into a bind mount) and dir's upgraded-from (root's by
// design) stay as they are; dir itself is the caller's. It must run as root.
func GiveBack(dir string, uid, gid int) (GiveBackResult, error) {
	var res GiveBackResult
	if uid == 0 {
		return res, fmt.Errorf("state: give back %s: to root? the files are root's already", dir)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("state: give back %s: %w", dir, err)
	}
	g := giver{uid: uid, gid: gid, res: &res, skip: filepath.Join(dir, UpgradedFromFile)}
	err = g.dir(fd, dir)
	return res, err
}

type giver struct {
	uid, gid int
	res      *GiveBackResult
	skip     string
}

// dir gives back the entries of the open directory fd (which it closes), depth first.
func (g giver) dir(fd int, path string) error {
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("state: give back: read %s: %w", path, err)
	}
	sort.Strings(names)
	var errs []error
	for _, name := range names {
		p := filepath.Join(path, name)
		if p == g.skip {
			continue
		}
		if err := g.entry(fd, name, p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// entry gives back one entry of the directory dirfd, and its own entries when it is a directory.
func (g giver) entry(dirfd int, name, path string) error {
	// O_PATH opens the entry itself: a symlink is not followed, a device or FIFO not opened.
	efd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil // removed meanwhile
	}
	if err != nil {
		return fmt.Errorf("state: give back %s: %w", path, err)
	}
	defer unix.Close(efd)
	var st unix.Stat_t
	if err := unix.Fstat(efd, &st); err != nil {
		return fmt.Errorf("state: give back %s: %w", path, err)
	}
	kind := st.Mode & unix.S_IFMT
	if st.Uid == 0 {
		if kind == unix.S_IFREG && st.Nlink > 1 {
			g.res.Linked = append(g.res.Linked, path)
		} else {
			// On the opened entry itself (AT_EMPTY_PATH): the symlink, not its target.
			if err := unix.Fchownat(efd, "", g.uid, g.gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("state: give back %s: %w", path, err)
			}
			g.res.Changed = append(g.res.Changed, path)
		}
	}
	if kind != unix.S_IFDIR {
		return nil
	}
	// The directory just looked at, reopened through its own descriptor: the same one.
	dfd, err := unix.Openat(efd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("state: give back %s: %w", path, err)
	}
	return g.dir(dfd, path)
}
