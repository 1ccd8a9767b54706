//go:build integration

package itest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
)

// The real `monky-deployd tick` binary against the in-process tenancy fake, a real OpenBao dev
// server configured as production is, a real registry with basic auth, the real engine and the
// compose v2 plugin.

// A value compose must hand the app byte-for-byte.
const trickySecret = `p4ss with spaces, "double" and 'single' quotes, $HOME ${X} and # hash`

var (
	agentBinOnce sync.Once
	agentBin     string
	agentBinErr  error
)

// TestMain removes the agent binary buildAgent made, once every test of the package is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if agentBin != "" {
		os.RemoveAll(filepath.Dir(agentBin))
	}
	os.Exit(code)
}

func buildAgent(t testing.TB) string {
	t.Helper()
	agentBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "monky-deployd-itest-")
		if err != nil {
			agentBinErr = err
			return
		}
		agentBin = filepath.Join(dir, "monky-deployd")
		cmd := exec.Command("go", "build", "-o", agentBin, "../../../cmd/deployd")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if agentBinErr != nil {
		t.Fatal(agentBinErr)
	}
	return agentBin
}

// world is what every scenario shares: registry, images, OpenBao, tenancy.
type world struct {
	reg    *Registry
	images map[string]*Image
	bao    *Bao
	signer *grant.Signer
	ten    *tenancytest.Server
}

func newWorld(t testing.TB) *world {
	t.Helper()
	Require(t, PartDocker, PartCompose, PartRegistry, PartBao, PartGo)
	w := &world{images: map[string]*Image{}}
	var err error
	w.signer, err = grant.NewSigner("monky-tenancy-itest")
	if err != nil {
		t.Fatal(err)
	}
	w.reg = StartRegistry(t)
	for _, im := range BuildImages(t, w.reg, "v1", "v2") {
		w.images[im.Tag] = im
		im.RemoveLocal(t) // the agent must pull, with its own credential
	}
	w.bao = StartBao(t, w.signer)
	w.ten = tenancytest.Start(tenancytest.Options{Verifier: w.bao, Signer: w.signer, BaoAddr: w.bao.Addr})
	t.Cleanup(w.ten.Close)
	return w
}

// box is one agent: its env, config, state dir and compose project.
type box struct {
	t       testing.TB
	w       *world
	env     string
	dir     string
	cfg     string
	project string
	home    string
	stderr  string // every tick's journal so far
	last    string // the latest tick's journal
}

func (w *world) newBox(t testing.TB, env string, extraConfig string) *box {
	t.Helper()
	b := &box{t: t, w: w, env: env, dir: t.TempDir(), project: "monky-" + env}
	CleanupProject(t, b.project)
	b.home = filepath.Join(b.dir, "home")
	os.MkdirAll(b.home, 0o700)
	w.ten.AddEnv(env)
	jwt := w.ten.RevealKit(env)
	if err := os.WriteFile(filepath.Join(b.dir, "bootstrap.jwt"), []byte(jwt), 0o600); err != nil {
		t.Fatal(err)
	}
	w.bao.Put(t, env, "app_secret", "value", trickySecret)
	w.bao.Put(t, env, "db_password", "value", "db-"+env+"-p4ss")
	cred, _ := json.Marshal(map[string]string{"registry": w.reg.Addr, "username": w.reg.User, "password": w.reg.Password.Reveal()})
	w.bao.Put(t, env, "registry", "value", string(cred))
	b.cfg = filepath.Join(b.dir, "config.yaml")
	cfg := fmt.Sprintf(`env_id: %s
site: qa
transport: system
tenancy:
  base_url: %s
bao:
  addr: %s
  ca_file: %s/none.pem
state_dir: %s/state
bootstrap_file: %s/bootstrap.jwt
compose_project: %s
registry_host: %s
healthy_timeout_s: 60
textfile_dir: %s/no-node-exporter
disk:
  headroom_bytes: 1048576
%s
`, env, w.ten.URL, w.bao.Addr, b.dir, b.dir, b.dir, b.project, w.reg.Addr, b.dir, extraConfig)
	if err := os.WriteFile(b.cfg, []byte(cfg), 0o640); err != nil {
		t.Fatal(err)
	}
	return b
}

