package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner/runnertest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const (
	bin     = "/usr/bin/docker"
	cfgDir  = "/var/lib/monky-deployd/docker"
	project = "monky-env-qa-02"
)

func newDocker(t *testing.T) (*Docker, *runnertest.Fake) {
	fake := runnertest.New(t)
	return &Docker{Bin: bin, ConfigDir: cfgDir, Project: project, Runner: fake, Redact: &secret.Redactor{},
		Environ: []string{"PATH=/usr/bin:/bin", "HOME=/var/lib/monky-deployd", "LANG=C.UTF-8"}}, fake
}

// checkEnv asserts the environment every docker call must carry (seed 0.1.7).
func checkEnv(t *testing.T, calls []runnertest.Call) {
	t.Helper()
	if len(calls) == 0 {
		t.Fatal("no docker call was made")
	}
	for _, c := range calls {
		if v, ok := c.Getenv("DOCKER_CONFIG"); !ok || v != cfgDir {
			t.Errorf("%s: DOCKER_CONFIG = %q (set %v), want %q", c.Cmd, v, ok, cfgDir)
		}
		if v, _ := c.Getenv("COMPOSE_INTERACTIVE_NO_CLI"); v != "1" {
			t.Errorf("%s: COMPOSE_INTERACTIVE_NO_CLI = %q, want 1", c.Cmd, v)
		}
		if c.Name != bin {
			t.Errorf("%s: ran %q, want docker_bin %q", c.Cmd, c.Name, bin)
		}
		if !c.OnlyEnv {
			t.Errorf("%s: inherits the agent's environment; docker gets an explicit one", c.Cmd)
		}
	}
}

