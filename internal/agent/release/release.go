// Package release keeps the release directories of one environment on disk
// (`<env_dir>/releases/<sha>/` and the `<env_dir>/current` symlink) so that a crash at any point
// leaves `current` on a complete release and never a half-written one under a final name.
package release

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
)

// Names inside an environment directory.
const (
	ReleasesDir = "releases" // holds one directory per staged sha
	CurrentLink = "current"  // symlink → releases/<sha>
	EnvFile     = ".env"     // the rendered environment, read by docker compose from the project dir
)

// ErrDangling is returned (wrapped) by Current when `current` points to a release directory
// that does not exist; the sha and directory are still returned, so a retire can run
// `compose down` by project name.
var ErrDangling = errors.New("release: current points to a missing release")

// hook is called at each step of Stage and Promote. Tests set it to inspect the disk between
// steps and to inject a failure there; in production it does nothing.
var hook = func(step string) error { return nil }

// syncDir makes a directory's entries durable; tests record which directories a release synced.
var syncDir = atomicfile.SyncDir

// exchange atomically swaps two directories (renameat2 RENAME_EXCHANGE). It is a variable so
// tests can exercise the fallback for filesystems that do not support it.
var exchange = func(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// Dir is the directory of the release sha under envDir.
func Dir(envDir, sha string) string { return filepath.Join(envDir, ReleasesDir, sha) }

// OpenRoot is os.OpenRoot(dir) for a release directory, refusing at once anything that is not a
// directory: os.OpenRoot opens its path without O_DIRECTORY, so a FIFO put in a release
// directory's place held the open (and the tick, until systemd's timeout) until some writer
// came. The trailing separator makes the kernel's own lookup require a directory (ENOTDIR),
// in the same open, so a FIFO swapped in after a check is refused too.
func OpenRoot(dir string) (*os.Root, error) {
	return os.OpenRoot(dir + string(filepath.Separator))
}

// Stage writes the bundle files and the rendered .env (0600, dirs 0700) into releases/<sha> and
// returns its directory. On error a new sha leaves nothing under the final name, and a re-stage
// in place leaves each file old or new, complete; env never appears in an error.
//
// A new sha is written into a staging directory that is then renamed into place. A sha already
// on disk is re-staged in place (see restage): the bundle sha covers every file's name and
// content, so only .env can differ, and whatever the app wrote into its release (a writable bind
// of ./data) is kept. When that existing directory is not as Stage made it (a staged path, or a
// directory on its way, is a link, a FIFO, a directory in a file's place, missing, or the release
// itself is a link), it is not trusted: Stage writes a fresh copy and swaps it in as for a new
// sha, the old one with all it held is removed, and distrusted says why (for the caller's log);
// it is nil otherwise.
func Stage(envDir, sha string, files map[string]string, env string) (dir string, distrusted, err error) {
	if err := checkSha(sha); err != nil {
		return "", nil, err
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		if err := checkPath(p); err != nil {
			return "", nil, err
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)

	final := Dir(envDir, sha)
	if _, err := os.Lstat(final); err == nil {
		distrusted, err = restage(final, sha, paths, files, env)
		if err != nil || distrusted == nil {
			return final, nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", nil, fmt.Errorf("release: stage %s: %w", sha, err)
	}
	dir, err = stageFresh(envDir, sha, paths, files, env)
	return dir, distrusted, err
}

// restage rewrites the staged files and .env of the existing release final in place, each by an
// atomic rename over the old one (a kill leaves every file old or new, both complete, and the
// same bytes but for .env), and leaves every other entry alone. Everything goes through an
// os.Root, and every staged path is first checked without following links (CheckStaged); a
// release that fails the check is returned as distrusted, with nothing written; an error
// reading it is returned as an error, the release left as it was. Temp files of a write killed
// earlier are removed first.
func restage(final, sha string, paths []string, files map[string]string, env string) (distrusted, err error) {
	if fi, err := os.Lstat(final); err != nil {
		return nil, fmt.Errorf("release: stage %s: %w", sha, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (%s)", final, capread.TypeName(fi.Mode())), nil
	}
	root, err := OpenRoot(final)
	if err != nil {
		return nil, fmt.Errorf("release: stage %s: %w", sha, err)
	}
	defer root.Close()
	for _, p := range append(slices.Clone(paths), EnvFile) {
		_, err := CheckStaged(root, p)
		var shape *shapeError
		switch {
		case errors.As(err, &shape):
			return err, nil
		case errors.Is(err, fs.ErrNotExist):
			// Stage writes them all, and a rewrite only ever renames over one.
			return fmt.Errorf("%s is missing", p), nil
		case err != nil:
			// Not a verdict on the release (an I/O error): the old copy, and the app's data
			// in it, are not thrown away for it.
			return nil, fmt.Errorf("release: stage %s: %w", sha, err)
		}
	}
	if err := hook("restage-checked"); err != nil {
		return nil, err
	}
	for _, p := range paths {
		if err := rewrite(root, p, files[p]); err != nil {
			return nil, fmt.Errorf("release: stage %s: file %q: %w", sha, p, err)
		}
		if err := hook("file-rewritten"); err != nil {
			return nil, err
		}
	}
	if err := rewrite(root, EnvFile, env); err != nil {
		return nil, fmt.Errorf("release: stage %s: write %s: %w", sha, EnvFile, scrub(err))
	}
	if err := hook("env-rewritten"); err != nil {
		return nil, err
	}
	return nil, nil
}

// rewrite atomically replaces the file p under root (fsyncing it and its directory), after
// removing what a killed write of it left.
func rewrite(root *os.Root, p, content string) error {
	if _, err := atomicfile.RemoveLeftoversIn(root, p); err != nil {
		return err
	}
	return atomicfile.WriteFileIn(root, p, []byte(content), 0o600)
}

// CheckStaged checks, without following links, that every directory on the way to the staged
// file p ('/'-separated) under root is a real directory and p itself a regular file, whose
// FileInfo it returns: what Stage made. os.Root alone would follow a link that stays inside the
// release (to a copy in a writable ./data, say). An error is the Lstat's own (fs.ErrNotExist for
// a missing path) or names the path and what it is instead ("symlink", "fifo", "directory").
func CheckStaged(root *os.Root, p string) (fs.FileInfo, error) {
	parts := strings.Split(p, "/")
	var fi fs.FileInfo
	for i := range parts {
		sub := strings.Join(parts[:i+1], "/")
		var err error
		if fi, err = root.Lstat(sub); err != nil {
			return nil, err
		}
		last := i == len(parts)-1
		switch {
		case !last && !fi.IsDir():
			return nil, &shapeError{fmt.Sprintf("%s is not a directory (%s)", sub, capread.TypeName(fi.Mode()))}
		case last && !fi.Mode().IsRegular():
			return nil, &shapeError{fmt.Sprintf("%s is not a regular file (%s)", sub, capread.TypeName(fi.Mode()))}
		}
	}
	return fi, nil
}

// shapeError is a staged path that is not the kind of file Stage made.
type shapeError struct{ msg string }

func (e *shapeError) Error() string { return e.msg }

// stageFresh writes a complete staging directory and moves it to releases/<sha>.
func stageFresh(envDir, sha string, paths []string, files map[string]string, env string) (string, error) {
	releases := filepath.Join(envDir, ReleasesDir)
	if err := os.MkdirAll(releases, 0o700); err != nil {
		return "", fmt.Errorf("release: stage %s: %w", sha, err)
	}
	tmp, err := os.MkdirTemp(releases, "."+sha+".tmp-")
	if err != nil {
		return "", fmt.Errorf("release: stage %s: %w", sha, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := hook("staging-created"); err != nil {
		return "", err
	}

	dirs := []string{tmp}
	for _, p := range paths {
		target := filepath.Join(tmp, filepath.FromSlash(p))
		for d := filepath.Dir(target); d != tmp && !slices.Contains(dirs, d); d = filepath.Dir(d) {
			dirs = append(dirs, d)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
			return "", fmt.Errorf("release: stage %s: file %q: %w", sha, p, err)
		}
		if err := atomicfile.WriteNew(target, []byte(files[p]), 0o600); err != nil {
			return "", fmt.Errorf("release: stage %s: file %q: %w", sha, p, err)
		}
		if err := hook("file-written"); err != nil {
			return "", err
		}
	}
	if err := atomicfile.WriteNew(filepath.Join(tmp, EnvFile), []byte(env), 0o600); err != nil {
		// The error names the file only; env is secret.
		return "", fmt.Errorf("release: stage %s: write %s: %w", sha, EnvFile, scrub(err))
	}
	if err := hook("env-written"); err != nil {
		return "", err
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return "", fmt.Errorf("release: stage %s: %w", sha, err)
		}
	}
	if err := hook("synced"); err != nil {
		return "", err
	}

	final := Dir(envDir, sha)
	if err := install(tmp, final); err != nil {
		return "", fmt.Errorf("release: stage %s: %w", sha, err)
	}
	done = true
	if err := syncDir(releases); err != nil {
		return final, fmt.Errorf("release: stage %s: %w", sha, err)
	}
	return final, nil
}

// install moves the complete staging directory tmp to final.
func install(tmp, final string) error {
	if _, err := os.Lstat(final); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, final); err != nil {
			return err
		}
		return hook("renamed")
	}
	err := exchange(tmp, final)
	if err == nil {
		// tmp now holds the previous copy, complete, so failing to remove it harms nothing.
		// A copy left behind is a `.tmp-` leftover that Prune removes.
		herr := hook("exchanged")
		_ = os.RemoveAll(tmp)
		return herr
	}
	if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTSUP) {
		return err
	}
	// No RENAME_EXCHANGE here: move the old copy aside, the new one in, and the old one back if
	// that fails. Between the two renames releases/<sha> is briefly absent.
	aside := strings.Replace(tmp, ".tmp-", ".old-", 1)
	if err := os.Rename(final, aside); err != nil {
		return err
	}
	if err := hook("aside"); err != nil {
		return errors.Join(err, os.Rename(aside, final))
	}
	if err := os.Rename(tmp, final); err != nil {
		return errors.Join(err, os.Rename(aside, final))
	}
	herr := hook("renamed")
	_ = os.RemoveAll(aside)
	return herr
}

// Promote points `current` at releases/<sha> by renaming a freshly made symlink over it, which
// swaps atomically: a reader sees the old release or the new one, never neither.
func Promote(envDir, sha string) error {
	if err := checkSha(sha); err != nil {
		return err
	}
	fi, err := os.Lstat(Dir(envDir, sha))
	if err != nil {
		return fmt.Errorf("release: promote %s: %w", sha, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("release: promote %s: %s is not a directory", sha, Dir(envDir, sha))
	}
	tmp := filepath.Join(envDir, CurrentLink+".tmp-"+rand.Text())
	// Relative target: the environment directory can move (or be seen through another mount
	// path) without breaking the link.
	if err := os.Symlink(ReleasesDir+"/"+sha, tmp); err != nil {
		return fmt.Errorf("release: promote %s: %w", sha, err)
	}
	if err := hook("link-created"); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(envDir, CurrentLink)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("release: promote %s: %w", sha, err)
	}
	if err := hook("link-swapped"); err != nil {
		return err
	}
	if err := syncDir(envDir); err != nil {
		return fmt.Errorf("release: promote %s: %w", sha, err)
	}
	return nil
}

// Current returns the sha `current` points to and its directory. No `current` yet is
// ("", "", nil). A link to a missing directory returns the sha and directory with an error
// wrapping ErrDangling. Absolute targets (written by hand, or by an older agent) are accepted
// when they end in releases/<sha>.
func Current(envDir string) (sha, dir string, err error) {
	link := filepath.Join(envDir, CurrentLink)
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("release: read %s: %w", link, err)
	}
	clean := filepath.Clean(target)
	sha = filepath.Base(clean)
	if filepath.Base(filepath.Dir(clean)) != ReleasesDir || checkSha(sha) != nil ||
		(!filepath.IsAbs(clean) && clean != ReleasesDir+"/"+sha) {
		return "", "", fmt.Errorf("release: %s points to %q, not to %s/<sha>", link, target, ReleasesDir)
	}
	dir = Dir(envDir, sha)
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return sha, dir, fmt.Errorf("%w: %s", ErrDangling, dir)
	}
	if err != nil {
		return sha, dir, fmt.Errorf("release: %w", err)
	}
	if !fi.IsDir() {
		return sha, dir, fmt.Errorf("%w: %s is not a directory", ErrDangling, dir)
	}
	return sha, dir, nil
}