// tick runs the real binary once and returns its exit code; stderr (the journal) is kept.
func (b *box) tick() int {
	b.t.Helper()
	// Built before the clock starts: the first build, on a loaded machine, once took the whole
	// four minutes, and the tick was never started.
	bin := buildAgent(b.t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--config", b.cfg, "tick")
	cmd.Env = append(os.Environ(), "HOME="+b.home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	err := cmd.Run()
	b.stderr += stderr.String()
	b.last = stderr.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	b.t.Fatalf("tick: %v; journal:\n%s", err, b.stderr)
	return -1
}

func (b *box) expect(code int) {
	b.t.Helper()
	if got := b.tick(); got != code {
		b.t.Fatalf("tick exit %d, want %d; journal:\n%s", got, code, b.stderr)
	}
}

func (b *box) report() protocol.Report {
	b.t.Helper()
	r, ok := b.w.ten.LastReport(b.env)
	if !ok {
		b.t.Fatal("no report")
	}
	return r
}

func (b *box) state() *state.State {
	b.t.Helper()
	st, err := state.Load(filepath.Join(b.dir, "state", "state.json"))
	if err != nil {
		b.t.Fatal(err)
	}
	return st
}

type bundleOpts struct {
	tag        string
	image      string // an image reference instead of w.images[tag]
	webHealthy bool
	registry   bool
	agent      map[string]any
	volume     bool
	pinVersion int
	// imageHealth leaves the healthcheck out of the compose file: the image's own HEALTHCHECK
	// (appimage.Dockerfile) is what makes the services healthy.
	imageHealth bool
	// logEnv is web's APP_LOG_ENV: the app prints that variable's value when it starts.
	logEnv      string
	extraEnvVar string
	pull        string
	// dataBind gives worker a writable bind of ./data, a directory of its release that holds
	// no staged file (allowed by the compose judgement).
	dataBind bool
	// crashIfData (with dataBind) makes worker exit 3 at start while ./data/crash exists: a
	// service that crash-loops once something outside its release changed.
	crashIfData bool
}

// bundle is a two-service app of the test image: web reads the rendered .env, worker gets one
// value through ${VAR} interpolation.
func (w *world) bundle(o bundleOpts) map[string]string {
	img := o.image
	if img == "" {
		img = w.images[o.tag].Ref
	}
	health := `
    healthcheck:
      test: ["CMD", "/app", "-check"]
      interval: 1s
      timeout: 2s
      retries: 3`
	if o.imageHealth {
		health = ""
	}
	webHealthy := "true"
	if !o.webHealthy {
		webHealthy = "false"
	}
	webEnv := fmt.Sprintf(`APP_HEALTHY: "%s"`, webHealthy)
	if o.logEnv != "" {
		webEnv += fmt.Sprintf(`
      APP_LOG_ENV: "%s"`, o.logEnv)
	}
	compose := fmt.Sprintf(`services:
  web:
    image: %s
    env_file: .env
    environment:
      %s%s
  worker:
    image: %s
    environment:
      DB_PASSWORD: ${DB_PASSWORD}%s
`, img, webEnv, health, img, health)
	if o.dataBind {
		compose = strings.Replace(compose, "  worker:\n", "  worker:\n    volumes: [\"./data:/data\"]\n", 1)
	}
	if o.crashIfData {
		compose = strings.Replace(compose, "      DB_PASSWORD: ${DB_PASSWORD}", "      DB_PASSWORD: ${DB_PASSWORD}\n      APP_EXIT_IF_FILE: /data/crash", 1)
	}
	if o.volume {
		compose = strings.Replace(compose, "  worker:\n", "  worker:\n    volumes: [\"data:/data\"]\n", 1) + "volumes:\n  data: {}\n"
	}
	entries := []map[string]any{
		{"var": "APP_SECRET", "path": "app_secret"},
		{"var": "DB_PASSWORD", "path": "db_password"},
	}
	if o.pinVersion > 0 {
		entries[0]["version"] = o.pinVersion
	}
	if o.registry {
		entries = append(entries, map[string]any{"path": "registry", "use": "registry-auth"})
	}
	manifest, _ := json.Marshal(map[string]any{"entries": entries})
	pull := o.pull
	if pull == "" {
		pull = "always"
	}
	meta := map[string]any{"compose_file": "docker-compose.yml", "pull": pull}
	if o.agent != nil {
		meta["agent"] = o.agent
	}
	metaJSON, _ := json.Marshal(meta)
	tmpl := "# every ${VAR} below comes from OpenBao\nAPP_SECRET=${APP_SECRET}\nDB_PASSWORD=${DB_PASSWORD}\n" + o.extraEnvVar
	return map[string]string{
		"bundle.json":        string(metaJSON),
		"docker-compose.yml": compose,
		".env.template":      tmpl,
		"manifest.json":      string(manifest),
	}
}

// registryRefusal reports whether detail carries the registry's own refusal: what docker says
// when it has no credential for the registry, or when the registry turns one down.
func registryRefusal(detail string) bool {
	d := strings.ToLower(detail)
	return strings.Contains(d, "no basic auth credentials") || strings.Contains(d, "unauthorized")
}

// checkRegistryCredential: the registry credential lives only in <state_dir>/docker/config.json
// (0600 in a 0700 dir, for the registry's address) — its user name, password and the base64
// auth string are in neither the release's .env, nor any container's environment, nor the
// journal, nor any report's detail or log tail.
func (b *box) checkRegistryCredential(t *testing.T) {
	t.Helper()
	reg := b.w.reg
	user, pw := reg.User, reg.Password.Reveal()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
	dir := filepath.Join(b.dir, "state", "docker")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("docker config dir %s: %v, %v; want a 0700 directory", dir, fi, err)
	}
	cfgPath := filepath.Join(dir, "config.json")
	if fi, err := os.Stat(cfgPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("docker config.json: %v, %v; want mode 0600", fi, err)
	}
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("docker config.json is not JSON: %v", err)
	}
	if len(cfg.Auths) != 1 || cfg.Auths[reg.Addr].Auth != auth {
		hosts := make([]string, 0, len(cfg.Auths))
		for h := range cfg.Auths {
			hosts = append(hosts, h)
		}
		t.Errorf("docker config.json holds auths for %v, want exactly %s with the registry's user:password", hosts, reg.Addr)
	}
	envFile, err := os.ReadFile(filepath.Join(b.dir, "state", b.env, "current", ".env"))
	if err != nil {
		t.Fatalf("the release's .env: %v", err)
	}
	places := map[string]string{".env": string(envFile), "the journal": b.stderr}
	for _, c := range b.containers() {
		places[c.Name+"'s environment (docker inspect)"] = strings.Join(c.Env, "\n")
	}
	reports := b.w.ten.Reports(b.env)
	if len(reports) == 0 {
		t.Fatal("no report to search")
	}
	for i, r := range reports {
		places[fmt.Sprintf("report %d (%s) detail", i, r.Report.Result)] = r.Report.Detail
		places[fmt.Sprintf("report %d (%s) log tail", i, r.Report.Result)] = r.Report.LogTail
	}
	for where, text := range places {
		for what, v := range map[string]string{"user name": user, "password": pw, "base64 auth": auth} {
			if strings.Contains(text, v) {
				t.Errorf("the registry %s is in %s", what, where)
			}
		}
	}
}

