// Package capread bounds what is read of an answer or a file from outside: past the cap a read
// fails with the caller's error, so an endless or oversized body is refused rather than read into
// memory; a file is read only when it is a regular file (Regular).
package capread

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Reader reads at most a cap's bytes of R; a body of exactly the cap reads whole.
type Reader struct {
	r    io.Reader
	left int64
	err  error
}

// New reads r, failing with tooLarge once more than max bytes arrive.
func New(r io.Reader, max int64, tooLarge error) *Reader {
	return &Reader{r: r, left: max, err: tooLarge}
}

func (c *Reader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// At the cap: one byte more is too much; none means the body ended there.
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, c.err
		}
		return c.r.Read(p) // io.EOF, or the reader's own error
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// NotRegularError: Regular was given a FIFO, a device, a directory or a link, not a file.
type NotRegularError struct{ Type fs.FileMode }

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("not a regular file (%s)", TypeName(e.Type))
}

// TypeName names the type of a file's mode in a journal line's words: symlink, fifo, directory,
// socket, device, or the mode's own letters for anything else.
func TypeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return m.Type().String()
}

// Regular reads f, which must be a regular file (else a *NotRegularError), to at most max bytes
// (more: tooLarge). check, when set, may refuse the file by what it is before a byte is read.
// Open f with O_NONBLOCK: a FIFO put where a file was then cannot hang the caller at the open,
// and is refused here before it is read.
func Regular(f *os.File, max int64, tooLarge error, check func(fs.FileInfo) error) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &NotRegularError{Type: fi.Mode().Type()}
	}
	if check != nil {
		if err := check(fi); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(New(f, max, tooLarge))
}

// Open opens path for reading, following symlinks, and returns it only when it is a regular
// file (else a *NotRegularError). It never blocks: a FIFO put in the file's place would hold a
// plain open until some writer came, and a tick until systemd's timeout. The caller closes it.
func Open(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: &NotRegularError{Type: fi.Mode().Type()}}
	}
	return f, fi, nil
}

// File reads the regular file at path (Open), failing with tooLarge past max bytes (nil: "larger
// than max bytes"). A missing file is the open's error (fs.ErrNotExist), as with os.ReadFile.
func File(path string, max int64, tooLarge error) ([]byte, error) {
	f, _, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if tooLarge == nil {
		tooLarge = fmt.Errorf("larger than %d bytes", max)
	}
	return io.ReadAll(New(f, max, tooLarge))
}
