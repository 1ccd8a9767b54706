//go:build integration

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestZZDbgMesh(t *testing.T) {
	m := newMesh(t, "zzdbg", attrAgent, attrBao)
	m.configure(t, "sdk", "log_level: debug\n")
	for i := 0; i < 3; i++ {
		tk := m.tick(t)
		t.Logf("tick %d exit %d:\n%s", i, tk.Exit, tk.Output)
	}
	t.FailNow()
	cmd := exec.Command("strace", "-f", "-e", "trace=connect", "-o", "/tmp/strace.out", m.box.Bin(), "--config", m.box.ConfigPath, "tick")
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(m.box.Dir, "home"))
	out, err := cmd.CombinedOutput()
	t.Logf("strace tick: %v\n%s", err, out)
	cfg, _ := os.ReadFile(m.box.ConfigPath)
	t.Logf("config:\n%s", cfg)
	t.Logf("ctrl: %+v", m.ctrl)
	for i := 0; i < 0; i++ {
		tk := m.tick(t)
		for _, l := range strings.Split(tk.Output, "\n") {
			if strings.Contains(l, "ziti") || strings.Contains(l, "TLS") {
				t.Logf("tick %d: %.300s", i, l)
			}
		}
	}
}