func (b *box) containers() map[string]ContainerState {
	out := map[string]ContainerState{}
	for _, c := range Containers(b.t, b.project) {
		out[c.Service] = c
	}
	return out
}

func TestAgentAgainstRealParts(t *testing.T) {
	w := newWorld(t)

	t.Run("first apply, then a new image, then a heartbeat", func(t *testing.T) {
		b := w.newBox(t, "env-it-apply", "")
		// No healthcheck in the compose file: the image's own HEALTHCHECK makes them healthy.
		sha1 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, imageHealth: true}))
		b.expect(0)
		if r := b.report(); r.Result != "applied" || r.Sha != sha1 {
			t.Fatalf("report = %+v\n%s", r, b.stderr)
		}
		cs := b.containers()
		if cs["web"].State != "running" || cs["web"].Health != "healthy" || cs["worker"].Health != "healthy" {
			t.Fatalf("containers = %+v (healthy only through the image's HEALTHCHECK)", cs)
		}
		got, err := AppGet(t, cs["web"].Name, "/env?name=APP_SECRET")
		if err != nil || got != trickySecret {
			t.Errorf("web sees APP_SECRET %q (%v), want it byte-for-byte", got, err)
		}
		got, err = AppGet(t, cs["worker"].Name, "/env?name=DB_PASSWORD")
		if err != nil || got != "db-"+b.env+"-p4ss" {
			t.Errorf("worker sees DB_PASSWORD %q (%v)", got, err)
		}
		b.checkRegistryCredential(t)
		if strings.Contains(b.stderr, trickySecret) {
			t.Error("a secret value is in the journal")
		}

		// Scenario 3: a new sha with image v2.
		sha2 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v2", webHealthy: true, registry: true}))
		b.expect(0)
		cur, _ := os.Readlink(filepath.Join(b.dir, "state", b.env, "current"))
		if cur != filepath.Join("releases", sha2) {
			t.Errorf("current → %s, want releases/%s", cur, sha2)
		}
		if _, err := os.Stat(filepath.Join(b.dir, "state", b.env, "releases", sha1)); err != nil {
			t.Errorf("the previous release dir is gone: %v", err)
		}
		cs = b.containers()
		if v, _ := AppGet(t, cs["web"].Name, "/version"); strings.TrimSpace(v) != w.images["v2"].Version {
			t.Errorf("web runs version %q after the v2 apply", v)
		}
		if r := b.report(); r.Result != "applied" || r.Sha != sha2 {
			t.Errorf("report = %+v", r)
		}

		// Scenario 5: converged, a container stopped by hand → brought back by drift correction
		// (issue 22; with drift_correction off it is reported unhealthy: drift_test.go).
		b.expect(0)
		if r := b.report(); r.Result != "healthy" {
			t.Errorf("heartbeat = %+v", r)
		}
		docker(t, "", "stop", "-t", "1", cs["worker"].Name)
		b.expect(0)
		if r := b.report(); r.Result != "healthy" || r.Detail != "drift corrected: worker: exited" {
			t.Errorf("heartbeat after docker stop = %+v", r)
		}
		// Every report and tick of the scenario so far: still no credential anywhere.
		b.checkRegistryCredential(t)
	})

	t.Run("no credential for the image's registry: the registry's own words, nothing restarted", func(t *testing.T) {
		b := w.newBox(t, "env-it-noauth", "")
		sha1 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
		b.expect(0)
		before := b.containers()
		if len(before) != 2 {
			t.Fatalf("containers after the v1 apply = %+v", before)
		}
		// The new sha has no registry-auth entry, and its image is in a registry the box holds no
		// credential for. (The agent keeps <state_dir>/docker/config.json until a manifest carries
		// a new credential — docs/PROTOCOL.md — so an image of the first registry would pull.)
		other := StartRegistry(t)
		im := BuildImages(t, other, "v3")[0]
		im.RemoveLocal(t)
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{image: im.Ref, webHealthy: true, registry: false}))
		b.expect(1)
		r := b.report()
		if r.Result != "failed" || !strings.Contains(r.Detail, "compose pull") || !registryRefusal(r.Detail) {
			t.Errorf("report = %+v, want failed with the registry's own words", r)
		}
		after := b.containers()
		for svc, c := range before {
			a := after[svc]
			if a.ID != c.ID || a.StartedAt != c.StartedAt || a.State != "running" || a.Image != w.images["v1"].Ref {
				t.Errorf("%s was touched by the failed apply: before %s started %s, after %s started %s (%s, %s)",
					svc, c.ID[:12], c.StartedAt, a.ID, a.StartedAt, a.State, a.Image)
			}
		}
		if len(after) != len(before) {
			t.Errorf("containers after the failed apply = %+v", after)
		}
		if st := b.state(); st.AppliedSha != sha1 {
			t.Errorf("applied sha = %.12s, want %.12s kept", st.AppliedSha, sha1)
		}
		if LocalImageExists(t, im.Ref) {
			t.Errorf("%s is local after a refused pull", im.Ref)
		}
	})

	t.Run("a human's docker login does not help the agent", func(t *testing.T) {
		b := w.newBox(t, "env-it-login", "")
		// Log in the way a human would: into ~/.docker of the user the agent runs as.
		cmd := exec.Command("docker", "login", "--username", w.reg.User, "--password-stdin", w.reg.Addr)
		cmd.Env = append(os.Environ(), "HOME="+b.home, "DOCKER_CONFIG=")
		cmd.Stdin = strings.NewReader(w.reg.Password.Reveal())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("docker login: %v\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(b.home, ".docker", "config.json")); err != nil {
			t.Fatalf("the human login left no ~/.docker/config.json: %v", err)
		}
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: false}))
		b.expect(1)
		if r := b.report(); r.Result != "failed" || !strings.Contains(r.Detail, "compose pull") || !registryRefusal(r.Detail) {
			t.Errorf("report = %+v, want failed with the registry's own words", r)
		}
		if len(b.containers()) != 0 {
			t.Error("containers started after a failed pull")
		}
	})

	t.Run("a healthcheck that never passes fails after the timeout and keeps the applied sha", func(t *testing.T) {
		b := w.newBox(t, "env-it-unhealthy", "")
		sha1 := w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
		b.expect(0)
		// healthy_timeout_s: 60 in the config; the bundle asks for 12. web prints APP_SECRET's
		// value when it starts, so the secret is in `compose logs`.
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v2", webHealthy: false, registry: true, logEnv: "APP_SECRET",
			agent: map[string]any{"healthy_timeout_s": 12}}))
		b.expect(1)
		r := b.report()
		if r.Result != "failed" || !strings.Contains(r.Detail, "not healthy after 12s") || !strings.Contains(r.Detail, "web") {
			t.Errorf("report = %+v, want failed: not healthy after 12s (the bundle's timeout, not the config's 60 s) naming web", r)
		}
		// The wait the agent ran is the bundle's 12 s, as its journal says, never the config's 60 s
		// (how long the wait lasts against a clock is the tick package's fake-clock tests' job).
		if !strings.Contains(b.stderr, "failed: not healthy after 12s: web") || strings.Contains(b.stderr, "after 1m0s") {
			t.Errorf("the journal does not say the bundle's 12 s health wait ended the tick:\n%s", b.stderr)
		}
		for _, want := range []string{"APP_SECRET=***", "healthz: unhealthy (APP_HEALTHY=false)"} {
			if !strings.Contains(r.LogTail, want) {
				t.Errorf("log tail lacks %q:\n%s", want, r.LogTail)
			}
		}
		if strings.Contains(r.LogTail, trickySecret) || strings.Contains(b.stderr, trickySecret) {
			t.Error("the log tail or the journal carries the secret")
		}
		if st := b.state(); st.AppliedSha != sha1 {
			t.Errorf("applied sha = %.12s, want the previous %.12s", st.AppliedSha, sha1)
		}
	})

	t.Run("down keeps volumes unless purge is asked and allowed", func(t *testing.T) {
		for _, tc := range []struct {
			name, config string
			purge, gone  bool
		}{
			{"keep by default", "", true, false},
			{"purge", "volumes_on_absent: purge", true, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b := w.newBox(t, "env-it-down-"+strings.ReplaceAll(tc.name, " ", "-"), tc.config)
				w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, volume: true}))
				b.expect(0)
				w.ten.Retire(b.env, tc.purge)
				b.expect(0)
				if r := b.report(); r.Result != "down" {
					t.Errorf("report = %+v", r)
				}
				if n := len(b.containers()); n != 0 {
					t.Errorf("%d containers left after down", n)
				}
				vols := strings.Fields(docker(t, "", "volume", "ls", "-q", "--filter", "label=com.docker.compose.project="+b.project))
				if (len(vols) == 0) != tc.gone {
					t.Errorf("volumes after down = %v, want gone=%v", vols, tc.gone)
				}
			})
		}
	})

	t.Run("DISK_INSUFFICIENT measured on the real data-root", func(t *testing.T) {
		b := w.newBox(t, "env-it-disk", "")
		// Rewrite the headroom far above any real disk.
		raw, _ := os.ReadFile(b.cfg)
		os.WriteFile(b.cfg, []byte(strings.Replace(string(raw), "headroom_bytes: 1048576", "headroom_bytes: 1125899906842624", 1)), 0o640)
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true}))
		b.expect(1)
		r := b.report()
		root := strings.TrimSpace(docker(t, "", "info", "--format", "{{.DockerRootDir}}"))
		if r.Result != "refused" || !strings.HasPrefix(r.Detail, "DISK_INSUFFICIENT: ") || !strings.Contains(r.Detail, root) {
			t.Errorf("report = %+v (data-root %s)", r, root)
		}
		if w.ten.LeasesGranted(b.env) != 0 {
			t.Error("leased before refusing")
		}
	})

	t.Run("OpenBao for real: lease swap, reuse, renew, pinned version, another env's path", func(t *testing.T) {
		// renew_below_s just under the role's 24 h TTL: a token a few seconds old needs renewing.
		b := w.newBox(t, "env-it-bao", "")
		raw, _ := os.ReadFile(b.cfg)
		os.WriteFile(b.cfg, []byte(strings.Replace(string(raw), "bao:\n", "bao:\n  renew_below_s: 86380\n", 1)), 0o640)

		v2 := w.bao.Put(t, b.env, "app_secret", "value", "the newest value")
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, pinVersion: v2 - 1}))
		b.expect(0)
		if _, err := os.Stat(filepath.Join(b.dir, "bootstrap.jwt")); !os.IsNotExist(err) {
			t.Error("bootstrap grant not deleted after the login")
		}
		if n := w.ten.LeasesGranted(b.env); n != 1 {
			t.Errorf("leases = %d, want 1", n)
		}
		// The bootstrap token was revoked after the swap: exactly one live jwt token remains.
		var live []TokenInfo
		for _, tok := range w.bao.Tokens(t) {
			if tok.EnvID == b.env {
				live = append(live, tok)
			}
		}
		if len(live) != 1 {
			t.Errorf("live tokens of %s = %d, want 1 (bootstrap revoked after the swap)", b.env, len(live))
		}
		cs := b.containers()
		if got, _ := AppGet(t, cs["web"].Name, "/env?name=APP_SECRET"); got != trickySecret {
			t.Errorf("pinned version not honoured: web sees %q", got)
		}

		// Next apply: the lease token is renewed (it has aged below renew_below_s), not re-leased.
		st := b.state()
		if st.Token == nil || st.Token.Source != state.SourceLease || len(live) != 1 || st.Token.Accessor != live[0].Accessor {
			t.Fatalf("state token = %+v, live = %+v: want the one live lease token", st.Token, live)
		}
		acc := st.Token.Accessor
		time.Sleep(25 * time.Second) // let the 24 h token age below renew_below_s (86380 s)
		ttlBefore, renewsBefore, logins := w.bao.TokenTTL(t, acc), w.bao.RenewSelfs(t, acc), w.bao.LoginCount(t, b.env)
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, extraEnvVar: "EXTRA=1\n"}))
		b.expect(0)
		if n := w.ten.LeasesGranted(b.env); n != 1 {
			t.Errorf("leases = %d after the second apply, want 1 (renewed, not re-leased)", n)
		}
		if !strings.Contains(b.last, "lease token renewed") {
			t.Errorf("no renewal in the journal:\n%s", b.last)
		}
		// OpenBao's side: one renew-self by this token in its audit log, and more time left.
		if n := w.bao.RenewSelfs(t, acc); n != renewsBefore+1 {
			t.Errorf("OpenBao's audit log shows %d renew-self by the lease token, want %d", n, renewsBefore+1)
		}
		if ttl := w.bao.TokenTTL(t, acc); ttl <= ttlBefore {
			t.Errorf("token TTL %s after the renewal, %s before: OpenBao did not renew it", ttl, ttlBefore)
		}

		// Next apply, right after: the renewed token has more than renew_below_s left, so it
		// is reused as it is — no lease, no login, no renewal.
		renewed := w.bao.RenewSelfs(t, acc)
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, extraEnvVar: "EXTRA=reuse\n"}))
		b.expect(0)
		if r := b.report(); r.Result != "applied" {
			t.Errorf("report of the reuse apply = %+v", r)
		}
		if n := w.ten.LeasesGranted(b.env); n != 1 {
			t.Errorf("leases = %d after the reuse apply, want still 1", n)
		}
		if strings.Contains(b.last, "lease token renewed") {
			t.Errorf("the reuse apply renewed the token again:\n%s", b.last)
		}
		if n := w.bao.RenewSelfs(t, acc); n != renewed {
			t.Errorf("OpenBao's audit log shows %d renew-self after the reuse apply, want %d", n, renewed)
		}
		if n := w.bao.LoginCount(t, b.env); n != logins {
			t.Errorf("OpenBao logins of %s = %d, want %d: the reuse apply logged in again", b.env, n, logins)
		}
		if st := b.state(); st.Token == nil || st.Token.Accessor != acc {
			t.Errorf("state token after the reuse apply = %+v, want accessor %s", st.Token, acc)
		}

		// A prefix of another env: OpenBao's policy answers 403, named by path.
		w.ten.SetVault(b.env, protocol.Vault{Prefix: "env-it-apply/see"})
		w.ten.SetDesired(b.env, w.bundle(bundleOpts{tag: "v1", webHealthy: true, registry: true, extraEnvVar: "EXTRA=2\n"}))
		b.expect(1)
		if r := b.report(); r.Result != "failed" || !strings.Contains(r.Detail, "env-it-apply/see/") || !strings.Contains(strings.ToLower(r.Detail), "forbidden") && !strings.Contains(r.Detail, "403") && !strings.Contains(r.Detail, "denied") {
			t.Errorf("report = %+v", r)
		}
	})
}
