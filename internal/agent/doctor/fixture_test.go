package doctor

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io/fs"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner/runnertest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

const (
	envID     = "env-qa-02"
	agentUID  = 998
	agentGID  = 998
	zitiUID   = 997
	zitiGID   = 990
	dockerGID = 105
	gib       = int64(1) << 30
)

var (
	userNames  = map[uint32]string{0: "root", agentUID: "monky-deployd", zitiUID: "ziti"}
	groupNames = map[uint32]string{0: "root", agentGID: "monky-deployd", zitiGID: "ziti", dockerGID: "docker"}
)

// fixture is a box on which every check passes until a test breaks one thing.
type fixture struct {
	t    *testing.T
	dir  string
	env  *Env
	run  *runnertest.Fake
	fs   *fakeFS
	free map[string]int64
	tm   *protocol.Timer
	sock string // the docker socket the agent's docker connects to
	// endpoint is what `docker context inspect` prints for the agent ("" is unix://<sock>);
	// endpointRes, when set, is its whole answer instead.
	endpoint    string
	endpointRes *runner.Result
}

// fakeFS is the real filesystem under the test's temp dir, with owners rewritten (everything the
// test created belongs to the agent unless a test says otherwise) and per-path overrides, so
// ownership and permission faults can be staged without root. Devices are unknown (Dev 0) except
// where dev stages one: which paths share a filesystem is up to the test.
type fakeFS struct {
	root    string
	stat    map[string]FileInfo
	statErr map[string]error
	readErr map[string]error
	dev     map[string]uint64
	// aclGrants are paths where an ACL lets the agent through what the mode bits deny.
	aclGrants map[string]bool
}

func (f *fakeFS) Stat(p string) (FileInfo, error) {
	p = filepath.Clean(p)
	if err, ok := f.statErr[p]; ok {
		return FileInfo{}, err
	}
	if fi, ok := f.stat[p]; ok {
		if d, ok := f.dev[p]; ok {
			fi.Dev = d
		}
		return fi, nil
	}
	if p != f.root && strings.HasPrefix(f.root, strings.TrimSuffix(p, "/")+"/") {
		// Above the test's dir (Go makes its temp dirs 0700): an ordinary 0755 root:root path.
		return FileInfo{Mode: fs.ModeDir | 0o755}, nil
	}
	fi, err := OSStat(p)
	if err != nil {
		return fi, err
	}
	if p == f.root || strings.HasPrefix(p, f.root+"/") {
		fi.UID, fi.GID = agentUID, agentGID
	}
	fi.Dev = f.dev[p]
	return fi, nil
}

func (f *fakeFS) foreignFiles(dir string, uid uint32) ([]state.ForeignFile, bool, error) {
	var out []state.ForeignFile
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == dir {
			return fs.SkipAll
		}
		if err != nil {
			return err
		}
		fi, err := f.Stat(p)
		if err != nil {
			return err
		}
		if fi.UID != uid && filepath.Base(p) != state.UpgradedFromFile {
			out = append(out, state.ForeignFile{Path: p, UID: fi.UID})
		}
		return nil
	})
	return out, false, err
}

func (f *fakeFS) ReadFile(p string) ([]byte, error) {
	if err, ok := f.readErr[filepath.Clean(p)]; ok {
		return nil, err
	}
	return os.ReadFile(p)
}

func agentAccount() *Account {
	return &Account{Name: "monky-deployd", UID: agentUID, GIDs: []uint32{agentGID, dockerGID, zitiGID}}
}

