//go:build integration

package compose

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// TestRealDocker drives a real engine through the docker CLI: the argv this package builds must
// be what the installed compose accepts. It needs a reachable docker engine with the compose
// plugin and the Go toolchain; it fails (never skips) without them, because CI asked for it.
func TestRealDocker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ex := runner.Exec{}
	image := buildImage(ctx, t, ex)

	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	d := &Docker{ConfigDir: t.TempDir(), Project: "monkyit-" + hex.EncodeToString(suffix), Runner: ex, PollInterval: 500 * time.Millisecond, Redact: &secret.Redactor{}}
	t.Cleanup(func() {
		if err := d.Down(context.Background(), "", "", true); err != nil {
			t.Errorf("cleanup down: %v", err)
		}
	})

	info, err := d.Info(ctx)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if info.ServerVersion == "" || info.DockerRootDir == "" {
		t.Errorf("Info = %+v, want both fields", info)
	}
	if v, err := d.ComposeVersion(ctx); err != nil || v == "" {
		t.Fatalf("ComposeVersion = %q, %v", v, err)
	}

	rel := t.TempDir()
	compose := "services:\n" +
		"  web:\n    image: " + image + "\n    healthcheck:\n      test: [\"CMD\", \"/app\", \"-check\"]\n      interval: 1s\n" +
		"  plain:\n    image: " + image + "\n"
	if err := os.WriteFile(filepath.Join(rel, "docker-compose.yml"), []byte(compose), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Pull(ctx, rel, "docker-compose.yml", "missing"); err != nil {
		t.Fatalf("Pull missing of a local image: %v", err)
	}
	if err := d.Up(ctx, rel, "docker-compose.yml"); err != nil {
		t.Fatalf("Up: %v", err)
	}
	ok, cs, err := d.WaitHealthy(ctx, rel, "docker-compose.yml", time.Minute, nil)
	if !ok || err != nil {
		t.Fatalf("WaitHealthy = %v, %v; unready %v", ok, err, Unready(cs))
	}
	if len(cs) != 2 {
		t.Errorf("Ps saw %d containers, want 2: %+v", len(cs), cs)
	}
	// Drift correction reads each container's config hash from this very ps (no extra command).
	for _, c := range cs {
		res, err := ex.Run(ctx, runner.Cmd{Name: "docker", Args: []string{"inspect", "--format", "{{index .Config.Labels \"" + ConfigHashLabel + "\"}}", c.Name}})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("docker inspect %s: %v %s", c.Name, err, res.Stderr)
		}
		if want := strings.TrimSpace(string(res.Stdout)); c.ConfigHash == "" || c.ConfigHash != want {
			t.Errorf("%s: ps gave config hash %q, the container's label is %q", c.Name, c.ConfigHash, want)
		}
	}
	logs, err := d.Logs(ctx, rel, "docker-compose.yml", 10)
	if err != nil || !strings.Contains(logs, "app: serving") {
		t.Errorf("Logs = %q, %v", logs, err)
	}

	// A registry nobody listens on: the refusal must reach the caller in the engine's words.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "docker-compose.yml"), []byte("services:\n  api:\n    image: 127.0.0.1:1/nope/api:v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = d.Pull(ctx, bad, "docker-compose.yml", "always")
	var ce *CmdError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Pull from a dead registry: %v", err)
	}

	// Retire after the release directory is gone: by project name alone.
	if err := os.RemoveAll(rel); err != nil {
		t.Fatal(err)
	}
	if err := d.Down(ctx, rel, "docker-compose.yml", true); err != nil {
		t.Fatalf("Down without a compose file: %v", err)
	}
	if cs, err := d.Ps(ctx, "", ""); err != nil || len(cs) != 0 {
		t.Errorf("after Down: Ps = %+v, %v", cs, err)
	}
}

