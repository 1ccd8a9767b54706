//go:build integration

package itest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/appimage"
)

// Image is the demo app (internal/dev/cmd/demoapp) built `FROM scratch` as a one-file image
// (appimage.Build) and pushed to a Registry. The image carries its own HEALTHCHECK
// (`["CMD", "/app", "-check"]` every second); a compose healthcheck overrides it.
type Image struct {
	Ref     string // <registry>/app:<tag>, what a compose file names
	Tag     string
	Version string // what the app prints at /version (the tag)

	reg *Registry
}

// BuildImages builds the demo app once per tag (statically, with the tag linked in as its
// version, so every tag is a distinct image), builds it as `<reg.Addr>/app:<tag>` with
// appimage.Build (FROM scratch: no base image, no buildx, nothing pulled), and pushes it to reg with reg's
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var images []*Image
	for _, tag := range tags {
		if err := appimage.CheckTag(tag); err != nil {
			t.Fatalf("itest: BuildImages: %v", err)
		}
		im := &Image{Ref: reg.Addr + "/app:" + tag, Tag: tag, Version: tag, reg: reg}
		bin := filepath.Join(dir, "app-"+tag)
		if err := appimage.BuildApp(ctx, root, bin, tag); err != nil {
			t.Fatalf("itest: %v", err)
		}
		if err := appimage.Build(ctx, bin, im.Ref); err != nil {
			t.Fatalf("itest: %v", err)
		}
		t.Cleanup(func() { im.removeLocal(t, true) })
		im.Push(t)
		images = append(images, im)
	}
	return images
}

// Push pushes the local tag to the registry (BuildImages already did once).
func (im *Image) Push(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := appimage.Push(ctx, im.reg.DockerConfig(t), im.Ref); err != nil {
		t.Fatalf("itest: %v", err)
	}
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
	err := appimage.Remove(ctx, im.Ref, cleanup)
	switch {
	case err == nil:
	case cleanup:
		t.Errorf("itest: cleanup: %v", err)
	default:
		t.Fatalf("itest: %v", err)
	}
}

// LocalImageExists reports whether the engine holds ref locally.
func LocalImageExists(t testing.TB, ref string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ok, err := appimage.Exists(ctx, ref)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	return ok
}

// String keeps %v of an Image readable in test failures.
func (im *Image) String() string { return fmt.Sprintf("image %s", im.Ref) }
