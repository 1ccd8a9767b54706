package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/doctor"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner/runnertest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

func TestDoctorConfigThatDoesNotLoadExits78(t *testing.T) {
	path := writeConfig(t, "env_id: env-qa-02\ntenancy:\n  prot: 443\n")
	code, stdout, stderr := runCLI(t, nil, "--config", path, "doctor")
	if code != 78 || !strings.HasPrefix(stdout, "FAIL config ") || !strings.Contains(stdout, "tenancy.prot") || !strings.Contains(stdout, path) {
		t.Errorf("exit %d stdout %q", code, stdout)
	}
	if strings.Count(stdout, "\n") != 1 || !strings.Contains(stdout, "— fix: ") || !strings.Contains(stderr, path) {
		t.Errorf("stdout %q stderr %q: want the config line alone, with its fix", stdout, stderr)
	}
	code, stdout, _ = runCLI(t, nil, "--config", "/nonexistent/config.yaml", "doctor", "--json")
	var doc doctor.Document
	if code != 78 || json.Unmarshal([]byte(stdout), &doc) != nil || doc.OK || doc.Schema != 1 || len(doc.Checks) != 1 || doc.Checks[0].Status != doctor.Fail {
		t.Errorf("--json: exit %d stdout %s", code, stdout)
	}
}

// doctorBox is a box with tenancy and OpenBao fakes where every check passes.
type doctorBox struct {
	cfgPath string
	token   string
	// dockerHost is the endpoint the agent's docker CLI resolves (`docker context inspect`): a
	// real socket of the test's, owned by its user. doctorHost is doctor's own DOCKER_HOST.
	dockerHost string
	doctorHost string
	run        *runnertest.Fake
	timer      *protocol.Timer
	deps       doctorDeps
}

func newDoctorBox(t *testing.T) *doctorBox {
	t.Helper()
	dir := t.TempDir()
	b := baotest.StartTLS(baotest.Options{})
	t.Cleanup(b.Close)
	ten := tenancytest.Start(tenancytest.Options{Verifier: b, BaoAddr: b.URL})
	t.Cleanup(ten.Close)
	ten.AddEnv("env-qa-02")
	box := &doctorBox{token: b.IssueToken("env-qa-02", "jti-1"), run: runnertest.New(t)}
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	box.dockerHost = "unix://" + sock

	state := filepath.Join(dir, "state")
	must(t, os.MkdirAll(state, 0o700))
	must(t, os.Chmod(state, 0o700))
	must(t, os.WriteFile(filepath.Join(state, "bao.token"), []byte(box.token+"\n"), 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "ca.pem"), b.CAPEM(), 0o644))
	plugins := filepath.Join(dir, "cli-plugins")
	must(t, os.MkdirAll(plugins, 0o755))
	must(t, os.WriteFile(filepath.Join(plugins, "docker-compose"), nil, 0o755))
	box.cfgPath = writeConfig(t, fmt.Sprintf(`env_id: env-qa-02
site: cbs
transport: system
tenancy:
  base_url: %s
bao:
  addr: %s
  ca_file: %s/ca.pem
state_dir: %s
bootstrap_file: %s/bootstrap.jwt
containerd_root: %s/containerd
`, ten.URL, b.URL, dir, state, dir, dir))

	box.run.Expect("docker", []string{"context", "inspect", "--format", "{{.Endpoints.docker.Host}}"}).AnyTimes().
		Do(func(_ context.Context, c runner.Cmd) (runner.Result, error) {
			if h, _ := (runnertest.Call{Cmd: c}).Getenv("DOCKER_HOST"); h != "" {
				return runner.Result{Stdout: []byte(h + "\n")}, nil // docker prints the host it was given
			}
			return runner.Result{Stdout: []byte(box.dockerHost + "\n")}, nil
		})
	box.run.Expect("docker", []string{"info", "--format", "{{json .}}"}).Returns(`{"DockerRootDir":"/var/lib/docker","ServerVersion":"29.0.1"}`, "", 0)
	box.run.Expect("docker", []string{"compose", "version", "--short"}).Returns("2.40.3\n", "", 0)
	// doctor runs as the agent here: the access it tries is the real filesystem's answer.
	box.run.ExpectPrefix("test", nil).AnyTimes().Do(runner.Exec{}.Run)
	enabled := true
	box.timer = &protocol.Timer{Unit: systemd.TimerUnit, Enabled: &enabled, Active: &enabled}
	me := doctor.Account{Name: "agent", UID: uint32(os.Geteuid())}
	box.deps = doctorDeps{
		runner:   box.run,
		stat:     doctor.OSStat,
		readFile: os.ReadFile,
		self:     me,
		lookup: func(name string) (doctor.Account, error) {
			return doctor.Account{Name: name, UID: me.UID, GIDs: []uint32{uint32(os.Getegid())}}, nil
		},
		userName:    doctor.UserName,
		groupName:   doctor.GroupName,
		lookupGroup: doctor.LookupGroup,
		timer:       func(context.Context, time.Time) *protocol.Timer { return box.timer },
		meter: diskspace.Meter{Stat: func(p string) (int64, error) {
			switch p {
			case "/var/lib/docker", filepath.Join(dir, "containerd"), state:
				return 50 << 30, nil
			}
			return 0, &fs.PathError{Op: "statfs", Path: p, Err: fs.ErrNotExist}
		}},
		pluginDirs: []string{plugins},
		hostname:   "qa-02",
		now:        time.Now,
	}
	return box
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (b *doctorBox) run1(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var opts doctorOptions
	for _, a := range args {
		if a == "--json" {
			opts.json = true
		}
	}
	var out, errb bytes.Buffer
	g := &cliDeps{configPath: b.cfgPath, stdout: &out, stderr: &errb, getenv: func(k string) string {
		if k == "DOCKER_HOST" {
			return b.doctorHost
		}
		return ""
	}}
	err := runDoctor(context.Background(), opts, g, b.deps)
	code = 0
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		errb.WriteString(ee.err.Error())
	} else if err != nil {
		t.Fatalf("runDoctor returned %v, not an *exitError", err)
	}
	return code, out.String(), errb.String()
}

