// Package composetest is a simulated docker CLI for tests of the agent: a runner.Runner that
// understands exactly the docker and docker compose invocations the agent makes, keeps a model of
// the project's containers, records every call with its environment, and fails the test on any
// call it does not know. Failures (a pull the registry refuses, a service that never turns
// healthy, a container stopped by hand) are switched on per test.
//
// It stands in for the engine only in unit tests; the integration tests run the real one.
package composetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// Sim is the simulated docker CLI.
type Sim struct {
	t testing.TB

	mu         sync.Mutex
	calls      []runner.Cmd
	containers map[string]*container // by service
	volumes    map[string]bool
	nextID     int

	// Settings tests change before (or between) ticks.
	RootDir       string // DockerRootDir reported by `docker info`
	ServerVersion string
	PullFail      string            // non-empty: pull exits 1 with this on stderr
	UpFail        string            // non-empty: up exits 1 with this on stderr
	Health        map[string]string // service → health after up ("healthy" default where a healthcheck exists)
	// ImageHealth, image → health after up, wins over Health: one release's image never turns
	// healthy while another's, brought back, does.
	ImageHealth map[string]string
	// TurnsHealthyAfter makes a service report "starting" for that many ps calls after up.
	TurnsHealthyAfter map[string]int
	Logs              string // what `compose logs` prints
	// ConfigFail makes `compose config` exit 1 with this on stderr.
	ConfigFail string
	// ConfigRewrite, when set, changes what `compose config` prints: a compose binary that
	// reads the file otherwise than compose-go v2.9.1 does.
	ConfigRewrite func(map[string]any)
	// ExitAfterUp, service → true: its container exits right after every `up` (a crash loop
	// with `restart: "no"`).
	ExitAfterUp map[string]bool
	// NoLabels leaves Labels out of `ps` (compose before 2.21): no config hash can be read.
	NoLabels bool
	// DiesAfterFirstLook, service → true: after every `up` its container looks running (no
	// health known yet) to the first `ps`, then has exited: a process that dies at start.
	DiesAfterFirstLook map[string]bool
}

type container struct {
	service, name, state, health, image string
	startingLeft                        int
	healthcheck                         bool
	// hash is the config hash compose labels the container with: the service's definition's.
	hash string
	// id changes whenever up (re)creates the container, as a real container ID does.
	id int
	// dies: the next `ps` shows it running without health, and it has exited after that look.
	dies bool
}

// New returns a Sim whose unexpected calls fail t.
func New(t testing.TB) *Sim {
	return &Sim{
		t:                  t,
		containers:         map[string]*container{},
		volumes:            map[string]bool{},
		RootDir:            "/var/lib/docker",
		ServerVersion:      "29.0.1",
		Health:             map[string]string{},
		ImageHealth:        map[string]string{},
		TurnsHealthyAfter:  map[string]int{},
		Logs:               "api-1  | listening on :8080\n",
		ExitAfterUp:        map[string]bool{},
		DiesAfterFirstLook: map[string]bool{},
	}
}

// Remove deletes a service's container, as `docker rm -f` by hand would.
func (s *Sim) Remove(service string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.containers, service)
}

// HandEdit replaces a service's container with one of another definition (another image), as
// `docker compose up` of a hand-edited copy of the compose file does; an unknown service is added.
func (s *Sim) HandEdit(service, image string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	project := "monky-env-qa-02"
	for _, c := range s.containers {
		project = strings.TrimSuffix(c.name, "-"+c.service+"-1")
		break
	}
	s.nextID++
	s.containers[service] = &container{service: service, name: project + "-" + service + "-1", state: "running",
		image: image, hash: hashOf(map[string]any{"image": image, "by": "hand"}), id: s.nextID}
}

// IDs maps each service to an identity that changes whenever its container is (re)created.
func (s *Sim) IDs() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for svc, c := range s.containers {
		out[svc] = c.id
	}
	return out
}

// hashOf is the sim's config hash of a service definition (compose's is a SHA-256 as well).
func hashOf(def any) string {
	b, _ := json.Marshal(def)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Calls returns every call so far.
func (s *Sim) Calls() []runner.Cmd {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]runner.Cmd(nil), s.calls...)
}

