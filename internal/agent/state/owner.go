package state

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ForeignFile is an entry under state_dir that another user owns.
type ForeignFile struct {
	// Path is the entry's path (state_dir joined with its relative name).
	Path string
	UID  uint32
}

// maxForeign bounds ForeignFiles' list; the fix (a recursive chown) covers the rest.
const maxForeign = 100

// ForeignFiles lists what the agent writes under dir that uid does not own, not following links
// (upgraded-from is root's by design); at most maxForeign, truncated when more.
func ForeignFiles(dir string, uid uint32) (files []ForeignFile, truncated bool, err error) {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	errStop := errors.New("stop")
	upgradedFrom := filepath.Join(dir, UpgradedFromFile)
	werr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if d == nil {
				return err // dir itself could not be looked at
			}
			// Unreadable directory: it was looked at (and listed if foreign) on the previous call.
			return fs.SkipDir
		}
		rel, _ := filepath.Rel(dir, path)
		depth := 0
		if rel != "." {
			depth = strings.Count(rel, string(filepath.Separator)) + 1
		}
		info, ierr := d.Info()
		if ierr != nil {
			if errors.Is(ierr, fs.ErrNotExist) {
				return nil // removed meanwhile
			}
			return ierr
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if ok && st.Uid != uid && path != upgradedFrom {
			if len(files) == maxForeign {
				truncated = true
				return errStop
			}
			files = append(files, ForeignFile{Path: path, UID: st.Uid})
		}
		// Descend into state_dir, its directories and <env>/releases; a release is listed by its directory.
		if d.IsDir() && depth >= 2 && !(depth == 2 && d.Name() == "releases") {
			return fs.SkipDir
		}
		return nil
	})
	if werr != nil && !errors.Is(werr, errStop) {
		return files, truncated, fmt.Errorf("state: owners under %s: %w", dir, werr)
	}
	return files, truncated, nil
}
