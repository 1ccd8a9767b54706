package state

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestTryLockTwoDescriptors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	release, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("first TryLock: ok=%v err=%v", ok, err)
	}
	// flock belongs to the open file description, so a second open in this same process contends.
	r2, ok2, err := TryLock(p)
	if err != nil || ok2 || r2 != nil {
		t.Fatalf("second TryLock while held: ok=%v err=%v", ok2, err)
	}
	release()
	release() // idempotent
	r3, ok3, err := TryLock(p)
	if err != nil || !ok3 {
		t.Fatalf("TryLock after release: ok=%v err=%v", ok3, err)
	}
	r3()
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file: %v, %v", st, err)
	}
}

func TestTryLockBadPath(t *testing.T) {
	_, ok, err := TryLock(filepath.Join(t.TempDir(), "absent", "lock"))
	if err == nil || ok {
		t.Errorf("TryLock in a missing directory: ok=%v err=%v", ok, err)
	}
}

// TestTryLockAcrossProcesses runs this test binary again as a lock holder: it takes the lock,
// says so on stdout, and holds it until its stdin closes. No sleeps: each side waits on the other.
func TestTryLockAcrossProcesses(t *testing.T) {
	if p := os.Getenv("STATE_TEST_LOCK_HOLDER"); p != "" {
		release, ok, err := TryLock(p)
		if err != nil || !ok {
			os.Stdout.WriteString("failed\n")
			os.Exit(3)
		}
		os.Stdout.WriteString("locked\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // returns at EOF
		release()
		os.Exit(0)
	}
	p := filepath.Join(t.TempDir(), "lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestTryLockAcrossProcesses$")
	cmd.Env = append(os.Environ(), "STATE_TEST_LOCK_HOLDER="+p)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = stdin.Close()
		_ = cmd.Wait()
		t.Fatalf("holder said %q, %v", line, err)
	}
	if _, ok, err := TryLock(p); ok || err != nil {
		t.Errorf("TryLock while another process holds it: ok=%v err=%v", ok, err)
	}
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	release, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("TryLock after the holder exited: ok=%v err=%v", ok, err)
	}
	release()
}

// Lock waits for a tick's lock, says so once, and gives up with its context.
func TestLockWaitsForTheTick(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	release, ok, err := TryLock(p)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	waiting := make(chan struct{})
	waits := 0
	got := make(chan error, 1)
	go func() {
		r, err := Lock(context.Background(), p, func() { waits++; close(waiting) })
		if err == nil {
			r()
		}
		got <- err
	}()
	<-waiting
	select {
	case err := <-got:
		t.Fatalf("Lock returned while the tick held it: %v", err)
	default:
	}
	release()
	if err := <-got; err != nil || waits != 1 {
		t.Fatalf("Lock after the tick: %v, waited-lines %d", err, waits)
	}
	release2, ok, _ := TryLock(p)
	if !ok {
		t.Fatal("Lock did not release")
	}
	defer release2()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Lock(ctx, p, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v", err)
	}
}