// Prune removes every release but keep and `current`'s, and every leftover of an interrupted
// Stage or Promote: each .env holds the secrets of its day, so nothing is kept "just in case".
// Unknown entries are left alone; a failure to remove one does not stop the others.
func Prune(envDir string, keep []string) ([]string, error) {
	for _, sha := range keep {
		if err := checkSha(sha); err != nil {
			return nil, fmt.Errorf("release: prune: keep: %w", err)
		}
	}
	cur, _, err := Current(envDir)
	if err != nil && !errors.Is(err, ErrDangling) {
		return nil, fmt.Errorf("release: prune: %w", err)
	}
	releases := filepath.Join(envDir, ReleasesDir)
	entries, err := os.ReadDir(releases)
	if errors.Is(err, fs.ErrNotExist) {
		entries = nil
	} else if err != nil {
		return nil, fmt.Errorf("release: prune: %w", err)
	}

	var doomed []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".") && (strings.Contains(name, ".tmp-") || strings.Contains(name, ".old-")):
			doomed = append(doomed, filepath.Join(releases, name))
		case checkSha(name) == nil && e.IsDir() && name != cur && !slices.Contains(keep, name):
			doomed = append(doomed, filepath.Join(releases, name))
		}
	}
	if links, err := filepath.Glob(filepath.Join(envDir, CurrentLink+".tmp-*")); err == nil {
		doomed = append(doomed, links...)
	}

	var removed []string
	var errs []error
	for _, p := range doomed {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, p)
	}
	if len(errs) > 0 {
		return removed, fmt.Errorf("release: prune: %w", errors.Join(errs...))
	}
	return removed, nil
}