func newFixture(t *testing.T, extraYAML string) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{t: t, dir: dir, run: runnertest.New(t), free: map[string]int64{}}
	text := strings.Join([]string{
		"env_id: " + envID,
		"site: cbs",
		"identity: " + dir + "/ident/monky-host." + envID + ".json",
		"tenancy:",
		"  base_url: http://127.0.0.1:9",
		"bao:",
		"  addr: https://127.0.0.1:8200",
		"  ca_file: " + dir + "/openbao-ca.pem",
		"state_dir: " + dir + "/state",
		"bootstrap_file: " + dir + "/bootstrap.jwt",
		"containerd_root: " + dir + "/containerd",
		"disk:",
		"  headroom_bytes: 2147483648",
	}, "\n") + "\n" + extraYAML
	cfgPath := filepath.Join(dir, "config.yaml")
	write(t, cfgPath, text, 0o640)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatalf("fixture config: %v", err)
	}
	mkdir(t, cfg.StateDir, 0o700)
	mkdir(t, filepath.Dir(cfg.Identity), 0o750)
	write(t, cfg.Identity, identityJSON(t), 0o640)
	mkdir(t, cfg.ContainerdRoot, 0o700)
	plugins := filepath.Join(dir, "cli-plugins")
	mkdir(t, plugins, 0o755)
	write(t, filepath.Join(plugins, "docker-compose"), "#!/bin/sh\n", 0o755)

	f.fs = &fakeFS{root: dir, stat: map[string]FileInfo{}, statErr: map[string]error{}, readErr: map[string]error{}, dev: map[string]uint64{}, aclGrants: map[string]bool{}}
	// The identity as install.sh leaves it: ziti:ziti 0640.
	f.fs.stat[cfg.Identity] = FileInfo{Mode: 0o640, UID: zitiUID, GID: zitiGID}
	f.free[dir+"/docker-root"] = 90 * gib
	f.free[cfg.ContainerdRoot] = 50 * gib
	f.free[cfg.StateDir] = 80 * gib
	// The engine's socket as docker.socket makes it: root:docker 0660.
	f.sock = filepath.Join(dir, "docker.sock")
	f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeSocket | 0o660, UID: 0, GID: dockerGID}
	enabled, active, next := true, true, "2026-12-02T10:01:00Z"
	f.tm = &protocol.Timer{Unit: systemd.TimerUnit, Enabled: &enabled, Active: &active, NextElapse: &next}

	f.run.ExpectPrefix("setpriv", nil).AnyTimes().Do(f.access)
	f.run.ExpectPrefix("test", nil).AnyTimes().Do(f.access)
	f.env = &Env{
		ConfigPath:  cfgPath,
		Config:      cfg,
		Self:        Account{Name: "monky-deployd", UID: agentUID},
		Agent:       agentAccount(),
		AgentName:   AgentUser,
		UserName:    func(u uint32) string { return userNames[u] },
		GroupName:   func(g uint32) string { return groupNames[g] },
		LookupGroup: lookupGroup,
		Stat:        f.fs.Stat,
		ReadFile:    f.fs.ReadFile,
		// The owners of fakeFS (the agent's unless a test says otherwise), walked like
		// state.ForeignFiles walks the real ones.
		ForeignFiles: f.fs.foreignFiles,
		Runner:       f.run,
		Meter:        diskspace.Meter{Stat: f.statfs},
		Timer:        func(context.Context) *protocol.Timer { return f.tm },
		PluginDirs:   []string{filepath.Join(dir, "no-such-plugins"), plugins},
		Hostname:     "qa-02",
		Now:          func() time.Time { return time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC) },
	}
	f.run.Expect("docker", contextInspectArgs).AnyTimes().Do(func(_ context.Context, c runner.Cmd) (runner.Result, error) {
		if h, _ := (runnertest.Call{Cmd: c}).Getenv("DOCKER_HOST"); h != "" {
			return runner.Result{Stdout: []byte(h + "\n")}, nil // docker prints the host it was given
		}
		if f.endpointRes != nil {
			return *f.endpointRes, nil
		}
		if f.endpoint != "" {
			return runner.Result{Stdout: []byte(f.endpoint + "\n")}, nil
		}
		return runner.Result{Stdout: []byte("unix://" + f.sock + "\n")}, nil
	})
	return f
}

func lookupGroup(name string) (uint32, error) {
	for gid, n := range groupNames {
		if n == name {
			return gid, nil
		}
	}
	return 0, errors.New("group " + name + " unknown")
}

func (f *fixture) statfs(p string) (int64, error) {
	if n, ok := f.free[filepath.Clean(p)]; ok {
		return n, nil
	}
	return 0, &fs.PathError{Op: "statfs", Path: p, Err: fs.ErrNotExist}
}

func (f *fixture) cfg() *config.Config { return f.env.Config }

// asRoot makes doctor run as root while the agent is monky-deployd, the usual case right after
// install.sh.
func (f *fixture) asRoot() { f.env.Self = Account{Name: "root", UID: 0} }

// access answers test(1), run as doctor or through setpriv as the agent, as the kernel would for
// fakeFS: search on every directory above the path and the access asked on the path, each by
// the mode bits unless aclGrants lets the agent through.
func (f *fixture) access(_ context.Context, c runner.Cmd) (runner.Result, error) {
	a, args := *f.env.Agent, c.Args
	if c.Name == "setpriv" {
		want := []string{"--reuid=" + itoa(a.UID), "--regid=" + itoa(a.GIDs[0]), "--init-groups", "test"}
		if len(args) != 6 || !slices.Equal(args[:4], want) {
			f.t.Errorf("setpriv %q, want %q and test's two arguments", args, want)
			return runner.Result{ExitCode: 2}, nil
		}
		args = args[4:]
	} else if f.env.Self.UID != a.UID {
		f.t.Errorf("test %q ran as doctor (uid %d), not as the agent (uid %d)", args, f.env.Self.UID, a.UID)
	}
	path := filepath.Clean(args[1])
	var chain []string
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		chain = append(chain, d)
		if d == filepath.Dir(d) {
			break
		}
	}
	for i, p := range append(chain, path) {
		bits := permX
		if i == len(chain) {
			bits = wantBits[args[0]]
		}
		fi, err := f.fs.Stat(p)
		if err != nil || !modeAllows(a, fi, bits) && !f.fs.aclGrants[p] {
			return runner.Result{ExitCode: 1}, nil
		}
	}
	return runner.Result{}, nil
}

