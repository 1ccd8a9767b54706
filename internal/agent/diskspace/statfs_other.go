//go:build !linux

package diskspace

import (
	"errors"
	"io/fs"
	"runtime"
)

// Statfs is only implemented on Linux, the one system the agent runs on.
func Statfs(path string) (int64, error) {
	return 0, &fs.PathError{Op: "statfs", Path: path, Err: errors.New("not supported on " + runtime.GOOS)}
}