// checkSha accepts lowercase hex of 1 to 64 digits: the bundle sha, and safe as a directory
// name (never ".", "..", hidden, or with a separator).
func checkSha(sha string) error {
	if sha == "" || len(sha) > 64 {
		return fmt.Errorf("release: sha %q: want 1 to 64 lowercase hex digits", sha)
	}
	for _, c := range sha {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("release: sha %q: want 1 to 64 lowercase hex digits", sha)
		}
	}
	return nil
}

// checkPath re-checks a bundle path (the bundle package validates first; this is defence in
// depth): relative, '/'-separated, no empty, "." or ".." segment, no NUL or backslash, and not
// the rendered .env, which only Stage writes.
func checkPath(p string) error {
	bad := func(why string) error { return fmt.Errorf("release: bundle path %q: %s", p, why) }
	switch {
	case p == "":
		return bad("empty")
	case strings.ContainsAny(p, "\x00\\"):
		return bad("contains NUL or backslash")
	case strings.HasPrefix(p, "/"):
		return bad("absolute")
	case p == EnvFile:
		return bad("collides with the rendered " + EnvFile)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return bad("empty, . or .. segment")
		}
	}
	if !filepath.IsLocal(filepath.FromSlash(p)) {
		return bad("escapes the release")
	}
	return nil
}

// scrub keeps the operation, path and errno of a file error and drops anything else.
func scrub(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: pe.Path, Err: pe.Err}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return errors.New("write failed")
}
