//go:build unix

package kit

import "syscall"

func umask(m int) int { return syscall.Umask(m) }
