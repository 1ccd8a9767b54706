// Package capread bounds what is read of an answer from outside: past the cap a read fails with
// the caller's error, so an endless or oversized body is refused rather than read into memory.
package capread

import "io"

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
