package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// TryLock takes an exclusive non-blocking flock on path (0600); ok is false when another tick
// holds it. It dies with the process, so it is never stale. release is idempotent.
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

// lockPoll is how often Lock looks again at a lock a tick holds.
const lockPoll = 200 * time.Millisecond

// Lock takes the lock of TryLock, waiting while a tick holds it (onWait is called once, when it
// starts to wait) until ctx ends; a blocking flock would not hear Ctrl-C.
func Lock(ctx context.Context, path string, onWait func()) (release func(), err error) {
	waited := false
	for {
		release, ok, err := TryLock(path)
		if err != nil || ok {
			return release, err
		}
		if !waited && onWait != nil {
			onWait()
		}
		waited = true
		t := time.NewTimer(lockPoll)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("state: lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
	}
}