func TestCommandLines(t *testing.T) {
	rel := t.TempDir()
	if err := os.WriteFile(filepath.Join(rel, "docker-compose.yml"), []byte("services: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(t.TempDir(), "pruned")
	file := func(sub ...string) []string {
		return append([]string{"compose", "-p", project, "--project-directory", rel, "-f", filepath.Join(rel, "docker-compose.yml")}, sub...)
	}
	byName := func(sub ...string) []string { return append([]string{"compose", "-p", project}, sub...) }

	tests := []struct {
		name    string
		call    func(context.Context, *Docker) error
		args    []string
		stdout  string
		wantDir string
	}{
		{"info", func(ctx context.Context, d *Docker) error { _, err := d.Info(ctx); return err },
			[]string{"info", "--format", "{{json .}}"}, `{"ServerVersion":"29.0.1"}`, ""},
		{"compose version", func(ctx context.Context, d *Docker) error { _, err := d.ComposeVersion(ctx); return err },
			[]string{"compose", "version", "--short"}, "2.40.3\n", ""},
		{"pull always sends no policy", func(ctx context.Context, d *Docker) error { return d.Pull(ctx, rel, "docker-compose.yml", "always") },
			file("pull"), "", ""},
		{"pull default is always", func(ctx context.Context, d *Docker) error { return d.Pull(ctx, rel, "docker-compose.yml", "") },
			file("pull"), "", ""},
		{"pull missing", func(ctx context.Context, d *Docker) error { return d.Pull(ctx, rel, "docker-compose.yml", "missing") },
			file("pull", "--policy", "missing"), "", ""},
		{"config renders every profile as JSON", func(ctx context.Context, d *Docker) error {
			out, err := d.Config(ctx, rel, "docker-compose.yml")
			if err == nil && string(out) != `{"name":"p"}` {
				return fmt.Errorf("output %q", out)
			}
			return err
		},
			file("--profile", "*", "config", "--format", "json"), `{"name":"p"}`, ""},
		{"up", func(ctx context.Context, d *Docker) error { return d.Up(ctx, rel, "docker-compose.yml") },
			file("up", "-d", "--remove-orphans"), "", ""},
		{"ps", func(ctx context.Context, d *Docker) error { _, err := d.Ps(ctx, rel, "docker-compose.yml"); return err },
			file("ps", "-a", "--format", "json"), "", ""},
		{"ps by project name runs from /", func(ctx context.Context, d *Docker) error { _, err := d.Ps(ctx, "", ""); return err },
			byName("ps", "-a", "--format", "json"), "", "/"},
		{"logs", func(ctx context.Context, d *Docker) error {
			_, err := d.Logs(ctx, rel, "docker-compose.yml", 200)
			return err
		},
			file("logs", "--no-color", "--tail", "200"), "", ""},
		{"logs without a bound", func(ctx context.Context, d *Docker) error { _, err := d.Logs(ctx, "", "", 0); return err },
			byName("logs", "--no-color", "--tail", "all"), "", "/"},
		{"down keeps volumes", func(ctx context.Context, d *Docker) error { return d.Down(ctx, rel, "docker-compose.yml", false) },
			file("down", "--remove-orphans"), "", ""},
		{"down purges volumes", func(ctx context.Context, d *Docker) error { return d.Down(ctx, rel, "docker-compose.yml", true) },
			file("down", "--remove-orphans", "-v"), "", ""},
		{"down after the release is gone works by project name", func(ctx context.Context, d *Docker) error { return d.Down(ctx, gone, "docker-compose.yml", true) },
			byName("down", "--remove-orphans", "-v"), "", "/"},
		{"down with no release at all", func(ctx context.Context, d *Docker) error { return d.Down(ctx, "", "", false) },
			byName("down", "--remove-orphans"), "", "/"},
		{"image prune", func(ctx context.Context, d *Docker) error { return d.ImagePrune(ctx) },
			[]string{"image", "prune", "-f"}, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, fake := newDocker(t)
			fake.Expect(bin, tt.args).Returns(tt.stdout, "", 0)
			if err := tt.call(context.Background(), d); err != nil {
				t.Fatalf("call: %v", err)
			}
			calls := fake.Calls()
			checkEnv(t, calls)
			if calls[0].Dir != tt.wantDir {
				t.Errorf("working dir = %q, want %q", calls[0].Dir, tt.wantDir)
			}
		})
	}
}

func TestRefusedBeforeRunning(t *testing.T) {
	rel := t.TempDir()
	tests := []struct {
		name string
		d    func(*Docker)
		call func(context.Context, *Docker) error
		want string
	}{
		{"no DOCKER_CONFIG", func(d *Docker) { d.ConfigDir = "" },
			func(ctx context.Context, d *Docker) error { _, err := d.Info(ctx); return err }, "DOCKER_CONFIG"},
		{"no redactor", func(d *Docker) { d.Redact = nil },
			func(ctx context.Context, d *Docker) error { return d.Pull(ctx, rel, "docker-compose.yml", "") }, "no redactor"},
		{"no project", func(d *Docker) { d.Project = "" },
			func(ctx context.Context, d *Docker) error { return d.Up(ctx, rel, "docker-compose.yml") }, "project"},
		{"unknown pull policy", func(*Docker) {},
			func(ctx context.Context, d *Docker) error { return d.Pull(ctx, rel, "docker-compose.yml", "sometimes") }, "policy"},
		{"compose file escapes the release", func(*Docker) {},
			func(ctx context.Context, d *Docker) error { return d.Up(ctx, rel, "../other/docker-compose.yml") }, "relative path"},
		{"absolute compose file", func(*Docker) {},
			func(ctx context.Context, d *Docker) error { return d.Pull(ctx, rel, "/etc/compose.yml", "") }, "relative path"},
		{"up needs a release directory", func(*Docker) {},
			func(ctx context.Context, d *Docker) error { return d.Up(ctx, "", "docker-compose.yml") }, "release directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newDocker(t) // no expectations: any call fails the test
			tt.d(d)
			err := tt.call(context.Background(), d)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestPullFailureCarriesTheRegistryText(t *testing.T) {
	refused, err := os.ReadFile("testdata/pull-refused-compose-2.40.stderr")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		stdout string
		stderr string
		code   int
		want   []string
	}{
		{"no credential", "", " api Pulling\n api Error no basic auth credentials\nError response from daemon: no basic auth credentials\n", 1,
			[]string{"docker compose pull failed (rc=1): ", "no basic auth credentials"}},
		{"unknown tag", "", "Error response from daemon: manifest for harbor.tikali.net/monky/api:v9 not found: manifest unknown: manifest unknown\n", 18,
			[]string{"(rc=18)", "manifest unknown"}},
		{"DNS", "", "Error response from daemon: Get \"https://harbor.tikali.net/v2/\": dial tcp: lookup harbor.tikali.net on 127.0.0.53:53: no such host\n", 1,
			[]string{"no such host", "harbor.tikali.net"}},
		{"captured from compose 2.40", "", string(refused), 1,
			[]string{"db Skipped - Image is already present locally | api Pulling | api Error Get", "connect: connection refused"}},
		{"ANSI colour is stripped", "", "\x1b[31mError\x1b[0m response from daemon: denied\n", 1,
			[]string{"Error response from daemon: denied"}},
		{"no output at all", "", "", 1, []string{"(rc=1): (no output)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, fake := newDocker(t)
			fake.ExpectPrefix(bin, []string{"compose"}).Returns(tt.stdout, tt.stderr, tt.code)
			err := d.Pull(context.Background(), t.TempDir(), "docker-compose.yml", "always")
			var ce *CmdError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want *CmdError", err, err)
			}
			if ce.Op != "docker compose pull" || ce.ExitCode != tt.code {
				t.Errorf("CmdError = {%q, %d}, want {docker compose pull, %d}", ce.Op, ce.ExitCode, tt.code)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Error() = %q, want it to contain %q", err.Error(), w)
				}
			}
			if strings.Contains(err.Error(), "\x1b") {
				t.Errorf("Error() keeps escape sequences: %q", err.Error())
			}
			checkEnv(t, fake.Calls())
		})
	}
}

// A failed `compose config` may have printed part of the rendered file (secrets) on standard
// output: its error carries standard error alone.
func TestConfigFailureCarriesStandardErrorOnly(t *testing.T) {
	d, fake := newDocker(t)
	fake.ExpectPrefix(bin, []string{"compose"}).Returns(`{"services":{"api":{"environment":{"DB":"s3cr3t"}}}}`, "validating docker-compose.yml: services.api.privileged must be a boolean\n", 15)
	out, err := d.Config(context.Background(), t.TempDir(), "docker-compose.yml")
	var ce *CmdError
	if out != nil || !errors.As(err, &ce) || ce.ExitCode != 15 {
		t.Fatalf("Config = %q, %v", out, err)
	}
	if strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "services.api.privileged must be a boolean") {
		t.Errorf("Error() = %q", err.Error())
	}
}