func TestDoctorAllOK(t *testing.T) {
	box := newDoctorBox(t)
	code, stdout, stderr := box.run1(t)
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 17 {
		t.Errorf("%d lines, want one per check:\n%s", len(lines), stdout)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "OK   ") && !strings.HasPrefix(l, "SKIP ") {
			t.Errorf("line %q", l)
		}
	}
	for _, want := range []string{"SKIP identity       transport system", "OK   tenancy        tenancy at http://127.0.0.1:", "accepted the token", "OK   openbao        https://127.0.0.1:", "verified against CA"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout+stderr, box.token) {
		t.Error("the token was printed")
	}
}

func TestDoctorJSON(t *testing.T) {
	box := newDoctorBox(t)
	code, stdout, _ := box.run1(t, "--json")
	var doc doctor.Document
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s", code, err, stdout)
	}
	if doc.Schema != 1 || !doc.OK || doc.Config != box.cfgPath || len(doc.Checks) != 17 || doc.Checks[0].Name != "config" {
		t.Errorf("document %+v", doc)
	}
}

func TestDoctorFailureExits1(t *testing.T) {
	box := newDoctorBox(t)
	disabled := false
	box.timer.Enabled = &disabled
	code, stdout, stderr := box.run1(t)
	if code != 1 || !strings.Contains(stdout, "FAIL timer") || !strings.Contains(stdout, "— fix: systemctl enable --now monky-deployd.timer") {
		t.Errorf("exit %d\n%s", code, stdout)
	}
	if !strings.Contains(stderr, "1 of 17 checks failed") {
		t.Errorf("stderr %q", stderr)
	}
	// Everything else is still checked and printed.
	if strings.Count(stdout, "\n") != 17 {
		t.Errorf("stdout\n%s", stdout)
	}
}

func TestDoctorJudgesTheAgentsAccount(t *testing.T) {
	cfg, err := config.Parse([]byte("env_id: env-qa-02\ntransport: system\n"), "/etc/monky-deployd/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		self doctor.Account
		flag string
		want string
	}{
		{"root runs doctor: the unit's user", doctor.Account{Name: "root", UID: 0}, "", "monky-deployd"},
		{"the agent's user runs doctor", doctor.Account{Name: "monky-deployd", UID: 998}, "", "monky-deployd"},
		{"a laptop user is their own agent", doctor.Account{Name: "alice", UID: 1000}, "", "alice"},
		{"--user wins", doctor.Account{Name: "root", UID: 0}, "deploy", "deploy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			d := doctorDeps{self: tc.self, lookup: func(name string) (doctor.Account, error) {
				asked = append(asked, name)
				return doctor.Account{}, errors.New("unknown user " + name)
			}}
			env := &doctor.Env{Config: cfg}
			closeFn := fillDoctorEnv(env, doctorOptions{user: tc.flag}, d)
			defer closeFn()
			if len(asked) != 1 || asked[0] != tc.want || env.AgentName != tc.want || env.Agent != nil || env.AgentErr == nil {
				t.Errorf("asked %v, env.AgentName %q, Agent %v, AgentErr %v", asked, env.AgentName, env.Agent, env.AgentErr)
			}
		})
	}
}