// buildImage builds testdata/app statically and imports it as an image, so the test pulls
// nothing from any registry.
func buildImage(ctx context.Context, t *testing.T, ex runner.Exec) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	res, err := ex.Run(ctx, runner.Cmd{Name: "go", Args: []string{"build", "-o", bin, "./testdata/app"}, Env: []string{"CGO_ENABLED=0"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("go build: %v %s", err, res.Stderr)
	}
	tarPath := filepath.Join(dir, "app.tar")
	if err := writeTar(tarPath, bin); err != nil {
		t.Fatal(err)
	}
	const image = "monky-deployd-test/app:it"
	res, err = ex.Run(ctx, runner.Cmd{Name: "docker", Args: []string{"import", "--change", `ENTRYPOINT ["/app"]`, tarPath, image}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("docker import: %v %s", err, res.Stderr)
	}
	return image
}

func writeTar(path, bin string) error {
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: "app", Mode: 0o755, Size: int64(len(b))}); err != nil {
		return err
	}
	if _, err := tw.Write(b); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// TestOperatorsEnvironmentChangesNothing: a tick started by hand inherits the operator's shell.
// Its COMPOSE_ENV_FILES would replace the release's .env, COMPOSE_PROFILES start services the
// bundle keeps off, COMPOSE_FILE and COMPOSE_PROJECT_NAME name other files and projects,
// DOCKER_HOST and DOCKER_CONTEXT another engine. With the real compose plugin: each one changes
// what docker does when inherited (the control), and nothing when the agent runs docker.
func TestOperatorsEnvironmentChangesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	evil := t.TempDir()
	write := func(p, content string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(evil, "evil.yml"), "services:\n  evil:\n    image: evil:1\n    privileged: true\n")
	write(filepath.Join(evil, "evil.env"), "APP_TAG=from-the-operator\n")
	rel := t.TempDir()
	write(filepath.Join(rel, "docker-compose.yml"), "services:\n  web:\n    image: \"app:${APP_TAG}\"\n  debug:\n    image: debug:1\n    profiles: [debug]\n")
	write(filepath.Join(rel, ".env"), "APP_TAG=from-the-release\n")
	for k, v := range map[string]string{
		"COMPOSE_FILE": filepath.Join(evil, "evil.yml"), "COMPOSE_PROFILES": "debug", "COMPOSE_ENV_FILES": filepath.Join(evil, "evil.env"),
		"COMPOSE_PROJECT_NAME": "evil", "DOCKER_HOST": "tcp://127.0.0.1:1", "DOCKER_CONTEXT": "default",
	} {
		t.Setenv(k, v)
	}
	d := &Docker{ConfigDir: t.TempDir(), Project: "monkyit-env", Runner: runner.Exec{}, Redact: &secret.Redactor{}} // Environ: the process's
	config := append(d.projectArgs(), "--project-directory", rel, "-f", filepath.Join(rel, "docker-compose.yml"), "config", "--format", "json")
	for _, inherit := range []bool{true, false} {
		cmd := d.Command(config...)
		cmd.OnlyEnv = !inherit
		res, err := d.Runner.Run(ctx, cmd)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("compose config (inherit %v): %v, exit %d: %s", inherit, err, res.ExitCode, res.Stderr)
		}
		out := string(res.Stdout)
		hostile := strings.Contains(out, "from-the-operator") || strings.Contains(out, "debug:1")
		switch {
		case inherit && !hostile:
			t.Fatalf("control: the inherited COMPOSE_ENV_FILES and COMPOSE_PROFILES changed nothing; the test proves nothing:\n%s", out)
		case !inherit && (hostile || !strings.Contains(out, "app:from-the-release")):
			t.Errorf("the agent's compose config read the operator's environment:\n%s", out)
		}
	}
	if _, err := d.Info(ctx); err != nil {
		t.Errorf("docker info with the operator's DOCKER_HOST set: %v", err)
	}
	inherited := d.Command("info", "--format", "{{json .}}")
	inherited.OnlyEnv = false
	if res, err := d.Runner.Run(ctx, inherited); err == nil && res.ExitCode == 0 {
		t.Error("control: the inherited DOCKER_HOST did not send docker elsewhere")
	}
	out, err := d.Config(ctx, rel, "docker-compose.yml")
	if err != nil || !strings.Contains(string(out), "app:from-the-release") || strings.Contains(string(out), "evil") {
		t.Errorf("Config = %s, %v", out, err)
	}
}
