package state

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// TryLock takes an exclusive, non-blocking flock on path (created 0600 if absent). ok is false,
// with no error, when another holder has it: a second tick while one runs exits at once, doing
// nothing. The lock belongs to the open file, so it dies with the process — a killed tick never
// leaves a stale lock, which is why the file is never deleted. release unlocks and closes; it is
// safe to call more than once. The descriptor is close-on-exec, so docker children do not
// inherit the lock and outlive it.
func TryLock(path string) (release func(), ok bool, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("state: lock %s: %w", path, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		_ = f.Close()
		return nil, false, nil
	}
	if err != nil {
		_ = f.Close()
		return nil, false, fmt.Errorf("state: lock %s: %w", path, err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			_ = f.Close()
		})
	}, true, nil
}
