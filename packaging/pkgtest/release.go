//go:build integration

package pkgtest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Release020 is the commit of main whose tree is release 0.2.0 (its VERSION says so): the last
// release that shipped everything — the agent, fleetctl, the exporter's unit and the alert rules
// — in the one package named monky-deployd, which every box and the operator's host run today.
const Release020 = "d5b52a7"

// ReleasePackage builds the monky-deployd package of the release at commit, with that tree's
// own make deb (its binaries, units and maintainer scripts, byte for byte what shipped, save the
// build's time stamps), and returns its path. The .deb is cached under the tool cache
// (MONKY_TOOL_CACHE, else beside the Go build cache, as scripts/build-box-image.sh caches the box
// image), named by the commit: the first build takes a few minutes, later ones nothing. The
// commit must be in the repository at root (a shallow clone may lack it: git fetch --unshallow).
func ReleasePackage(root, commit, wantVersion string) (string, error) {
	full, err := Run(root, nil, "git", "rev-parse", "--verify", commit+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("release %s: commit %s is not in %s (a shallow clone? git fetch --unshallow): %v\n%s", wantVersion, commit, root, err, full)
	}
	full = strings.TrimSpace(full)
	cache := os.Getenv("MONKY_TOOL_CACHE")
	if cache == "" {
		gocache, err := Run("", nil, "go", "env", "GOCACHE")
		if err != nil {
			return "", fmt.Errorf("go env GOCACHE: %v", err)
		}
		cache = filepath.Join(strings.TrimSpace(gocache), "..", "monky-tools")
	}
	name := fmt.Sprintf("monky-deployd_%s_amd64.deb", wantVersion)
	cached := filepath.Join(cache, "release-"+full[:12]+"-"+name)
	if st, err := os.Stat(cached); err == nil && st.Size() > 0 {
		return cached, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	// One build at a time across test processes (debtest and boxtest may run together).
	lock, err := os.OpenFile(filepath.Join(cache, ".release.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	if st, err := os.Stat(cached); err == nil && st.Size() > 0 {
		return cached, nil
	}
	tree, err := os.MkdirTemp("", "monky-release-"+wantVersion+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tree)
	tarball := filepath.Join(tree, ".tree.tar")
	if out, err := Run(root, nil, "git", "archive", "--format=tar", "-o", tarball, full); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", commit, err, out)
	}
	if out, err := Run(tree, nil, "tar", "-xf", tarball); err != nil {
		return "", fmt.Errorf("unpacking %s: %v\n%s", commit, err, out)
	}
	os.Remove(tarball)
	v, err := os.ReadFile(filepath.Join(tree, "VERSION"))
	if err != nil || strings.TrimSpace(string(v)) != wantVersion {
		return "", fmt.Errorf("commit %s's VERSION is %q, not %s", commit, strings.TrimSpace(string(v)), wantVersion)
	}
	epoch, err := Run(root, nil, "git", "log", "-1", "--format=%ct", full)
	if err != nil {
		return "", fmt.Errorf("git log %s: %v", commit, err)
	}
	dist := filepath.Join(tree, "dist")
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strings.TrimSpace(epoch))
	if out, err := Run(tree, env, "make", "-f", "packaging/packaging.mk", "deb", "PKG_DIST="+dist); err != nil {
		return "", fmt.Errorf("make deb in %s's tree: %v\n%s", commit, err, out)
	}
	if err := copyTo(filepath.Join(dist, name), cached); err != nil {
		return "", err
	}
	return cached, nil
}

func copyTo(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".release-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
