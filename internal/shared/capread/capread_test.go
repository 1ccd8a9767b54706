package capread

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

var errBig = errors.New("too large")

func TestReader(t *testing.T) {
	for _, tc := range []struct {
		body string
		want error
	}{
		{"", nil}, {"abc", nil}, {"abcd", nil}, {"abcde", errBig}, {strings.Repeat("x", 1<<16), errBig},
	} {
		// One byte a read, as a slow network gives them, and whole.
		for _, r := range []io.Reader{strings.NewReader(tc.body), iotest.OneByteReader(strings.NewReader(tc.body))} {
			got, err := io.ReadAll(New(r, 4, errBig))
			if !errors.Is(err, tc.want) {
				t.Errorf("%d bytes: err %v, want %v", len(tc.body), err, tc.want)
			}
			if tc.want == nil && string(got) != tc.body {
				t.Errorf("%d bytes read as %q", len(tc.body), got)
			}
			if len(got) > 4 {
				t.Errorf("%d bytes: %d read past the cap", len(tc.body), len(got))
			}
		}
	}
}

// Regular reads a regular file up to the cap (exactly the cap too), refuses a larger one with the
// caller's error, and reads nothing of a FIFO, a directory or a file check refuses.
func TestRegular(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		t.Helper()
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	for name, body := range map[string]string{"four": "abcd", "five": "abcde"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	if b, err := Regular(open("four"), 4, errBig, nil); err != nil || string(b) != "abcd" {
		t.Errorf("a file of exactly the cap: %q, %v", b, err)
	}
	if _, err := Regular(open("five"), 4, errBig, nil); !errors.Is(err, errBig) {
		t.Errorf("a file past the cap: %v, want %v", err, errBig)
	}
	for name, typ := range map[string]fs.FileMode{"fifo": fs.ModeNamedPipe, "dir": fs.ModeDir} {
		var nr *NotRegularError
		if _, err := Regular(open(name), 4, errBig, nil); !errors.As(err, &nr) || nr.Type != typ {
			t.Errorf("%s: %v, want a NotRegularError of type %v", name, err, typ)
		}
	}
	refused := errors.New("not the file meant")
	f := open("four")
	if b, err := Regular(f, 4, errBig, func(fs.FileInfo) error { return refused }); !errors.Is(err, refused) || b != nil {
		t.Errorf("check refused: %q, %v", b, err)
	}
	if b, _ := io.ReadAll(f); string(b) != "abcd" {
		t.Errorf("a file check refused was read (%q left)", b)
	}
}

// File (and Open under it) reads a regular file, through a symlink too, and refuses anything
// else at once: a FIFO with no writer would hold a plain open forever, and one with a writer
// that never writes a plain read.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	p := func(name string) string { return filepath.Join(dir, name) }
	for name, body := range map[string]string{"four": "abcd", "five": "abcde"} {
		if err := os.WriteFile(p(name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("four", p("link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"fifo", "fifo-with-writer"} {
		if err := syscall.Mkfifo(p(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(p("dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	// A writer that holds the FIFO open and never writes.
	w, err := os.OpenFile(p("fifo-with-writer"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()

	for _, name := range []string{"four", "link"} {
		if b, err := File(p(name), 4, errBig); err != nil || string(b) != "abcd" {
			t.Errorf("%s, exactly the cap: %q, %v", name, b, err)
		}
	}
	if _, err := File(p("five"), 4, errBig); !errors.Is(err, errBig) {
		t.Errorf("a file past the cap: %v, want %v", err, errBig)
	}
	if _, err := File(p("missing"), 4, errBig); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	for _, tc := range []struct {
		path, kind string
	}{
		{p("fifo"), "fifo"}, {p("fifo-with-writer"), "fifo"}, {p("dir"), "directory"}, {"/dev/null", "device"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := File(tc.path, 4, errBig)
			done <- err
		}()
		select {
		case err := <-done:
			var nr *NotRegularError
			if !errors.As(err, &nr) || !strings.Contains(err.Error(), tc.path) || !strings.Contains(err.Error(), "not a regular file ("+tc.kind+")") {
				t.Errorf("%s: %v, want a NotRegularError naming the path and %q", tc.path, err, tc.kind)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: File still waits after 10 s", tc.path)
		}
	}
}
