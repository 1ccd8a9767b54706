// Package atomicfile replaces files so that a reader, or the next tick after a crash, sees either
// the old content or the new content in full, never a torn or empty file.
package atomicfile

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Hooks the tests use to inject a failure at each step; production code never changes them.
var (
	rename   = os.Rename
	syncFile = func(f *os.File) error { return f.Sync() }
	syncDir  = SyncDir
	// afterCreate runs once the temp file exists and before anything is written to it.
	afterCreate = func(tmp string) {}
	fchown      = func(f *os.File, uid, gid int) error { return f.Chown(uid, gid) }
)

// WriteFile atomically replaces path (a symlink too, not followed) with data and mode perm exactly:
// the temp file has perm from the start, so a secret is never readable by others for a moment.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(pathOps, path, data, perm, nil)
}

// WriteFileOwned is WriteFile whose new file is also given uid and gid (-1 keeps the writer's)
// before a byte is written: a renewed ziti identity keeps the owner and group of the file it
// replaces (only root may give a file away; anyone may pick one of their own groups).
func WriteFileOwned(path string, data []byte, perm os.FileMode, uid, gid int) error {
	return write(pathOps, path, data, perm, func(f *os.File) error {
		if err := fchown(f, uid, gid); err != nil {
			return fmt.Errorf("chown: %w", err)
		}
		return nil
	})
}

// WriteFileIn is WriteFile for name ('/'-separated, relative) inside root: no link on the way
// leads the write out of root. The final name is replaced, never followed.
func WriteFileIn(root *os.Root, name string, data []byte, perm os.FileMode) error {
	return write(rootOps(root), name, data, perm, nil)
}

// fileOps are the operations a write and a leftover sweep make: on paths, or inside an os.Root.
type fileOps struct {
	openFile func(name string, flag int, perm os.FileMode) (*os.File, error)
	rename   func(oldname, newname string) error
	remove   func(name string) error
	syncDir  func(dir string) error
	readDir  func(dir string) ([]fs.DirEntry, error)
}

// pathOps go through the test hooks above.
var pathOps = fileOps{
	openFile: os.OpenFile,
	rename:   func(o, n string) error { return rename(o, n) },
	remove:   os.Remove,
	syncDir:  func(d string) error { return syncDir(d) },
	readDir:  os.ReadDir,
}

func rootOps(root *os.Root) fileOps {
	return fileOps{
		openFile: root.OpenFile,
		rename:   root.Rename,
		remove:   root.Remove,
		syncDir: func(dir string) error {
			d, err := root.Open(dir)
			if err != nil {
				return err
			}
			serr := d.Sync()
			return errors.Join(serr, d.Close())
		},
		readDir: func(dir string) ([]fs.DirEntry, error) {
			d, err := root.Open(dir)
			if err != nil {
				return nil, err
			}
			defer d.Close()
			return d.ReadDir(-1)
		},
	}
}

// write replaces path; prep, when set, runs on the empty temp file first.
func write(ops fileOps, path string, data []byte, perm os.FileMode, prep func(*os.File) error) (err error) {
	perm = perm.Perm()
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return fmt.Errorf("atomicfile: write %q: not a file name", path)
	}
	f, tmp, err := createTemp(ops, dir, base, perm)
	if err != nil {
		return fmt.Errorf("atomicfile: write %q: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close() // may already be closed; the error of a second Close is meaningless
			_ = ops.remove(tmp)
		}
	}()
	afterCreate(tmp)
	if prep != nil {
		if err = prep(f); err != nil {
			return fmt.Errorf("atomicfile: write %q: %w", path, err)
		}
	}
	if err = fill(f, data, perm); err != nil {
		return fmt.Errorf("atomicfile: write %q: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("atomicfile: write %q: close: %w", path, err)
	}
	if err = ops.rename(tmp, path); err != nil {
		return fmt.Errorf("atomicfile: write %q: rename: %w", path, err)
	}
	if derr := ops.syncDir(dir); derr != nil {
		// The temp file is gone (renamed), so the deferred cleanup has nothing to remove.
		return fmt.Errorf("atomicfile: write %q: new content in place but directory fsync failed: %w", path, derr)
	}
	return nil
}

// WriteNew creates path (it must not exist) with data and mode perm, fsynced: for a directory
// renamed into place; the caller cleans up on failure and fsyncs the directory.
func WriteNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm.Perm())
	if err != nil {
		return err
	}
	if err := fill(f, data, perm.Perm()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// fill sets perm exactly (undoing the umask), writes data and fsyncs.
func fill(f *os.File, data []byte, perm os.FileMode) error {
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := syncFile(f); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return nil
}

// createTemp opens a new dot-file beside the target, O_EXCL with mode perm (os.CreateTemp can do neither).
func createTemp(ops fileOps, dir, base string, perm os.FileMode) (*os.File, string, error) {
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, "", err
		}
		name := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(b[:])) // see RemoveLeftovers
		f, err := ops.openFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		return f, name, nil
	}
	return nil, "", errors.New("could not find a free temp file name")
}

// SyncDir fsyncs a directory, so that a rename or a new file in it survives a power cut.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	return cmp.Or(serr, d.Close())
}

// tempSuffixLen is the length of the random hex part of a temp file's name (8 bytes).
const tempSuffixLen = 16

// RemoveLeftovers removes only the `.<base>.tmp-<16 hex>` files a killed WriteFile left beside
// path; the caller holds the writers' lock, or it may remove a write in flight.
func RemoveLeftovers(path string) ([]string, error) {
	return removeLeftovers(pathOps, path)
}

// RemoveLeftoversIn is RemoveLeftovers for name ('/'-separated, relative) inside root.
func RemoveLeftoversIn(root *os.Root, name string) ([]string, error) {
	return removeLeftovers(rootOps(root), name)
}

// RemoveLeftoversAll is RemoveLeftovers for each of paths, reading each directory once.
func RemoveLeftoversAll(paths ...string) ([]string, error) {
	return removeLeftovers(pathOps, paths...)
}

func removeLeftovers(ops fileOps, paths ...string) ([]string, error) {
	prefixes := map[string][]string{} // directory → the temp-file prefixes of its paths
	var dirs []string
	for _, path := range paths {
		dir, base := filepath.Split(path)
		if dir == "" {
			dir = "."
		}
		if base == "" {
			return nil, fmt.Errorf("atomicfile: leftovers of %q: not a file name", path)
		}
		if _, ok := prefixes[dir]; !ok {
			dirs = append(dirs, dir)
		}
		prefixes[dir] = append(prefixes[dir], "."+base+".tmp-")
	}
	var removed []string
	var errs []error
	fail := func(dir string, err error) {
		what := dir // one path names itself, as before
		if len(paths) == 1 {
			what = paths[0]
		}
		errs = append(errs, fmt.Errorf("atomicfile: leftovers of %q: %w", what, err))
	}
	for _, dir := range dirs {
		entries, err := ops.readDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			fail(dir, err)
			continue
		}
		for _, e := range entries {
			name := e.Name()
			if e.IsDir() || !isLeftover(name, prefixes[dir]) {
				continue
			}
			p := filepath.Join(dir, name)
			if err := ops.remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				fail(dir, err)
				continue
			}
			removed = append(removed, p)
		}
	}
	return removed, errors.Join(errs...)
}

// isLeftover: name is one of prefixes followed by a temp file's random hex.
func isLeftover(name string, prefixes []string) bool {
	for _, prefix := range prefixes {
		if suffix, ok := strings.CutPrefix(name, prefix); ok && isLowerHex(suffix, tempSuffixLen) {
			return true
		}
	}
	return false
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