// A failed command's output is redacted before Error() cuts it: a secret on one long line, at
// every offset around the cut, leaves no part of itself (the cut once left 10 of 14 bytes).
func TestCmdErrorRedactsBeforeItCuts(t *testing.T) {
	const pw = "Q7ZK9W4PV2MJ8H" // no byte of it in the filler or the fixed text
	for off := -2; off <= len(pw)+2; off++ {
		d, fake := newDocker(t)
		d.Redact.Add(pw)
		// The secret ends off bytes after the cut that keeps the end of the line.
		tail := MaxErrorTail - len("…")
		line := strings.Repeat("a", 40) + pw + strings.Repeat("b", tail-off)
		fake.ExpectPrefix(bin, []string{"compose"}).Returns("", "error pulling: "+line+"\n", 1)
		err := d.Pull(context.Background(), t.TempDir(), "docker-compose.yml", "")
		var ce *CmdError
		if !errors.As(err, &ce) {
			t.Fatalf("offset %d: err = %v", off, err)
		}
		for _, text := range []string{err.Error(), ce.Output} {
			if frag := leakedPart(text, pw, 2); frag != "" {
				t.Errorf("offset %d: %q of the secret survives in %q", off, frag, text)
			}
		}
	}
}

// leakedPart is the longest part of secret (at least n bytes) that text holds, "" when none.
func leakedPart(text, secret string, n int) string {
	for k := len(secret); k >= n; k-- {
		for i := 0; i+k <= len(secret); i++ {
			if strings.Contains(text, secret[i:i+k]) {
				return secret[i : i+k]
			}
		}
	}
	return ""
}

// Docker gets an explicit environment: the agent's path, home and locale, its DOCKER_CONFIG, and
// nothing an operator's shell exported for another compose project or engine.
func TestDockerEnvironmentIsExplicit(t *testing.T) {
	d, fake := newDocker(t)
	d.Environ = []string{
		"PATH=/usr/local/bin:/usr/bin", "HOME=/var/lib/monky-deployd", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TZ=UTC",
		"COMPOSE_FILE=/tmp/evil.yml", "COMPOSE_PROFILES=debug", "COMPOSE_ENV_FILES=/root/.env", "COMPOSE_PROJECT_NAME=other",
		"DOCKER_HOST=tcp://10.0.0.9:2375", "DOCKER_CONTEXT=prod", "DOCKER_CONFIG=/root/.docker", "DOCKER_TLS_VERIFY=1",
		"BAO_TOKEN=s.root", "HTTPS_PROXY=http://proxy:3128", "LD_PRELOAD=/tmp/x.so", "MONKY_DEPLOYD_CONFIG=/etc/x.yaml",
	}
	fake.ExpectPrefix(bin, []string{"compose"}).Returns("", "", 0)
	if err := d.Up(context.Background(), t.TempDir(), "docker-compose.yml"); err != nil {
		t.Fatal(err)
	}
	c := fake.Calls()[0]
	want := []string{"PATH=/usr/local/bin:/usr/bin", "HOME=/var/lib/monky-deployd", "LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TZ=UTC",
		"DOCKER_CONFIG=" + cfgDir, "COMPOSE_INTERACTIVE_NO_CLI=1"}
	if !c.OnlyEnv || !slices.Equal(c.Env, want) {
		t.Errorf("docker's environment (only %v) = %q\nwant only %q", c.OnlyEnv, c.Env, want)
	}
	d.Environ = []string{"COMPOSE_FILE=/tmp/evil.yml"}
	if env := d.Env(); !slices.Equal(env, []string{"PATH=" + defaultPath, "DOCKER_CONFIG=" + cfgDir, "COMPOSE_INTERACTIVE_NO_CLI=1"}) {
		t.Errorf("without the agent's PATH: %q, want docker's default search path", env)
	}
}

