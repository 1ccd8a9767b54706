//go:build integration

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"
)

func TestZZProfMesh(t *testing.T) {
	mode := os.Getenv("ZZ_MODE")
	m := newMesh(t, "zzprof", attrAgent, attrBao)
	m.configure(t, "sdk", "")
	m.converge(t, 6)
	for i := 0; i < 3; i++ {
		m.tick(t)
	}
	_ = mode
	prof := exec.Command(os.Getenv("MONKY_ZITI_BIN"), "agent", "pprof-cpu", "--pid", fmt.Sprint(m.ctrl.Pid()), "-o", "/tmp/ctrl.prof", "--timeout", "60s")
	prof.Stdout, prof.Stderr = os.Stdout, os.Stderr
	if err := prof.Start(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for start := time.Now(); time.Since(start) < 29*time.Second; n++ {
		tk := m.tick(t)
		if tk.Exit != 0 {
			t.Fatalf("exit %d", tk.Exit)
		}
	}
	t.Logf("%d ticks", n)
	if err := prof.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("identity dir %s", m.box.Dir)
}
