package diskspace

import (
	"io/fs"
	"math"
	"syscall"
)

// Statfs is the real StatFunc: f_bavail × f_frsize, the space an unprivileged writer can use
// (docker writes as root, but the reserved blocks are the box's safety margin, not the pull's).
func Statfs(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	frsize := uint64(st.Frsize)
	if frsize == 0 {
		frsize = uint64(st.Bsize)
	}
	if frsize != 0 && st.Bavail > math.MaxInt64/frsize {
		return math.MaxInt64, nil
	}
	return int64(st.Bavail * frsize), nil
}