func TestMissingComposePluginIsExplained(t *testing.T) {
	d, fake := newDocker(t)
	fake.Expect(bin, []string{"compose", "version", "--short"}).Returns("", "docker: 'compose' is not a docker command.\nSee 'docker --help'\n", 1)
	_, err := d.ComposeVersion(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cli-plugins") {
		t.Errorf("err = %v, want a hint about the system-wide plugin directory", err)
	}
}

func TestStartFailureIsNotACmdError(t *testing.T) {
	d, fake := newDocker(t)
	fake.ExpectPrefix(bin, nil).Fails(fmt.Errorf("start %s: %w", bin, runner.ErrNotFound))
	_, err := d.Info(context.Background())
	var ce *CmdError
	if !errors.Is(err, runner.ErrNotFound) || errors.As(err, &ce) {
		t.Errorf("err = %v, want one matching runner.ErrNotFound and no *CmdError", err)
	}
}

func TestTail(t *testing.T) {
	long := strings.Repeat("x", 700)
	many := strings.Repeat("line of forty characters ..............\n", 40) + "the registry said no"
	tests := []struct {
		name  string
		out   string
		limit int
		want  func(string) bool
	}{
		{"joins the last lines", "a\n\nb\n c \n", 600, func(s string) bool { return s == "a | b | c" }},
		{"keeps the end within the limit", many, 600, func(s string) bool {
			return len(s) <= 600 && strings.HasSuffix(s, "the registry said no") && !strings.HasPrefix(s, " | ")
		}},
		{"a single long line keeps its end", long + "END", 600, func(s string) bool {
			return len(s) <= 600 && strings.HasPrefix(s, "…") && strings.HasSuffix(s, "END")
		}},
		{"carriage-return progress keeps the final state", "api 10%\rapi 50%\rapi done\n", 600, func(s string) bool { return s == "api done" }},
		{"cuts on a rune boundary", strings.Repeat("é", 400), 101, func(s string) bool { return strings.ToValidUTF8(s, "?") == s && len(s) <= 101 }},
		{"empty", "\n \n", 600, func(s string) bool { return s == "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Tail(tt.out, tt.limit); !tt.want(got) {
				t.Errorf("Tail = %q (len %d)", got, len(got))
			}
		})
	}
}

func TestInfo(t *testing.T) {
	tests := []struct {
		name    string
		stdout  string
		stderr  string
		code    int
		want    Info
		wantErr string
	}{
		{"full document", `{"ID":"x","DockerRootDir":"/home/docker-data","ServerVersion":"29.0.1","Driver":"overlay2","ClientInfo":{"Version":"29.0.1"}}`, "", 0,
			Info{DockerRootDir: "/home/docker-data", ServerVersion: "29.0.1"}, ""},
		{"fields missing are tolerated", `{"ID":"x"}`, "", 0, Info{}, ""},
		{"server errors in the document", `{"ServerErrors":["error during connect"]}`, "", 0, Info{}, "error during connect"},
		{"engine unreachable", `{"ServerVersion":"","Plugins":"` + strings.Repeat("x", 700) + `"}`, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n", 1,
			Info{}, "docker info failed (rc=1): Cannot connect to the Docker daemon"},
		{"not JSON", "Server Version: 29\n", "", 0, Info{}, "not a JSON object"},
		{"wrong type names the field", `{"DockerRootDir":7}`, "", 0, Info{}, "DockerRootDir"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, fake := newDocker(t)
			fake.Expect(bin, []string{"info", "--format", "{{json .}}"}).Returns(tt.stdout, tt.stderr, tt.code)
			got, err := d.Info(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Info: %v", err)
			}
			if got != tt.want {
				t.Errorf("Info = %+v, want %+v", got, tt.want)
			}
			checkEnv(t, fake.Calls())
		})
	}
}