func (f *fixture) expectInfo() {
	f.run.Expect("docker", []string{"info", "--format", "{{json .}}"}).
		Returns(`{"DockerRootDir":"`+f.dir+`/docker-root","ServerVersion":"29.0.1"}`, "", 0)
}

// remote starts OpenBao (TLS) and tenancy fakes, stores a live token of envID, and wires the
// clients the way the command does.
type remote struct {
	bao     *baotest.Server
	tenancy *tenancytest.Server
	token   string
}

func (f *fixture) remote() *remote {
	t := f.t
	t.Helper()
	b := baotest.StartTLS(baotest.Options{})
	t.Cleanup(b.Close)
	ten := tenancytest.Start(tenancytest.Options{Verifier: b, BaoAddr: b.URL})
	t.Cleanup(ten.Close)
	ten.AddEnv(envID)
	r := &remote{bao: b, tenancy: ten, token: b.IssueToken(envID, "jti-1")}
	write(t, f.cfg().TokenPath(), r.token+"\n", 0o600)
	write(t, f.cfg().Bao.CAFile, string(b.CAPEM()), 0o644)
	// The config points at the fakes, as a test box's config would (transport system dials them).
	u, err := url.Parse(ten.URL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	f.cfg().Tenancy.Scheme, f.cfg().Tenancy.Host, f.cfg().Tenancy.Port = "http", u.Hostname(), port
	f.cfg().Bao.Addr = b.URL
	f.env.Tenancy = tenancy.New(ten.URL, nil)
	f.env.TenancyHTTP = &http.Client{Transport: &http.Transport{}}
	f.setBao(b.URL)
	return r
}

func (f *fixture) setBao(addr string) {
	c, err := f.baoAt(addr)
	f.env.Bao, f.env.BaoErr = c, err
	f.env.BaoAt = func(addr string) (BaoClient, error) { return f.baoAt(addr) }
}

func (f *fixture) baoAt(addr string) (*bao.Client, error) {
	return bao.New(bao.Options{Addr: addr, CAFile: f.cfg().Bao.CAFile, ServerName: "127.0.0.1", Timeout: 10 * time.Second})
}

// check runs the named check through Run, as the command does.
func (f *fixture) check(name string) Result {
	f.t.Helper()
	for _, c := range Checks(f.env) {
		if c.Name == name {
			rs, _ := Run(context.Background(), []Check{c})
			return rs[0]
		}
	}
	f.t.Fatalf("no check %q", name)
	return Result{}
}

type want struct {
	status Status
	detail []string // substrings of Detail
	fix    []string // substrings of Fix
	// notDetail are substrings Detail must not have (checked where a test asks for it).
	notDetail []string
}

func (w want) assert(t *testing.T, r Result) {
	t.Helper()
	if r.Status != w.status {
		t.Errorf("status %s, want %s: %+v", r.Status, w.status, r)
	}
	for _, s := range w.detail {
		if !strings.Contains(r.Detail, s) {
			t.Errorf("detail %q lacks %q", r.Detail, s)
		}
	}
	for _, s := range w.fix {
		if !strings.Contains(r.Fix, s) {
			t.Errorf("fix %q lacks %q", r.Fix, s)
		}
	}
	if r.Status == Fail && r.Fix == "" {
		t.Errorf("a failure without a fix: %+v", r)
	}
	if r.Status == Skip && r.Detail == "" {
		t.Errorf("a skip that does not say why: %+v", r)
	}
}

func write(t *testing.T, p, text string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, p string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// identityJSON is a ziti identity the pre-flight accepts: an https controller and a matching
// self-signed certificate and key.
func identityJSON(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7),
		Subject:      pkix.Name{CommonName: "monky-host." + envID},
		NotBefore:    time.Unix(0, 0),
		NotAfter:     time.Unix(1<<33, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	doc := map[string]any{
		"ztAPI": "https://ctrl.example.net:1280",
		"id":    map[string]string{"cert": "pem:" + certPEM, "key": "pem:" + keyPEM, "ca": "pem:" + certPEM},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// selfSignedPEM is a certificate nothing else trusts: the wrong CA for OpenBao.
func selfSignedPEM(t *testing.T) string {
	t.Helper()
	return string(testpki.NewCA(t, "some other CA").PEM)
}
