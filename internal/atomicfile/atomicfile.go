// Package atomicfile replaces files so that a reader, or the next tick after a crash, sees either
// the old content or the new content in full, never a torn or empty file.
package atomicfile

import (
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
	syncDir  = syncDirectory
	// afterCreate runs once the temp file exists and before anything is written to it.
	afterCreate = func(tmp string) {}
)

// WriteFile atomically replaces path with data, with mode perm exactly (umask does not apply).
//
// The temp file lives in path's directory (a rename across filesystems is not atomic), is
// created with perm from the start — never wider, so a secret is never readable by others even
// for a moment — and is written, fsynced, renamed over path, and the directory is fsynced so the
// rename itself survives a power cut. On any failure the temp file is removed and the old file
// is left as it was; no temp file is ever left behind. A symlink at path is replaced, not
// followed. If only the final directory fsync fails, the new content is already in place and the
// error says so.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	perm = perm.Perm()
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return fmt.Errorf("atomicfile: write %q: not a file name", path)
	}
	f, tmp, err := createTemp(dir, base, perm)
	if err != nil {
		return fmt.Errorf("atomicfile: write %q: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close() // may already be closed; the error of a second Close is meaningless
			_ = os.Remove(tmp)
		}
	}()
	afterCreate(tmp)
	// The umask may have narrowed perm at creation; set it exactly (this can only widen the file
	// up to perm, never beyond it).
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("atomicfile: write %q: chmod: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("atomicfile: write %q: %w", path, err)
	}
	if err = syncFile(f); err != nil {
		return fmt.Errorf("atomicfile: write %q: fsync: %w", path, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("atomicfile: write %q: close: %w", path, err)
	}
	if err = rename(tmp, path); err != nil {
		return fmt.Errorf("atomicfile: write %q: rename: %w", path, err)
	}
	if derr := syncDir(dir); derr != nil {
		// The temp file is gone (renamed), so the deferred cleanup has nothing to remove.
		return fmt.Errorf("atomicfile: write %q: new content in place but directory fsync failed: %w", path, derr)
	}
	return nil
}

// createTemp opens a new file next to the target with O_EXCL and mode perm. os.CreateTemp would
// create it 0600 and need a chmod, and its name pattern cannot start with a dot.
func createTemp(dir, base string, perm os.FileMode) (*os.File, string, error) {
	for range 10 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, "", err
		}
		name := filepath.Join(dir, "."+base+".tmp-"+hex.EncodeToString(b[:])) // see RemoveLeftovers
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
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

func syncDirectory(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return serr
	}
	return cerr
}

// tempSuffixLen is the length of the random hex part of a temp file's name (8 bytes).
const tempSuffixLen = 16

// RemoveLeftovers removes the temp files a WriteFile of path left behind when its process was
// killed between creating and renaming one (`.<base>.tmp-<16 hex digits>` beside path). Only
// names of exactly that shape are touched, and never a directory. The caller must hold whatever
// lock serialises writers of path, or it may remove a write in flight. It returns the paths it
// removed; a failure to remove one does not stop the others.
func RemoveLeftovers(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if base == "" {
		return nil, fmt.Errorf("atomicfile: leftovers of %q: not a file name", path)
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("atomicfile: leftovers of %q: %w", path, err)
	}
	prefix := "." + base + ".tmp-"
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		suffix, ok := strings.CutPrefix(name, prefix)
		if !ok || e.IsDir() || !isLowerHex(suffix, tempSuffixLen) {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("atomicfile: leftovers of %q: %w", path, errors.Join(errs...))
	}
	return removed, nil
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
