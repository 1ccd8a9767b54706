package doctor

import (
	"errors"

	"golang.org/x/sys/unix"
)

// readACL returns the raw POSIX access ACL of path, nil when it carries none.
func readACL(path string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Getxattr(path, aclXattr, buf)
		switch {
		case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
			return nil, nil
		case errors.Is(err, unix.ERANGE) && len(buf) < 1<<20:
			buf = make([]byte, len(buf)*4)
			continue
		case err != nil:
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		return buf[:n], nil
	}
}