// Subcommands returns each call's argv after the program name, joined by spaces, with the
// compose project/file flags left out: "info", "compose pull", "compose up -d --remove-orphans".
func (s *Sim) Subcommands() []string {
	var out []string
	for _, c := range s.Calls() {
		out = append(out, strings.Join(verb(c.Args), " "))
	}
	return out
}

// Count is how many calls had the given subcommand (as Subcommands prints it, prefix match).
func (s *Sim) Count(prefix string) int {
	n := 0
	for _, sc := range s.Subcommands() {
		if strings.HasPrefix(sc, prefix) {
			n++
		}
	}
	return n
}

// Stop marks a service's container exited, as `docker stop` by hand would.
func (s *Sim) Stop(service string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.containers[service]; ok {
		c.state = "exited"
		c.health = ""
	}
}

// Running lists the services with a running container.
func (s *Sim) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for svc, c := range s.containers {
		if c.state == "running" {
			out = append(out, svc)
		}
	}
	sort.Strings(out)
	return out
}

// Images maps each service with a container to the image it runs.
func (s *Sim) Images() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for svc, c := range s.containers {
		out[svc] = c.image
	}
	return out
}

// Volumes reports whether the project's volumes still exist.
func (s *Sim) Volumes() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.volumes) > 0
}

// verb strips `compose -p P --project-directory D -f F` down to `compose <verb> <flags>`.
func verb(args []string) []string {
	if len(args) == 0 || args[0] != "compose" {
		return args
	}
	out := []string{"compose"}
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "-p", "--project-directory", "-f":
			i++
		default:
			out = append(out, args[i:]...)
			return out
		}
	}
	return out
}

func flagValue(args []string, name string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == name {
			return args[i+1]
		}
	}
	return ""
}

func ok(stdout string) (runner.Result, error) { return runner.Result{Stdout: []byte(stdout)}, nil }

func fail(stderr string) (runner.Result, error) {
	return runner.Result{Stderr: []byte(stderr), ExitCode: 1}, nil
}

// Run implements runner.Runner.
func (s *Sim) Run(_ context.Context, c runner.Cmd) (runner.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	if !hasEnv(c.Env, "DOCKER_CONFIG") {
		s.t.Errorf("composetest: %s ran without DOCKER_CONFIG", c)
	}
	v := verb(c.Args)
	switch strings.Join(v, " ") {
	case "info --format {{json .}}":
		b, _ := json.Marshal(map[string]any{"DockerRootDir": s.RootDir, "ServerVersion": s.ServerVersion})
		return ok(string(b))
	case "compose version --short":
		return ok("2.40.3\n")
	case "image prune -f":
		return ok("Total reclaimed space: 0B\n")
	case "compose pull", "compose pull --policy missing":
		if s.PullFail != "" {
			return fail(s.PullFail)
		}
		return ok("")
	case "compose up -d --remove-orphans":
		if s.UpFail != "" {
			return fail(s.UpFail)
		}
		return s.up(c.Args)
	case "compose --profile * config --format json":
		if s.ConfigFail != "" {
			return fail(s.ConfigFail)
		}
		return s.config(c)
	case "compose ps -a --format json":
		return ok(s.ps(flagValue(c.Args, "-p")))
	case "compose logs --no-color --tail 50":
		return ok(s.Logs)
	case "compose down --remove-orphans", "compose down --remove-orphans -v":
		s.containers = map[string]*container{}
		if strings.HasSuffix(strings.Join(v, " "), "-v") {
			s.volumes = map[string]bool{}
		}
		return ok("")
	}
	s.t.Errorf("composetest: unexpected call: %s", c)
	return runner.Result{}, fmt.Errorf("composetest: unexpected call %q", c.String())
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") && len(kv) > len(key)+1 {
			return true
		}
	}
	return false
}

