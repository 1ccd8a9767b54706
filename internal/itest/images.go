//go:build integration

package itest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Image is the test app (internal/itest/testapp) imported as a one-file image and pushed to a
// Registry. Its healthcheck is `["CMD", "/app", "-check"]`, set in the compose file.
type Image struct {
	Ref     string // <registry>/app:<tag>, what a compose file names
	Tag     string
	Version string // what the app prints at /version (the tag)

	reg *Registry
}

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// BuildImages builds the test app once per tag (statically, CGO_ENABLED=0, with the tag linked in
// as its version, so every tag is a distinct image), imports it as `<reg.Addr>/app:<tag>` with
// `docker import` (no base image, no buildx, nothing pulled), and pushes it to reg with reg's
// temporary logged-in DOCKER_CONFIG. The local tags stay until RemoveLocal or the end of the
// test, when they are removed.
func BuildImages(t testing.TB, reg *Registry, tags ...string) []*Image {
	t.Helper()
	Require(t, PartGo, PartDocker)
	if len(tags) == 0 {
		t.Fatal("itest: BuildImages: no tags")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	dir := t.TempDir()
	var images []*Image
	for _, tag := range tags {
		if !tagRE.MatchString(tag) {
			t.Fatalf("itest: BuildImages: %q is not a valid image tag", tag)
		}
		im := &Image{Ref: reg.Addr + "/app:" + tag, Tag: tag, Version: tag, reg: reg}
		bin := filepath.Join(dir, "app-"+tag)
		buildApp(t, root, bin, tag)
		tarPath := filepath.Join(dir, "app-"+tag+".tar")
		if err := writeImageTar(bin, tarPath); err != nil {
			t.Fatalf("itest: BuildImages: %v", err)
		}
		docker(t, "", "import", "--change", `ENTRYPOINT ["/app"]`, "--change", "EXPOSE 8080", tarPath, im.Ref)
		t.Cleanup(func() { im.removeLocal(t, true) })
		im.Push(t)
		images = append(images, im)
	}
	return images
}

func buildApp(t testing.TB, root, out, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "integration", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, "./internal/itest/testapp")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("itest: go build testapp: %v\n%s", err, b)
	}
}

// writeImageTar makes the root filesystem of the image: /app and an empty /tmp.
func writeImageTar(bin, tarPath string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mod}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "app", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b)), ModTime: mod}); err != nil {
		return err
	}
	if _, err := tw.Write(b); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return os.WriteFile(tarPath, buf.Bytes(), 0o600)
}

// Push pushes the local tag to the registry (BuildImages already did once).
func (im *Image) Push(t testing.TB) {
	t.Helper()
	docker(t, im.reg.DockerConfig(t), "push", "--quiet", im.Ref)
}

// RemoveLocal deletes the local tag, so that whoever runs the image next must pull it from the
// registry — with credentials.
func (im *Image) RemoveLocal(t testing.TB) {
	t.Helper()
	im.removeLocal(t, false)
}

// removeLocal removes the tag; at cleanup an absent tag is fine (RemoveLocal ran, or a test
// removed it), anywhere else it is a failure of the test's own plan.
func (im *Image) removeLocal(t testing.TB, cleanup bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := runDocker(ctx, "", nil, "image", "rm", im.Ref)
	switch {
	case err == nil:
	case cleanup && strings.Contains(err.Error(), "No such image"):
	case cleanup:
		t.Errorf("itest: cleanup: %v", err)
	default:
		t.Fatalf("itest: %v", err)
	}
}

// LocalImageExists reports whether the engine holds ref locally.
func LocalImageExists(t testing.TB, ref string) bool {
	t.Helper()
	out := docker(t, "", "image", "ls", "--quiet", "--no-trunc", ref)
	return strings.TrimSpace(out) != ""
}

// String keeps %v of an Image readable in test failures.
func (im *Image) String() string { return fmt.Sprintf("image %s", im.Ref) }
