package tick_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose/composetest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

const env = "env-qa-02"

// Secret values seeded in the fake OpenBao. Every one is grepped for in everything a tick wrote.
const (
	geminiKey   = `g3m!ni key with spaces, "quotes", $dollar and #hash`
	dbPassword  = "s3cr3t-db-p4ss"
	registryPwd = "r3g1stry-r0b0t-p4ss"
)

// clock is a fake clock the agent's Sleep advances, so waiting for health takes no real time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// harness is one box: a config and state dir, fake tenancy, fake OpenBao, a simulated docker CLI.
type harness struct {
	// noHostFile lists host paths that are no regular file on this box (Deps.IsFile).
	noHostFile map[string]bool
	t          testing.TB
	dir        string
	cfg        *config.Config
	ten        *tenancytest.Server
	bao        *baotest.Server
	signer     *grant.Signer
	docker     *composetest.Sim
	clock      *clock
	logs       *syncbuf.Buffer
	free       map[string]int64
	step       func(string) error
	prune      bool
	timer      *protocol.Timer
	cfgText    string
	// httpTransport, when set, carries every tenancy and OpenBao call (a transport under test).
	httpTransport func() *http.Transport
	// bao2 is the second fake OpenBao of newHarnessOpts' secondBao, nil otherwise.
	bao2 *baotest.Server
	// wrap, when set, may replace parts of the deps a tick runs with (recording wrappers).
	wrap func(*tick.Deps)
}

// baos resolves a bearer at any of the fake OpenBaos, as real tenancy does at the one OpenBao
// its tokens come from: a tick may be handed a second one by the check-in or a lease.
type baos struct {
	mu   sync.Mutex
	list []*baotest.Server
}

func (b *baos) add(s *baotest.Server) {
	b.mu.Lock()
	b.list = append(b.list, s)
	b.mu.Unlock()
}

func (b *baos) Verify(ctx context.Context, tok string) (envID, grantJTI string, err error) {
	b.mu.Lock()
	list := append([]*baotest.Server(nil), b.list...)
	b.mu.Unlock()
	for _, s := range list {
		if envID, grantJTI, err = s.Verify(ctx, tok); err == nil {
			return envID, grantJTI, nil
		}
	}
	return "", "", err
}

// harnessOptions shape newHarnessOpts.
type harnessOptions struct {
	readLatency time.Duration
	// tenancyBaoAddr, when set, is the OpenBao address the fake tenancy hands out in check-ins
	// and leases (an intercept name for transport tests), else the fake OpenBao's own URL.
	tenancyBaoAddr string
	// secondBao, when set, starts a second fake OpenBao (h.bao2) with these options (key and
	// clock filled in) whose tokens tenancy also accepts. Tenancy hands out its address, KV
	// mount, auth mount and role; the config keeps naming the first one.
	secondBao   *baotest.Options
	extraConfig []string
}

func newHarness(t testing.TB, extraConfig ...string) *harness {
	t.Helper()
	return newHarnessWith(t, 0, "", extraConfig...)
}

// newBenchHarness is a harness whose OpenBao takes readLatency for every KV read.
func newBenchHarness(t testing.TB, readLatency time.Duration) *harness {
	return newHarnessWith(t, readLatency, "")
}

// newHarnessWith builds a harness; tenancyBaoAddr, when set, is the OpenBao address the fake
// tenancy hands out (an intercept name for transport tests), else the fake OpenBao's own URL.
func newHarnessWith(t testing.TB, readLatency time.Duration, tenancyBaoAddr string, extraConfig ...string) *harness {
	t.Helper()
	return newHarnessOpts(t, harnessOptions{readLatency: readLatency, tenancyBaoAddr: tenancyBaoAddr, extraConfig: extraConfig})
}

