package atomicfile

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// No test here runs in parallel: some swap the package's step hooks and one changes the umask.

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func assertOnly(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := listDir(t, dir)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("directory holds %v, want exactly %v (a temp file was left behind?)", got, want)
	}
}

func TestWriteFileModes(t *testing.T) {
	old := syscall.Umask(0o077) // the agent's unit runs with a tight umask; modes must still be exact
	defer syscall.Umask(old)
	for _, perm := range []os.FileMode{0o600, 0o640, 0o644, 0o400} {
		t.Run(perm.String(), func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f")
			var tempMode os.FileMode
			afterCreate = func(tmp string) {
				st, err := os.Stat(tmp)
				if err != nil {
					t.Errorf("stat temp: %v", err)
					return
				}
				tempMode = st.Mode().Perm()
			}
			defer func() { afterCreate = func(string) {} }()
			if err := WriteFile(p, []byte("hello"), perm); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != perm {
				t.Errorf("mode %v, want %v", st.Mode().Perm(), perm)
			}
			if tempMode&^perm != 0 {
				t.Errorf("temp file was created %v, wider than %v", tempMode, perm)
			}
			assertOnly(t, dir, "f")
		})
	}
}

func TestWriteFileReplacesAndNarrowsMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	if err := os.WriteFile(p, []byte("old content that is longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Errorf("content %q, want %q", got, "new")
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v after replacing a 0644 file, want 0600", st.Mode().Perm())
	}
	assertOnly(t, dir, "token")
}

func TestWriteFileRelativePath(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := WriteFile("rel", []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	assertOnly(t, dir, "rel")
}

func TestWriteFileFailures(t *testing.T) {
	injected := errors.New("injected")
	old := []byte("the old content")
	cases := []struct {
		name string
		// prepare makes the state of dir before the write and returns the path to write.
		prepare func(t *testing.T, dir string) string
		hook    func()
		// wantOld: the target is a plain file holding old content that must survive.
		wantOld bool
	}{
		{
			name: "rename onto a directory",
			prepare: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "target")
				if err := os.MkdirAll(filepath.Join(p, "inside"), 0o700); err != nil {
					t.Fatal(err)
				}
				return p
			},
		},
		{
			name:    "fsync fails",
			prepare: oldFile(old),
			hook:    func() { syncFile = func(*os.File) error { return injected } },
			wantOld: true,
		},
		{
			name:    "rename fails",
			prepare: oldFile(old),
			hook:    func() { rename = func(string, string) error { return injected } },
			wantOld: true,
		},
		{
			name: "directory missing",
			prepare: func(t *testing.T, dir string) string {
				return filepath.Join(dir, "absent", "target")
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := tc.prepare(t, dir)
			entries := listDir(t, dir)
			if tc.hook != nil {
				tc.hook()
				defer func() {
					syncFile = func(f *os.File) error { return f.Sync() }
					rename = os.Rename
				}()
			}
			err := WriteFile(p, []byte("new content"), 0o600)
			if err == nil {
				t.Fatal("WriteFile succeeded, want an error")
			}
			if tc.hook != nil && !errors.Is(err, injected) {
				t.Errorf("error %v does not wrap the injected failure", err)
			}
			assertOnly(t, dir, entries...)
			if tc.wantOld {
				got, rerr := os.ReadFile(p)
				if rerr != nil || !bytes.Equal(got, old) {
					t.Errorf("old file changed: %q, %v", got, rerr)
				}
			}
		})
	}
}

func oldFile(content []byte) func(t *testing.T, dir string) string {
	return func(t *testing.T, dir string) string {
		p := filepath.Join(dir, "target")
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestWriteFileDirSyncFailureReportsContentInPlace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	syncDir = func(string) error { return errors.New("injected") }
	defer func() { syncDir = SyncDir }()
	err := WriteFile(p, []byte("x"), 0o600)
	if err == nil {
		t.Fatal("want the directory fsync error")
	}
	if got, _ := os.ReadFile(p); string(got) != "x" {
		t.Errorf("content %q, want the new content in place", got)
	}
	assertOnly(t, dir, "f")
}

func TestConcurrentWritersLeaveOneWholeFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "state.json")
	const writers = 16
	payloads := make([][]byte, writers)
	for i := range payloads {
		// Large enough that an interleaved or truncated write would show.
		payloads[i] = bytes.Repeat([]byte{byte('a' + i)}, 256<<10)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers*4)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				if err := WriteFile(p, payloads[i], 0o600); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	whole := false
	for _, want := range payloads {
		if bytes.Equal(got, want) {
			whole = true
		}
	}
	if !whole {
		t.Errorf("file (%d bytes) is not any one writer's whole payload", len(got))
	}
	assertOnly(t, dir, "state.json")
}