// up reads the compose file the agent named and starts one container per service.
func (s *Sim) up(args []string) (runner.Result, error) {
	file := flagValue(args, "-f")
	project := flagValue(args, "-p")
	raw, err := os.ReadFile(file)
	if err != nil {
		return fail(fmt.Sprintf("open %s: no such file or directory", file))
	}
	var doc struct {
		Services map[string]map[string]any `yaml:"services"`
		Volumes  map[string]any            `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return fail(fmt.Sprintf("yaml: %v", err))
	}
	envText, err := os.ReadFile(filepath.Join(filepath.Dir(file), ".env"))
	if err != nil {
		return fail(".env missing in the project directory")
	}
	next := map[string]*container{}
	for svc, def := range doc.Services {
		image, _ := def["image"].(string)
		// Compose hashes the service as interpolated from .env (and env_file merged in): a
		// release that changes .env alone recreates the containers, as a real one would.
		hash := hashOf(map[string]any{"service": def, "env": string(envText)})
		if old := s.containers[svc]; old != nil && old.hash == hash {
			// Compose keeps a container of the same definition, and starts it if it stopped.
			if old.state != "running" {
				old.state, old.health = "running", ""
				if old.healthcheck {
					old.health = s.healthAfterUp(svc, image)
				}
			}
			if s.ExitAfterUp[svc] {
				old.state, old.health = "exited", ""
			}
			old.dies = s.DiesAfterFirstLook[svc]
			next[svc] = old
			continue
		}
		s.nextID++
		c := &container{service: svc, name: project + "-" + svc + "-1", state: "running", image: image,
			healthcheck: def["healthcheck"] != nil, hash: hash, id: s.nextID}
		if c.healthcheck {
			c.health = s.healthAfterUp(svc, image)
			c.startingLeft = s.TurnsHealthyAfter[svc]
		}
		if s.ExitAfterUp[svc] {
			c.state, c.health = "exited", ""
		}
		c.dies = s.DiesAfterFirstLook[svc]
		next[svc] = c
	}
	s.containers = next // --remove-orphans
	for v := range doc.Volumes {
		s.volumes[v] = true
	}
	return ok("")
}

func (s *Sim) healthAfterUp(svc, image string) string {
	health := "healthy"
	if h, ok := s.Health[svc]; ok {
		health = h
	}
	if h, ok := s.ImageHealth[image]; ok {
		health = h
	}
	return health
}

// config renders the project as `docker compose config --format json` does: compose-go loads
// the file with the release's .env under the command's environment, every profile enabled, and
// prints the model as JSON with every `$` escaped back to `$$`.
func (s *Sim) config(c runner.Cmd) (runner.Result, error) {
	file, dir, project := flagValue(c.Args, "-f"), flagValue(c.Args, "--project-directory"), flagValue(c.Args, "-p")
	raw, err := os.ReadFile(file)
	if err != nil {
		return fail(fmt.Sprintf("open %s: no such file or directory", file))
	}
	envText, err := os.ReadFile(filepath.Join(dir, ".env"))
	if err != nil {
		return fail(".env missing in the project directory")
	}
	env, err := dotenv.ParseWithLookup(bytes.NewReader(envText), nil)
	if err != nil {
		return fail("failed to read " + filepath.Join(dir, ".env") + ": " + err.Error())
	}
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir: dir, Environment: env,
		ConfigFiles: []types.ConfigFile{{Filename: file, Content: raw}},
	}, func(o *loader.Options) { o.SetProjectName(project, true); o.Profiles = []string{"*"} })
	if err != nil {
		return fail(err.Error())
	}
	out, err := p.MarshalJSON()
	if err != nil {
		return fail(err.Error())
	}
	if s.ConfigRewrite != nil {
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			return fail(err.Error())
		}
		s.ConfigRewrite(m)
		if out, err = json.Marshal(m); err != nil {
			return fail(err.Error())
		}
	}
	return ok(strings.ReplaceAll(string(out), "$", "$$"))
}

func (s *Sim) ps(project string) string {
	var names []string
	for svc := range s.containers {
		names = append(names, svc)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, svc := range names {
		c := s.containers[svc]
		health := c.health
		if c.healthcheck && c.state == "running" && c.startingLeft > 0 {
			c.startingLeft--
			health = "starting"
		}
		state := c.state
		if c.dies {
			state, health = "running", ""
			c.state, c.health, c.dies = "exited", "", false
		}
		entry := map[string]string{"Service": svc, "Name": c.name, "State": state, "Health": health, "Project": project}
		if !s.NoLabels {
			// docker's formatter joins labels with commas, in no particular order.
			entry["Labels"] = "com.docker.compose.project=" + project + ",x=a,b=c,com.docker.compose.config-hash=" + c.hash + ",com.docker.compose.service=" + svc
		}
		line, _ := json.Marshal(entry)
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}
