//go:build integration

package doctor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// TestJudgePathAsAnotherUser runs the real setpriv as root on the real filesystem: the verdicts
// the unit tests take from the runner fake are the kernel's here.
func TestJudgePathAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		itest.Unavailable(t, "needs root: doctor only tries access as another user when it runs as root")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		itest.Unavailable(t, "setpriv (util-linux) is not installed")
	}
	// Every Debian has nobody (base-passwd): a machine without it is broken, not unequipped.
	nobody, err := LookupAccount("nobody")
	if err != nil {
		t.Fatalf("no user nobody: %v", err)
	}
	dir, err := os.MkdirTemp("", "doctor-tryas-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	mustChmod := func(p string, m os.FileMode) {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
	mustChmod(dir, 0o755)
	for name, mode := range map[string]os.FileMode{"open": 0o644, "closed": 0o600} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		mustChmod(p, mode)
	}
	sealed := filepath.Join(dir, "sealed")
	if err := os.Mkdir(sealed, 0o700); err != nil {
		t.Fatal(err)
	}
	mustChmod(sealed, 0o700)
	if err := os.WriteFile(filepath.Join(sealed, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &checker{env: &Env{Self: CurrentAccount(), Runner: runner.Exec{}, Stat: OSStat, UserName: UserName, GroupName: GroupName}}
	for _, tc := range []struct{ path, denied string }{
		{filepath.Join(dir, "open"), ""},
		{filepath.Join(dir, "closed"), "cannot read " + filepath.Join(dir, "closed")},
		{filepath.Join(sealed, "f"), "cannot enter " + sealed},
	} {
		v, err := c.judgePath(context.Background(), nobody, tc.path, "-r")
		if err != nil || !strings.HasPrefix(v.Denied, tc.denied) || (tc.denied == "") != (v.Denied == "") {
			t.Errorf("judgePath(nobody, %s) = %+v, %v; want denied %q", tc.path, v, err, tc.denied)
		}
	}
	// Root itself is let through where nobody is not.
	if v, err := c.judgePath(context.Background(), CurrentAccount(), filepath.Join(dir, "closed"), "-r"); err != nil || v.Denied != "" {
		t.Errorf("judgePath(root, closed) = %+v, %v", v, err)
	}
}