// A kill between creating the temp file and renaming it leaves `.<base>.tmp-<hex>`; the next
// writer's RemoveLeftovers takes exactly those, nothing else.
func TestRemoveLeftovers(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "state.json")
	if err := WriteFile(target, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A real leftover, made the way WriteFile makes its temp file.
	f, leftover, err := createTemp(pathOps, dir, "state.json", 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	keep := []string{
		"state.json",
		".state.json.tmp-0123456789ABCDEF",  // not our hex
		".state.json.tmp-0123456789abcde",   // too short
		".state.json.tmp-0123456789abcdef0", // too long
		".bao.token.tmp-0123456789abcdef",   // another target's
		"state.json.tmp-0123456789abcdef",   // not hidden
	}
	for _, n := range keep[1:] {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, ".state.json.tmp-fedcba9876543210"), 0o700); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, ".state.json.tmp-fedcba9876543210") // a directory is never ours
	removed, err := RemoveLeftovers(target)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != leftover {
		t.Errorf("removed %v, want only %s", removed, leftover)
	}
	for _, n := range keep {
		if _, err := os.Lstat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if _, err := os.Lstat(leftover); !os.IsNotExist(err) {
		t.Errorf("the leftover is still there: %v", err)
	}
	if removed, err := RemoveLeftovers(filepath.Join(dir, "missing", "x")); err != nil || removed != nil {
		t.Errorf("a missing directory: %v, %v", removed, err)
	}
	if _, err := RemoveLeftovers(dir + "/"); err == nil {
		t.Error("a directory name was accepted as a file")
	}
}

// RemoveLeftoversAll sweeps the leftovers of several targets, in one or more directories,
// reading each directory once (a tick sweeps seven targets, six of them in state_dir).
func TestRemoveLeftoversAll(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "docker")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, target := range []string{filepath.Join(dir, "state.json"), filepath.Join(dir, "bao.token"), filepath.Join(sub, "config.json")} {
		f, leftover, err := createTemp(pathOps, filepath.Dir(target), filepath.Base(target), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		made = append(made, leftover)
	}
	other := filepath.Join(dir, ".lease.jwt.tmp-0123456789abcdef") // a target not swept this time
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	reads := map[string]int{}
	prev := pathOps.readDir
	pathOps.readDir = func(d string) ([]fs.DirEntry, error) { reads[d]++; return prev(d) }
	defer func() { pathOps.readDir = prev }()
	removed, err := RemoveLeftoversAll(filepath.Join(dir, "state.json"), filepath.Join(dir, "bao.token"),
		filepath.Join(sub, "config.json"), filepath.Join(dir, "missing", "x"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	slices.Sort(made)
	if !slices.Equal(removed, made) {
		t.Errorf("removed %v, want %v", removed, made)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another target's leftover went: %v", err)
	}
	for d, n := range reads {
		if n != 1 {
			t.Errorf("%s read %d times, want once", d, n)
		}
	}
	if len(reads) != 3 {
		t.Errorf("directories read: %v, want the three named", reads)
	}
}

func TestWriteNew(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(t.TempDir(), "f")
	if err := WriteNew(p, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, %v: want 0640 despite the umask", fi.Mode().Perm(), err)
	}
	if err := WriteNew(p, []byte("y"), 0o640); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second WriteNew = %v, want ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "x" {
		t.Fatalf("content %q, want the first write's", b)
	}
}

// WriteFileIn writes inside its root only: a link on the way out is refused, a link at the final
// name is replaced (not written through), and a leftover of a killed write is swept by
// RemoveLeftoversIn without touching anything else.
func TestWriteFileInStaysInsideTheRoot(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, "sub", "f")); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := WriteFileIn(root, "out/x", []byte("no"), 0o600); err == nil {
		t.Error("a write through a link out of the root succeeded")
	}
	if _, err := os.Lstat(filepath.Join(outside, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file appeared outside the root: %v", err)
	}
	if err := WriteFileIn(root, "sub/f", []byte("new"), 0o600); err != nil {
		t.Fatalf("WriteFileIn: %v", err)
	}
	if got, _ := os.ReadFile(victim); string(got) != "keep" {
		t.Errorf("the link's target was written: %q", got)
	}
	fi, err := os.Lstat(filepath.Join(dir, "sub", "f"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sub/f = %v, %v; want a regular 0600 file", fi, err)
	}
	leftover := filepath.Join(dir, "sub", ".f.tmp-0123456789abcdef")
	other := filepath.Join(dir, "sub", "data")
	for _, p := range []string{leftover, other} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveLeftoversIn(root, "sub/f")
	if err != nil || len(removed) != 1 || removed[0] != "sub/.f.tmp-0123456789abcdef" {
		t.Errorf("RemoveLeftoversIn = %v, %v", removed, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("RemoveLeftoversIn removed another file: %v", err)
	}
}

// A renewed identity keeps its owner and group: the new file has them before it has content,
// and a chown the writer may not make fails the write, leaving the old file and no temp file.
func TestWriteFileOwned(t *testing.T) {
	// Root gives the file away; anyone else may still pick their own uid and a group of theirs.
	uid, gid := 64123, 64124
	if os.Geteuid() != 0 {
		uid, gid = os.Geteuid(), os.Getegid()
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "id.json")
	if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileOwned(p, []byte("new"), 0o640, uid, gid); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if int(st.Uid) != uid || int(st.Gid) != gid || st.Mode&0o777 != 0o640 {
		t.Errorf("owner %d:%d mode %o, want %d:%d 0640", st.Uid, st.Gid, st.Mode&0o777, uid, gid)
	}
	if b, _ := os.ReadFile(p); string(b) != "new" {
		t.Errorf("content %q", b)
	}
}

func TestWriteFileOwnedRefusedChownKeepsTheOldFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "id.json")
	if err := os.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	fchown = func(*os.File, int, int) error { return syscall.EPERM }
	defer func() { fchown = func(f *os.File, uid, gid int) error { return f.Chown(uid, gid) } }()
	err := WriteFileOwned(p, []byte("new"), 0o640, 64123, 64124)
	if err == nil || !strings.Contains(err.Error(), "chown") {
		t.Fatalf("err = %v, want the chown named", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("content %q after a failed write", b)
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".id.json.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
}