func TestComposeVersion(t *testing.T) {
	tests := []struct {
		stdout, want string
		wantErr      bool
	}{
		{"2.40.3\n", "2.40.3", false},
		{"v2.20.2\n", "2.20.2", false},
		{"\n", "", true},
		{"Docker Compose version v2.40.3\n", "", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.stdout), func(t *testing.T) {
			d, fake := newDocker(t)
			fake.Expect(bin, []string{"compose", "version", "--short"}).Returns(tt.stdout, "", 0)
			got, err := d.ComposeVersion(context.Background())
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ComposeVersion = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestPsFormats(t *testing.T) {
	ndjson, err := os.ReadFile("testdata/ps-ndjson-compose-2.40.json")
	if err != nil {
		t.Fatal(err)
	}
	array, err := os.ReadFile("testdata/ps-array-compose-2.20.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		out  string
		want []protocol.Container
	}{
		{"NDJSON captured from compose 2.40", string(ndjson), []protocol.Container{
			{Service: "oneshot", Name: "monkyx-oneshot-1", State: "exited", ConfigHash: "cf7f305353f0710c3d8890c5c119f04139cc3b5ccf40ddd0bd02e67fbfa9efc5"},
			{Service: "plain", Name: "monkyx-plain-1", State: "running", ConfigHash: "9564b85cb66273dcf0428b200d1f91a5c53fef71887d8e227665c908fa3e9500"},
			{Service: "web", Name: "monkyx-web-1", State: "running", Health: "healthy", ConfigHash: "a4189f9ea6ae39e5fd5d47122dc527bb47637431704487d72feb9773eddd525d"},
		}},
		{"JSON array of compose before 2.21", string(array), []protocol.Container{
			{Service: "api", Name: "monky-env-qa-02-api-1", State: "running", Health: "healthy"},
			{Service: "db", Name: "monky-env-qa-02-db-1", State: "running"},
		}},
		{"no containers: no output", "", []protocol.Container{}},
		{"no containers: empty array", "[]\n", []protocol.Container{}},
		{"case and blanks are normalised", `{"Service":"api","Name":"x-api-1","State":"Running","Health":" Starting "}`,
			[]protocol.Container{{Service: "api", Name: "x-api-1", State: "running", Health: "starting"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, fake := newDocker(t)
			fake.ExpectPrefix(bin, []string{"compose"}).Returns(tt.out, "", 0)
			got, err := d.Ps(context.Background(), "", "")
			if err != nil {
				t.Fatalf("Ps: %v", err)
			}
			if got == nil || !slices.Equal(got, tt.want) {
				t.Errorf("Ps = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// The config hash comes from ps's Labels; one that cannot be told for sure is unknown, never guessed.
func TestParsePsConfigHash(t *testing.T) {
	const h = "626a9bcfe94badb776855e66c87f0daf3065d98ac87795582be6ce8127e77160"
	const other = "8acfeedca1cc7c45d53f4d57b0bbaca10bfc70c40c99841d10c05b4c9ea98a0f"
	for _, tc := range []struct{ name, labels, want string }{
		{"first", `"` + ConfigHashLabel + `=` + h + `,x=a"`, h},
		{"last", `"x=a,b=c,` + ConfigHashLabel + `=` + h + `"`, h},
		{"a user label value with commas", `"x=a,b=c,` + ConfigHashLabel + `=` + h + `,y=1,2"`, h},
		{"a label value naming the hash again", `"x=a,` + ConfigHashLabel + `=` + other + `,` + ConfigHashLabel + `=` + h + `"`, ""},
		{"a longer key", `"` + ConfigHashLabel + `-x=` + h + `"`, ""},
		{"not hex", `"` + ConfigHashLabel + `=` + strings.ToUpper(h) + `"`, ""},
		{"short", `"` + ConfigHashLabel + `=abc"`, ""},
		{"a map", `{"` + ConfigHashLabel + `": "` + h + `", "x": "y"}`, h},
		{"none", `""`, ""},
		{"null", `null`, ""},
		{"a number", `5`, ""},
	} {
		out := `{"Service":"api","Name":"p-api-1","State":"running","Labels":` + tc.labels + `}`
		cs, err := ParsePs([]byte(out))
		if err != nil || len(cs) != 1 || cs[0].ConfigHash != tc.want {
			t.Errorf("%s: %+v, %v; want hash %q", tc.name, cs, err, tc.want)
		}
	}
	cs, err := ParsePs([]byte(`{"Service":"api","Name":"p-api-1","State":"running"}`))
	if err != nil || cs[0].ConfigHash != "" {
		t.Errorf("no Labels (compose before 2.21): %+v, %v", cs, err)
	}
}

func TestParsePsRejects(t *testing.T) {
	tests := []struct {
		name, out, want string
	}{
		{"not JSON", "NAME   IMAGE\n", "entry 1"},
		{"array of strings", `["a"]`, "entry 1: not a JSON object"},
		{"NDJSON with a number", "{\"Service\":\"a\",\"Name\":\"n\",\"State\":\"running\"}\n7\n", "entry 2: not a JSON object"},
		{"missing Name", `{"Service":"a","State":"running"}`, "missing Name"},
		{"missing Service", `{"Name":"n","State":"running"}`, "missing Service"},
		{"missing State", `{"Service":"a","Name":"n"}`, "missing State"},
		{"wrong type names the field", `{"Service":"a","Name":"n","State":1}`, "State"},
		{"truncated array", `[{"Service":"a"`, "compose: ps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePs([]byte(tt.out))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParsePs error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestReadiness(t *testing.T) {
	run := func(svc, health string) protocol.Container {
		return protocol.Container{Service: svc, Name: "p-" + svc + "-1", State: "running", Health: health}
	}
	tests := []struct {
		name    string
		cs      []protocol.Container
		ready   bool
		unready []string
	}{
		{"running without healthcheck", []protocol.Container{run("api", "")}, true, nil},
		{"running and healthy", []protocol.Container{run("api", "healthy"), run("db", "")}, true, nil},
		{"starting", []protocol.Container{run("api", "starting"), run("db", "")}, false, []string{"api: running/starting"}},
		{"unhealthy", []protocol.Container{run("api", "unhealthy")}, false, []string{"api: running/unhealthy"}},
		{"exited, dead, restarting", []protocol.Container{
			{Service: "a", State: "exited"}, {Service: "b", State: "dead"}, {Service: "c", State: "restarting", Health: "unhealthy"},
		}, false, []string{"a: exited", "b: dead", "c: restarting/unhealthy"}},
		{"no containers", nil, false, []string{"no containers"}},
		{"no service name falls back to the container name", []protocol.Container{{Name: "stray", State: "created"}}, false, []string{"stray: created"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AllReady(tt.cs); got != tt.ready {
				t.Errorf("AllReady = %v, want %v", got, tt.ready)
			}
			if got := Unready(tt.cs); !slices.Equal(got, tt.unready) {
				t.Errorf("Unready = %q, want %q", got, tt.unready)
			}
		})
	}
}

// clock is a fake time source; its sleep advances it instead of waiting.
type clock struct {
	now    time.Time
	slept  []time.Duration
	failAt int // the sleep number (1-based) that reports a cancelled context; 0: never
}

func (c *clock) Now() time.Time { return c.now }
func (c *clock) sleep(_ context.Context, d time.Duration) error {
	c.slept = append(c.slept, d)
	if c.failAt == len(c.slept) {
		return context.Canceled
	}
	c.now = c.now.Add(d)
	return nil
}

func psLine(svc, state, health string) string {
	return fmt.Sprintf(`{"Service":%q,"Name":"monky-env-qa-02-%s-1","State":%q,"Health":%q}`+"\n", svc, svc, state, health)
}

func TestWaitHealthy(t *testing.T) {
	healthy := psLine("api", "running", "healthy") + psLine("db", "running", "")
	starting := psLine("api", "running", "starting") + psLine("db", "running", "")
	type answer struct {
		out  string
		code int
	}
	tests := []struct {
		name      string
		answers   []answer // one per ps call, in order; the last repeats
		timeout   time.Duration
		failSleep int
		wantOK    bool
		wantCalls int
		wantLast  string // service: state/health summary of the last containers seen
		wantErr   bool
	}{
		{"ready at once", []answer{{healthy, 0}}, 30 * time.Second, 0, true, 1, "", false},
		{"starting then healthy", []answer{{starting, 0}, {starting, 0}, {healthy, 0}}, 30 * time.Second, 0, true, 3, "", false},
		{"never healthy times out", []answer{{starting, 0}}, 10 * time.Second, 0, false, 6, "api: running/starting", false},
		{"exited is not ready", []answer{{psLine("api", "exited", ""), 0}}, 4 * time.Second, 0, false, 3, "api: exited", false},
		{"no containers is not ready", []answer{{"", 0}}, 4 * time.Second, 0, false, 3, "no containers", false},
		{"a failed ps is retried", []answer{{"", 1}, {healthy, 0}}, 30 * time.Second, 0, true, 2, "", false},
		{"a ps still failing at the deadline is the error", []answer{{starting, 0}, {"", 1}}, 4 * time.Second, 0, false, 3, "api: running/starting", true},
		{"cancelled while waiting", []answer{{starting, 0}}, 30 * time.Second, 2, false, 2, "api: running/starting", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, fake := newDocker(t)
			clk := &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), failAt: tt.failSleep}
			d.Now = clk.Now
			calls := 0
			fake.ExpectPrefix(bin, []string{"compose"}).Times(tt.wantCalls).Do(func(context.Context, runner.Cmd) (runner.Result, error) {
				a := tt.answers[min(calls, len(tt.answers)-1)]
				calls++
				stderr := ""
				if a.code != 0 {
					stderr = "Cannot connect to the Docker daemon"
				}
				return runner.Result{Stdout: []byte(a.out), Stderr: []byte(stderr), ExitCode: a.code}, nil
			})
			ok, cs, err := d.WaitHealthy(context.Background(), t.TempDir(), "docker-compose.yml", tt.timeout, clk.sleep)
			if ok != tt.wantOK {
				t.Errorf("ok = %v, want %v", ok, tt.wantOK)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !ok {
				if got := strings.Join(Unready(cs), ", "); got != tt.wantLast {
					t.Errorf("last seen = %q, want %q", got, tt.wantLast)
				}
			}
			for _, s := range clk.slept {
				if s > DefaultPollInterval || s <= 0 {
					t.Errorf("slept %v, want (0, %v]", s, DefaultPollInterval)
				}
			}
			if !ok && !tt.wantErr && clk.now.Before(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC).Add(tt.timeout)) {
				t.Errorf("gave up at %v, before the timeout of %v", clk.now, tt.timeout)
			}
			checkEnv(t, fake.Calls())
		})
	}
}

// hangs answers a docker call as an engine that hangs does: not at all, until the call's
// context ends (runner.Exec then kills the CLI and returns the context's error).
func hangs(ctx context.Context, c runner.Cmd) (runner.Result, error) {
	<-ctx.Done()
	return runner.Result{}, fmt.Errorf("runner: %s: %w", c.Name, ctx.Err())
}

// A `compose ps` the engine never answers is stopped after PsTimeout with ErrNoAnswer, which
// says so: unbounded, it held a converged tick for systemd's hour with nothing reported.
func TestPsStopsWhenTheEngineDoesNotAnswer(t *testing.T) {
	d, fake := newDocker(t)
	d.PsTimeout = 50 * time.Millisecond
	fake.ExpectPrefix(bin, []string{"compose"}).Do(hangs)
	done := make(chan error, 1)
	go func() {
		_, err := d.Ps(context.Background(), t.TempDir(), "docker-compose.yml")
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNoAnswer) || !strings.Contains(err.Error(), "docker engine does not answer") || !strings.Contains(err.Error(), "50ms") {
			t.Errorf("err = %v, want ErrNoAnswer naming the bound and the engine", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Ps still waits on an engine that does not answer after 10 s")
	}
	if d.PsTimeout = 0; DefaultPsTimeout != time.Minute {
		t.Errorf("DefaultPsTimeout = %v, want a minute", DefaultPsTimeout)
	}

	// The tick's own context ending is that, not the engine's silence.
	d2, fake2 := newDocker(t)
	fake2.ExpectPrefix(bin, []string{"compose"}).Do(hangs)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := d2.Ps(ctx, t.TempDir(), "docker-compose.yml"); err == nil || errors.Is(err, ErrNoAnswer) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the caller's deadline, not ErrNoAnswer", err)
	}
}

// While waiting for health, a `ps` the engine did not answer is "not ready yet", as a failed one
// is: the next look may find the project healthy. (A look may take what is left of the wait, so
// on a real clock none is left after one that did not answer; d.Now's clock here does not move
// while the look hangs.)
func TestWaitHealthyRetriesAPsThatDidNotAnswer(t *testing.T) {
	d, fake := newDocker(t)
	d.PsTimeout = 20 * time.Millisecond
	clk := &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	d.Now = clk.Now
	calls := 0
	fake.ExpectPrefix(bin, []string{"compose"}).Times(2).Do(func(ctx context.Context, c runner.Cmd) (runner.Result, error) {
		calls++
		if calls == 1 {
			return hangs(ctx, c)
		}
		return runner.Result{Stdout: []byte(psLine("api", "running", "healthy"))}, nil
	})
	ok, cs, err := d.WaitHealthy(context.Background(), t.TempDir(), "docker-compose.yml", 10*time.Millisecond, clk.sleep)
	if !ok || err != nil || len(cs) != 1 {
		t.Errorf("ok=%v cs=%v err=%v; want healthy on the second look", ok, cs, err)
	}
}

// A slow engine's answer that comes within the health wait counts: the wait has its own bound,
// and PsTimeout is only the least a look gets. With every look killed after PsTimeout, a release
// that was healthy all along failed (counted toward the backoff) and was reverted whenever the
// engine took more than a minute to answer.
func TestWaitHealthyWaitsForASlowEngine(t *testing.T) {
	d, fake := newDocker(t)
	d.PsTimeout = 20 * time.Millisecond
	clk := &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	d.Now = clk.Now
	calls := 0
	fake.ExpectPrefix(bin, []string{"compose"}).AnyTimes().Do(func(ctx context.Context, c runner.Cmd) (runner.Result, error) {
		calls++
		select {
		case <-time.After(200 * time.Millisecond): // ten times PsTimeout
			return runner.Result{Stdout: []byte(psLine("api", "running", "healthy"))}, nil
		case <-ctx.Done():
			return runner.Result{}, fmt.Errorf("runner: %s: %w", c.Name, ctx.Err())
		}
	})
	ok, cs, err := d.WaitHealthy(context.Background(), t.TempDir(), "docker-compose.yml", time.Minute, clk.sleep)
	if !ok || err != nil || len(cs) != 1 || calls != 1 {
		t.Errorf("ok=%v cs=%v err=%v after %d looks; want healthy at the first look", ok, cs, err, calls)
	}
}

// A look that has not answered when the wait is over ends it with ErrNoAnswer and the
// containers the last answer showed, on the real clock.
func TestWaitHealthyEndsWithTheLookThatDidNotAnswer(t *testing.T) {
	d, fake := newDocker(t)
	d.PsTimeout = 20 * time.Millisecond
	d.PollInterval = 10 * time.Millisecond
	calls := 0
	fake.ExpectPrefix(bin, []string{"compose"}).AnyTimes().Do(func(ctx context.Context, c runner.Cmd) (runner.Result, error) {
		calls++
		if calls == 1 {
			return runner.Result{Stdout: []byte(psLine("api", "running", "starting"))}, nil
		}
		return hangs(ctx, c)
	})
	start := time.Now()
	ok, cs, err := d.WaitHealthy(context.Background(), t.TempDir(), "docker-compose.yml", 500*time.Millisecond, nil)
	if ok || !errors.Is(err, ErrNoAnswer) || len(cs) != 1 || cs[0].Health != "starting" {
		t.Errorf("ok=%v cs=%v err=%v; want not healthy, ErrNoAnswer and the first look's containers", ok, cs, err)
	}
	if took := time.Since(start); took < 500*time.Millisecond || calls != 2 {
		t.Errorf("ended after %v and %d looks; want the second look to run to the wait's end", took, calls)
	}
}

func TestWaitHealthyStopsWhenDockerCannotStart(t *testing.T) {
	d, fake := newDocker(t)
	clk := &clock{now: time.Unix(0, 0)}
	d.Now = clk.Now
	fake.ExpectPrefix(bin, []string{"compose"}).Fails(fmt.Errorf("start: %w", runner.ErrNotFound))
	ok, _, err := d.WaitHealthy(context.Background(), t.TempDir(), "docker-compose.yml", time.Minute, clk.sleep)
	if ok || !errors.Is(err, runner.ErrNotFound) || len(clk.slept) != 0 {
		t.Errorf("ok=%v err=%v slept=%v; want an immediate ErrNotFound", ok, err, clk.slept)
	}
}

func FuzzParsePs(f *testing.F) {
	for _, p := range []string{"testdata/ps-ndjson-compose-2.40.json", "testdata/ps-array-compose-2.20.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "[]", "{}", `[{"Name":"a","Service":"b","State":"running"}]`, "{\"Name\":\"a\",\"Service\":\"b\",\"State\":\"x\"}\n{", "null", `[null]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := ParsePs(b)
		if err != nil {
			if cs != nil {
				t.Errorf("ParsePs returned containers with an error")
			}
			return
		}
		if cs == nil {
			t.Fatal("ParsePs returned nil without an error")
		}
		for _, c := range cs {
			if c.Name == "" || c.Service == "" || c.State == "" {
				t.Errorf("accepted an entry without Name/Service/State: %+v", c)
			}
			if c.State != strings.ToLower(c.State) || c.Health != strings.ToLower(c.Health) {
				t.Errorf("state/health not normalised: %+v", c)
			}
			if c.ConfigHash != "" && hexHash(c.ConfigHash) == "" {
				t.Errorf("a config hash that is no hex SHA-256: %+v", c)
			}
		}
		_ = Unready(cs)
	})
}

func FuzzParseInfo(f *testing.F) {
	for _, s := range []string{`{"DockerRootDir":"/var/lib/docker","ServerVersion":"29.0.1"}`, `{}`, `{"ServerErrors":["x"]}`, "", "[]", `{"DockerRootDir":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := ParseInfo(b)
		if err != nil && info != (Info{}) {
			t.Errorf("ParseInfo returned %+v with error %v", info, err)
		}
	})
}
