//go:build integration

package itest

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRequireNeverSkipsSilentlyInCI(t *testing.T) {
	probeMu.Lock()
	absent := &probeResult{err: errors.New("not installed")}
	absent.once.Do(func() {})
	probeCache["absent-for-test"] = absent
	probeMu.Unlock()
	t.Cleanup(func() {
		probeMu.Lock()
		delete(probeCache, "absent-for-test")
		probeMu.Unlock()
	})
	tests := []struct {
		name      string
		ci        bool
		part      string
		wantFatal bool
		wantSkip  bool
	}{
		{"missing on a workstation skips", false, "absent-for-test", false, true},
		{"missing in CI fails", true, "absent-for-test", true, false},
		{"unknown part fails everywhere", false, "dockr", true, false},
		{"unknown part fails in CI", true, "dockr", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runRecorded(t, func(tb testing.TB) { require(tb, tt.ci, tt.part) })
			if r.fatal != tt.wantFatal || r.skip != tt.wantSkip {
				t.Fatalf("fatal=%v skip=%v (%q), want fatal=%v skip=%v", r.fatal, r.skip, r.msg, tt.wantFatal, tt.wantSkip)
			}
			if !strings.Contains(r.msg, tt.part) {
				t.Fatalf("message %q does not name the part %q", r.msg, tt.part)
			}
		})
	}
}

// TestComposeSeenFromSystemPluginDir: the agent runs docker with its own DOCKER_CONFIG; compose
// must be found there, i.e. in a system plugin dir.
func TestComposeSeenFromSystemPluginDir(t *testing.T) {
	c := Compose(t)
	if !filepath.IsAbs(c.Docker) || !strings.HasPrefix(c.Version, "2.") {
		t.Fatalf("Compose = %+v, want an absolute docker path and a 2.x version", c)
	}
	out, err := c.Run(t, t.TempDir(), t.TempDir(), ProjectName(), "version")
	if err != nil || !strings.Contains(out, c.Version) {
		t.Fatalf("compose version with an empty DOCKER_CONFIG: %v %q", err, out)
	}
	// The system plugin dirs of docker CLI 28 on Linux.
	systemDirs := []string{"/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins",
		"/usr/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins"}
	if !slices.Contains(systemDirs, filepath.Dir(c.PluginPath)) {
		t.Fatalf("compose plugin found at %q, not in a system plugin dir %v", c.PluginPath, systemDirs)
	}
}
