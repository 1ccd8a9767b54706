//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/dockercli"
)

// ComposeCLI is the docker CLI with the compose v2 plugin, as the agent will find it.
type ComposeCLI struct {
	Docker     string // absolute path of the docker CLI
	Version    string // compose version without "v", e.g. "2.40.3"
	PluginPath string // the docker-compose plugin binary the CLI found with an empty DOCKER_CONFIG
}

// Compose locates the docker CLI and confirms that `docker compose version` reports v2 while
// DOCKER_CONFIG points to an empty directory — the agent's situation: its DOCKER_CONFIG hides
// every per-user plugin, so only a system plugin dir counts. Missing: see Require.
func Compose(t testing.TB) *ComposeCLI {
	t.Helper()
	Require(t, PartDocker, PartCompose)
	path, err := exec.LookPath("docker")
	if err != nil {
		missing(t, PartDocker, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatalf("itest: %v", err)
	}
	v, _ := probe(PartCompose)
	version, plugin, _ := strings.Cut(v, " ")
	return &ComposeCLI{Docker: abs, Version: version, PluginPath: plugin}
}

// Run runs `docker compose -p project <args>` in dir with DOCKER_CONFIG=dockerConfig (an empty
// temp dir when ""), returning combined output. A non-zero exit is the error, not a test
// failure: tests assert on failures too (an unhealthy `up --wait`).
func (c *ComposeCLI) Run(t testing.TB, dir, dockerConfig, project string, args ...string) (string, error) {
	t.Helper()
	if dockerConfig == "" {
		dockerConfig = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Docker, append([]string{"compose", "-p", project}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+dockerConfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("docker compose -p %s %s: %w", project, firstWords(args, 2), err)
	}
	return string(out), nil
}

// ProjectName returns a fresh compose project name ("itest-" + random), so parallel tests and
// leftovers of a killed run never collide.
func ProjectName() string { return "itest-" + randomHex(5) }

// CleanupProject registers, for the end of the test, dockercli.RemoveProject: `docker compose
// -p name down -v --remove-orphans` and then the forced removal of every container, network and
// volume still labelled with that project (an agent that crashed mid-apply leaves such things).
// Anything that survives fails the test. Cleanups run last-registered-first: call CleanupProject
// AFTER BuildImages, so the containers are gone before the image tags they use are removed.
func CleanupProject(t testing.TB, name string) {
	t.Helper()
	Require(t, PartDocker, PartCompose)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := dockercli.RemoveProject(ctx, name); err != nil {
			t.Errorf("itest: cleanup %s: %v", name, err)
		}
	})
}

// ContainerState is what `docker inspect` says of one container of a compose project: read
// independently of `compose ps`, whose JSON shape the agent itself has to parse.
type ContainerState struct {
	ID      string
	Name    string // without the leading "/"
	Service string // com.docker.compose.service
	Image   string // the reference the container was created from
	State   string // created|running|restarting|exited|…
	Health  string // starting|healthy|unhealthy, "" without a healthcheck
	// StartedAt is when the engine last started the container (RFC 3339, as docker prints it):
	// the same ID and StartedAt mean nothing restarted or recreated it.
	StartedAt string
	ExitCode  int
	Env       []string // the container's environment, KEY=VALUE (secrets included: never log it)
	// HealthLog holds the exit codes of the latest healthchecks, oldest first.
	HealthLog []int
}

// String leaves Env out (it holds the secrets handed to the app), so a failing test can print
// containers with %v or %+v.
func (c ContainerState) String() string {
	id := c.ID
	if len(id) > 12 {
		id = id[:12]
	}
	return fmt.Sprintf("{%s %s service=%s image=%s state=%s health=%q started=%s exit=%d env=<%d vars, not shown>}",
		id, c.Name, c.Service, c.Image, c.State, c.Health, c.StartedAt, c.ExitCode, len(c.Env))
}