func newHarnessOpts(t testing.TB, o harnessOptions) *harness {
	t.Helper()
	readLatency, tenancyBaoAddr, extraConfig := o.readLatency, o.tenancyBaoAddr, o.extraConfig
	h := &harness{t: t, dir: t.TempDir(), clock: &clock{t: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}, logs: &syncbuf.Buffer{}}
	var err error
	h.signer, err = grant.NewSigner("monky-tenancy-test")
	if err != nil {
		t.Fatal(err)
	}
	h.signer.Clock = h.clock.Now
	h.bao = baotest.Start(baotest.Options{PublicKey: h.signer.PublicKey(), Clock: h.clock.Now, ReadLatency: readLatency})
	t.Cleanup(h.bao.Close)
	verifier := &baos{list: []*baotest.Server{h.bao}}
	if tenancyBaoAddr == "" {
		tenancyBaoAddr = h.bao.URL
	}
	topts := tenancytest.Options{Verifier: verifier, Signer: h.signer, BaoAddr: tenancyBaoAddr, Clock: h.clock.Now}
	if o.secondBao != nil {
		bo := *o.secondBao
		bo.PublicKey, bo.Clock = h.signer.PublicKey(), h.clock.Now
		h.bao2 = baotest.Start(bo)
		t.Cleanup(h.bao2.Close)
		verifier.add(h.bao2)
		topts.BaoAddr, topts.KVMount, topts.AuthMount, topts.AuthRole = h.bao2.URL, bo.KVMount, bo.AuthMount, bo.Role
	}
	h.ten = tenancytest.Start(topts)
	t.Cleanup(h.ten.Close)
	h.ten.AddEnv(env)

	state := filepath.Join(h.dir, "state")
	if err := os.MkdirAll(filepath.Join(h.dir, "containerd"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfgText := fmt.Sprintf(`env_id: %s
site: cbs
transport: system
tenancy:
  base_url: %s
bao:
  addr: %s
  ca_file: %s
state_dir: %s
bootstrap_file: %s
containerd_root: %s
registry_host: harbor.tikali.net
healthy_timeout_s: 60
`, env, h.ten.URL, h.bao.URL, filepath.Join(h.dir, "no-ca.pem"), state, filepath.Join(h.dir, "bootstrap.jwt"), filepath.Join(h.dir, "containerd"))
	cfgText += strings.Join(extraConfig, "\n")
	h.cfgText = cfgText
	h.cfg, err = config.Parse([]byte(cfgText), filepath.Join(h.dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	h.docker = composetest.New(t)
	h.docker.RootDir = filepath.Join(h.dir, "docker-root")
	h.free = map[string]int64{}
	h.writeBootstrap()
	h.bao.Put(env, "gemini_api_key", "value", geminiKey)
	h.bao.Put(env, "db_password", "value", dbPassword)
	h.bao.Put(env, "registry", "value", `{"registry": "harbor.tikali.net", "username": "robot$pull", "password": "`+registryPwd+`"}`)
	return h
}

// writeBootstrap stages a fresh install-kit grant, as install.sh does.
func (h *harness) writeBootstrap() {
	h.t.Helper()
	jwt := h.ten.RevealKit(env)
	if err := os.WriteFile(h.cfg.BootstrapFile, []byte(jwt+"\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) deps() tick.Deps {
	newTransport := func() *http.Transport { return &http.Transport{} }
	if h.httpTransport != nil {
		newTransport = h.httpTransport
	}
	hc := &http.Client{Transport: newTransport(), Timeout: 10 * time.Second}
	red := &secret.Redactor{}
	d := tick.Deps{
		Redact:  red,
		Log:     slog.New(journal.New(h.logs, slog.LevelDebug)),
		Tenancy: tenancy.New(h.cfg.TenancyURL(), hc),
		NewBao: func(addr string) (tick.Bao, error) {
			return bao.New(bao.Options{Addr: addr, HTTPClient: &http.Client{Transport: newTransport()}, CAFile: h.cfg.Bao.CAFile})
		},
		Docker: &compose.Docker{Bin: "docker", ConfigDir: h.cfg.DockerConfigDir(), Project: h.cfg.ComposeProject, Runner: h.docker, Now: h.clock.Now, PollInterval: 2 * time.Second, Redact: red},
		Timer: func(context.Context) *protocol.Timer {
			if h.timer != nil {
				return h.timer
			}
			return &protocol.Timer{Unit: "monky-deployd.timer"}
		},
		Disk: &diskspace.Meter{Stat: func(p string) (int64, error) {
			if _, err := os.Stat(p); err != nil {
				return 0, fs.ErrNotExist
			}
			if v, ok := h.free[p]; ok {
				return v, nil
			}
			return 500 << 30, nil
		}},
		Now:      h.clock.Now,
		Sleep:    h.clock.Sleep,
		Hostname: "qa-02",
		Step:     h.step,
		// The host's time zone files are there unless a test took one away.
		IsFile: func(p string) bool { return !h.noHostFile[p] },
	}
	if h.wrap != nil {
		h.wrap(&d)
	}
	return d
}

// tick runs one tick and returns its exit code.
func (h *harness) tick() int {
	h.t.Helper()
	return tick.ExitCode(h.tickErr())
}

// tickErr runs one tick and returns its error, which the CLI prints.
func (h *harness) tickErr() error {
	h.t.Helper()
	return tick.New(h.cfg, h.deps(), tick.Options{Prune: h.prune}).Tick(context.Background())
}

func (h *harness) state() *state.State {
	h.t.Helper()
	st, err := state.Load(h.cfg.StatePath())
	if err != nil {
		h.t.Fatal(err)
	}
	return st
}

func (h *harness) lastReport() protocol.Report {
	h.t.Helper()
	r, ok := h.ten.LastReport(env)
	if !ok {
		h.t.Fatal("no report")
	}
	return r
}

// bundleSpec describes a bundle; zero values give a two-service app with three manifest entries.
type bundleSpec struct {
	compose  string
	template string
	manifest string
	agent    map[string]any
	extra    map[string]string
	noMeta   bool
	pull     string // bundle.json pull; "" is always
	// composeFile is bundle.json compose_file; "" is docker-compose.yml
	composeFile string
}

const defaultCompose = `services:
  api:
    image: harbor.tikali.net/monky/api:1.4.2
    env_file: .env
    healthcheck:
      test: ["CMD", "/app", "-check"]
  worker:
    image: harbor.tikali.net/monky/worker:1.4.2
    environment:
      DB_PASSWORD: ${DB_PASSWORD}
`

const defaultTemplate = `# rendered by tenancy: substitutes every ${VAR} below
GEMINI_API_KEY=${GEMINI_API_KEY}
DB_PASSWORD=${DB_PASSWORD}
LOG_LEVEL=info
`

const defaultManifest = `{"entries": [
  {"var": "GEMINI_API_KEY", "path": "gemini_api_key"},
  {"var": "DB_PASSWORD", "path": "db_password", "key": "value"},
  {"path": "registry", "use": "registry-auth"}
]}`

func makeFiles(s bundleSpec) map[string]string {
	if s.compose == "" {
		s.compose = defaultCompose
	}
	if s.template == "" {
		s.template = defaultTemplate
	}
	if s.manifest == "" {
		s.manifest = defaultManifest
	}
	if s.composeFile == "" {
		s.composeFile = "docker-compose.yml"
	}
	files := map[string]string{
		s.composeFile:   s.compose,
		".env.template": s.template,
		"manifest.json": s.manifest,
	}
	if !s.noMeta {
		pull := s.pull
		if pull == "" {
			pull = "always"
		}
		meta := map[string]any{
			"address": "monky/see", "pull": pull, "secrets_provider": "openbao",
			"compose_file": s.composeFile,
			"files":        []string{s.composeFile, ".env.template", "manifest.json"},
		}
		if s.agent != nil {
			meta["agent"] = s.agent
		}
		b, _ := json.Marshal(meta)
		files["bundle.json"] = string(b)
	}
	for k, v := range s.extra {
		files[k] = v
	}
	return files
}

// desire makes tenancy want the bundle and returns its sha.
func (h *harness) desire(s bundleSpec) string {
	return h.ten.SetDesired(env, makeFiles(s))
}

func (h *harness) expectExit(want int) {
	h.t.Helper()
	if got := h.tick(); got != want {
		h.t.Fatalf("tick exit %d, want %d; journal:\n%s", got, want, h.logs.String())
	}
}

func (h *harness) expectLog(substr string) {
	h.t.Helper()
	if !strings.Contains(h.logs.String(), substr) {
		h.t.Errorf("journal lacks %q:\n%s", substr, h.logs.String())
	}
}

// endBackoff ends the deploy backoff a failed apply started, for tests about something else
// that need the next tick to try the desired sha again.
func (h *harness) endBackoff() {
	h.t.Helper()
	st := h.state()
	if st.Backoff != nil {
		st.Backoff.NextAttemptAt = h.clock.Now()
		if err := state.Save(h.cfg.StatePath(), st); err != nil {
			h.t.Fatal(err)
		}
	}
}
