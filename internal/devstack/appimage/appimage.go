// Package appimage turns the demo app (internal/devstack/demoapp) into a docker image without a
// base image, buildx or any pull: the static binary is written into a one-file root filesystem
// and `docker import`ed. The dev stack and the integration tests push it to their local registry.
package appimage

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/devstack/dockercli"
)

// Package is the demo app's import path inside the module.
const Package = "./internal/devstack/demoapp"

var tagRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// CheckTag rejects what docker would not take as an image tag.
func CheckTag(tag string) error {
	if !tagRE.MatchString(tag) {
		return fmt.Errorf("appimage: %q is not a valid image tag", tag)
	}
	return nil
}

// BuildApp builds the demo app statically (CGO_ENABLED=0, GOOS=linux) from the module at root
// into out, with version linked in as what it prints at /version: every version is a distinct
// image.
func BuildApp(ctx context.Context, root, out, version string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version, "-o", out, Package)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("appimage: go build %s: %w\n%s", Package, err, b)
	}
	return nil
}

// Import makes the image ref from the app binary bin: root filesystem /app and an empty /tmp,
// entrypoint /app, port 8080. The compose healthcheck is `["CMD", "/app", "-check"]`.
func Import(ctx context.Context, bin, ref string) error {
	tarPath := bin + ".image.tar"
	if err := writeImageTar(bin, tarPath); err != nil {
		return fmt.Errorf("appimage: %w", err)
	}
	defer os.Remove(tarPath)
	if _, err := dockercli.Run(ctx, "", nil, "import", "--change", `ENTRYPOINT ["/app"]`, "--change", "EXPOSE 8080", tarPath, ref); err != nil {
		return fmt.Errorf("appimage: %w", err)
	}
	return nil
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

// Push pushes ref with the credentials of dockerConfig (a logged-in DOCKER_CONFIG).
func Push(ctx context.Context, dockerConfig, ref string) error {
	if _, err := dockercli.Run(ctx, dockerConfig, nil, "push", "--quiet", ref); err != nil {
		return fmt.Errorf("appimage: %w", err)
	}
	return nil
}

// Remove deletes the local tag ref. An absent tag is ErrNoSuchImage-like: absentOK says whether
// that is fine (at cleanup it is).
func Remove(ctx context.Context, ref string, absentOK bool) error {
	_, err := dockercli.Run(ctx, "", nil, "image", "rm", ref)
	if err != nil && !(absentOK && strings.Contains(err.Error(), "No such image")) {
		return fmt.Errorf("appimage: %w", err)
	}
	return nil
}

// Exists reports whether the engine holds ref locally.
func Exists(ctx context.Context, ref string) (bool, error) {
	out, err := dockercli.Run(ctx, "", nil, "image", "ls", "--quiet", "--no-trunc", ref)
	if err != nil {
		return false, fmt.Errorf("appimage: %w", err)
	}
	return strings.TrimSpace(out) != "", nil
}
