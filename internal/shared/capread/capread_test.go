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