// Containers returns every container (running or not) of project, sorted by name.
func Containers(t testing.TB, project string) []ContainerState {
	t.Helper()
	ids := strings.Fields(docker(t, "", "ps", "-aq", "--filter", "label="+dockercli.ProjectLabel+"="+project))
	if len(ids) == 0 {
		return nil
	}
	var raw []struct {
		ID     string
		Name   string
		Config struct {
			Image  string
			Env    []string
			Labels map[string]string
		}
		State struct {
			Status    string
			ExitCode  int
			StartedAt string
			Health    *struct {
				Status string
				Log    []struct{ ExitCode int }
			}
		}
	}
	if err := json.Unmarshal([]byte(docker(t, "", append([]string{"inspect"}, ids...)...)), &raw); err != nil {
		t.Fatalf("itest: docker inspect: %v", err)
	}
	out := make([]ContainerState, 0, len(raw))
	for _, r := range raw {
		c := ContainerState{
			ID:        r.ID,
			StartedAt: r.State.StartedAt,
			Name:      strings.TrimPrefix(r.Name, "/"),
			Service:   r.Config.Labels["com.docker.compose.service"],
			Image:     r.Config.Image,
			State:     r.State.Status,
			ExitCode:  r.State.ExitCode,
			Env:       r.Config.Env,
		}
		if h := r.State.Health; h != nil {
			c.Health = h.Status
			for _, l := range h.Log {
				c.HealthLog = append(c.HealthLog, l.ExitCode)
			}
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// AppGet returns the body of GET path on the test app inside container (`docker exec <c> /app
// -get <path>`): the app's own view, e.g. /env?name=X for the value compose handed it. An error
// when the app answers anything but 200.
func AppGet(t testing.TB, container, path string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runDocker(ctx, "", nil, "exec", container, "/app", "-get", path)
}

// AppService is one service of a compose file running the test app.
type AppService struct {
	Name  string
	Image string            // an Image.Ref
	Env   map[string]string // APP_HEALTHY, APP_READY_AFTER_MS, … and anything the test reads back at /env
	// EnvFile names a .env-style file for `env_file:` (the agent's rendered .env), "" for none.
	EnvFile string
	// StartPeriod is the healthcheck's start_period: failures inside it do not count, so a
	// service stays "starting" (rather than going unhealthy) while APP_READY_AFTER_MS runs.
	StartPeriod time.Duration
	// ImageHealthcheck leaves the healthcheck out of the compose file: the image's own
	// HEALTHCHECK judges the service.
	ImageHealthcheck bool
}

// AppCompose renders a compose file for the test app: every service with the healthcheck
// `/app -check` every second (3 retries) unless ImageHealthcheck, `restart: "no"`, and its
// environment. Values are written as JSON strings with `$` doubled, which compose reads back
// byte for byte.
func AppCompose(services ...AppService) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for _, s := range services {
		q := func(v string) string { j, _ := json.Marshal(v); return string(j) }
		fmt.Fprintf(&b, "  %s:\n    image: %s\n    restart: \"no\"\n", s.Name, q(s.Image))
		if s.EnvFile != "" {
			fmt.Fprintf(&b, "    env_file: [%s]\n", q(s.EnvFile))
		}
		if len(s.Env) > 0 {
			b.WriteString("    environment:\n")
			keys := make([]string, 0, len(s.Env))
			for k := range s.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				// `$$` is compose's escape for a literal `$`: without it `${X}` in a value
				// would be interpolated from the shell of whoever runs compose.
				fmt.Fprintf(&b, "      %s: %s\n", q(k), q(strings.ReplaceAll(s.Env[k], "$", "$$")))
			}
		}
		if s.ImageHealthcheck {
			continue
		}
		b.WriteString("    healthcheck:\n      test: [\"CMD\", \"/app\", \"-check\"]\n      interval: 1s\n      timeout: 3s\n      retries: 3\n")
		if s.StartPeriod > 0 {
			fmt.Fprintf(&b, "      start_period: %dms\n", s.StartPeriod.Milliseconds())
		}
	}
	return b.String()
}