// doctor --user NAME run as root: NAME must be an account name, and an account, before anything
// runs (setpriv among it); exit 2 naming the flag.
func TestDoctorUserFlagIsAnAccount(t *testing.T) {
	for _, tc := range []struct{ name, user, want string }{
		{"an option", "--reuid=0", "is not an account name"},
		{"a short option", "-h", "is not an account name"},
		{"a number", "0", "is not an account name"},
		{"a path", "../root", "is not an account name"},
		{"spaces", "monky deployd", "is not an account name"},
		{"no such account", "nosuchagent", "--user nosuchagent: no such account: unknown user nosuchagent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := runnertest.New(t) // no expectation: any command run fails the test
			var asked []string
			d := doctorDeps{runner: run, self: doctor.Account{Name: "root", UID: 0}, lookup: func(name string) (doctor.Account, error) {
				asked = append(asked, name)
				return doctor.Account{}, errors.New("unknown user " + name)
			}}
			var out, errb bytes.Buffer
			g := &cliDeps{configPath: "/nonexistent/config.yaml", stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}
			err := runDoctor(context.Background(), doctorOptions{user: tc.user}, g, d)
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("runDoctor = %v, want exit 2 with %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed checks for a bad --user: %s", out.String())
			}
			if tc.want == "is not an account name" && len(asked) != 0 {
				t.Errorf("looked up %q", asked)
			}
		})
	}
	code, _, stderr := runCLI(t, nil, "doctor", "--user", "--reuid=0")
	if code != 2 || !strings.Contains(stderr, "monky-deployd: doctor: --user \"--reuid=0\" is not an account name") {
		t.Errorf("through the command line: exit %d, stderr %q", code, stderr)
	}
}

func TestDoctorIsRegistered(t *testing.T) {
	code, stdout, _ := runCLI(t, nil, "doctor", "--help")
	if code != 0 || !strings.Contains(stdout, "--json") || !strings.Contains(stdout, "--user") {
		t.Errorf("exit %d: %s", code, stdout)
	}
}

// doctor judges the endpoint the ticks reach — asked of the docker CLI without doctor's
// DOCKER_HOST — and only notes its own DOCKER_HOST when that names another one.
func TestDoctorJudgesTheTicksEndpoint(t *testing.T) {
	box := newDoctorBox(t)
	box.doctorHost = "tcp://127.0.0.1:2375"
	code, stdout, _ := box.run1(t)
	if code != 0 || !strings.Contains(stdout, "doctor's DOCKER_HOST (tcp://127.0.0.1:2375) was set aside: the unit sets none, so ticks connect to "+box.dockerHost) {
		t.Errorf("exit %d\n%s", code, stdout)
	}
	own := 0
	for _, c := range box.run.Calls() {
		if c.Name != "docker" {
			continue
		}
		if v, _ := c.Getenv("DOCKER_HOST"); v == box.doctorHost && c.Args[0] == "context" && own == 0 {
			own++ // the one inspect that resolves doctor's own DOCKER_HOST, for the note
			continue
		}
		if v, ok := c.Getenv("DOCKER_HOST"); !ok || v != "" {
			t.Errorf("%s ran with DOCKER_HOST %q (set %t), not as a tick", c.Cmd, v, ok)
		}
	}
	box = newDoctorBox(t)
	box.dockerHost = "unix://" + filepath.Join(t.TempDir(), "none.sock")
	code, stdout, _ = box.run1(t)
	if code != 1 || !strings.Contains(stdout, "none.sock, where the agent's docker connects, does not exist") {
		t.Errorf("exit %d\n%s", code, stdout)
	}
}

// doctor reads bao.ca_file (and the identity) as the tick does: a FIFO in its place is said at
// once, `not a regular file (fifo)` as the tick says it; os.ReadFile waited for a writer, so the
// doctor an operator ran to see why the tick failed hung on the very file.
func TestDoctorDoesNotWaitOnAFIFO(t *testing.T) {
	box := newDoctorBox(t)
	box.deps.readFile = osDoctorDeps().readFile
	cfg, err := config.Load(box.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	ca := cfg.Bao.CAFile
	must(t, os.Remove(ca))
	must(t, syscall.Mkfifo(ca, 0o600))
	type result struct {
		code   int
		stdout string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, _ := box.run1(t)
		done <- result{code, stdout}
	}()
	select {
	case r := <-done:
		if want := ca + " cannot be read: " + filepath.Base(ca) + ": not a regular file (fifo)"; r.code != 1 || !strings.Contains(r.stdout, want) {
			t.Errorf("doctor (exit %d) lacks %q:\n%s", r.code, want, r.stdout)
		}
		// The fix replaces the file: no mode makes a FIFO a certificate.
		if want := "replace " + ca + " with OpenBao's CA certificate (PEM) as a plain file"; !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "chmod 0644 "+ca) {
			t.Errorf("doctor's fix for a FIFO at bao.ca_file is not %q:\n%s", want, r.stdout)
		}
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(ca, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("doctor still waits on the FIFO at bao.ca_file after 10 s")
	}
}
