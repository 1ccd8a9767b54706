// Package appimage turns the demo app (internal/dev/cmd/demoapp) into a docker image without a
// base image, buildx or any pull: `docker build` of a Dockerfile `FROM scratch` whose only layer
// is the static binary (and an empty /tmp), with the app's own HEALTHCHECK. The build context is
// a tar fed on stdin, so nothing is read from or written to a directory but the binary itself.
// The dev stack and the integration tests push the image to their local registry.
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

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
)

// Package is the demo app's import path inside the module.
const Package = "./internal/dev/cmd/demoapp"

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

// Dockerfile is the image's recipe. `FROM scratch` needs no pull with either builder (the
// classic one or BuildKit); ADD of a local tar unpacks it with the modes it holds (/tmp 1777).
// The HEALTHCHECK is the image's own: a compose service without a healthcheck of its own is
// judged by it, one with a healthcheck overrides it.
const Dockerfile = `FROM scratch
ADD rootfs.tar /
ENTRYPOINT ["/app"]
EXPOSE 8080
HEALTHCHECK --interval=1s --timeout=3s --retries=3 CMD ["/app", "-check"]
`

// Build makes the image ref from the app binary bin with `docker build` (Dockerfile): root
// filesystem /app and an empty /tmp, entrypoint /app, port 8080, HEALTHCHECK `/app -check`
// every second. --no-cache: two builds never share layers, so removing one image's tag can
// never pull a cached layer from under a build running beside it.
func Build(ctx context.Context, bin, ref string) error {
	rootfs, err := imageTar(bin)
	if err != nil {
		return fmt.Errorf("appimage: %w", err)
	}
	buildCtx, err := contextTar(rootfs)
	if err != nil {
		return fmt.Errorf("appimage: %w", err)
	}
	if _, err := dockercli.Run(ctx, "", buildCtx, "build", "--quiet", "--no-cache", "--tag", ref, "-"); err != nil {
		return fmt.Errorf("appimage: %w", err)
	}
	return nil
}

// contextTar is the build context: the Dockerfile and rootfs.tar.
func contextTar(rootfs []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Unix(0, 0)
	for _, f := range []struct {
		name string
		body []byte
	}{{"Dockerfile", []byte(Dockerfile)}, {"rootfs.tar", rootfs}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.body)), ModTime: mod}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// imageTar is the root filesystem of the image: /app and an empty /tmp.
func imageTar(bin string) ([]byte, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mod}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "app", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b)), ModTime: mod}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(b); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
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
