//go:build integration

package debtest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/kit"
)

const (
	deployToken = "gldt-Dep10yT0ken-s3cr3t"
	wrongToken  = "gldt-WrongT0ken-s3cr3t"
	// A syntactically valid JWT (three base64url segments); nobody verifies it here.
	bootstrapJWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhZ2VudDplbnYtcWEtMDIiLCJraW5kIjoiZGVwbG95LWdyYW50In0.c2lnbmF0dXJl"
	envID        = "env-qa-02"
	identityDir  = "/opt/openziti/etc/identities"
	identityPath = identityDir + "/monky-host." + envID + ".json"
)

// registry serves the .deb the way GitLab's generic package registry does for install.sh: only
// with the right DEPLOY-TOKEN header.
type registry struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []string // path + " " + outcome
	// redirect, when set, makes the registry answer a good download the way GitLab with object
	// storage does: 302 to this base URL (another host:port) + the path.
	redirect string
}

// storage stands in for the object storage GitLab redirects a package download to: it serves
// the file without asking for a token, and records every DEPLOY-TOKEN header it is sent.
type storage struct {
	srv    *httptest.Server
	mu     sync.Mutex
	hits   int
	tokens []string
}

func newStorage(t *testing.T, deb string) *storage {
	t.Helper()
	s := &storage{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		s.mu.Lock()
		s.hits++
		if v := req.Header.Values("Deploy-Token"); len(v) > 0 {
			s.tokens = append(s.tokens, v...)
		}
		s.mu.Unlock()
		http.ServeFile(w, req, deb)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func newRegistry(t *testing.T, version, deb string) *registry {
	t.Helper()
	r := &registry{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		outcome := "200"
		defer func() {
			r.mu.Lock()
			r.hits = append(r.hits, req.URL.Path+" "+outcome)
			r.mu.Unlock()
		}()
		if req.Header.Get("Deploy-Token") != deployToken {
			outcome = "401"
			http.Error(w, `{"message":"401 Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		if req.URL.Path != fmt.Sprintf("/generic/monky-deployd/%s/monky-deployd_%s_amd64.deb", version, version) {
			outcome = "404"
			http.NotFound(w, req)
			return
		}
		r.mu.Lock()
		redirect := r.redirect
		r.mu.Unlock()
		if redirect != "" {
			outcome = "302"
			http.Redirect(w, req, redirect+req.URL.Path+"?X-Amz-Signature=stand-in", http.StatusFound)
			return
		}
		http.ServeFile(w, req, deb)
	}))
	r.srv.Listener = ln
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

func (r *registry) base() string { return r.srv.URL + "/generic/monky-deployd" }

// redirectedTo checks that the registry answered with a redirect (else a test of what follows
// one proves nothing) and returns how often the storage host was asked, and with the token.
func (r *registry) redirectedTo(t *testing.T, store *storage) (hits, withToken int) {
	t.Helper()
	r.mu.Lock()
	seen := strings.Join(r.hits, ", ")
	r.mu.Unlock()
	if !strings.Contains(seen, " 302") {
		t.Fatalf("the registry did not redirect (%s): the test proves nothing", seen)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	return store.hits, len(store.tokens)
}

func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.hits)
}

// installBox is a chroot with docker and ziti (user and group), the tunneller's identity
// directory, the kit's files under /root/kit, and the stamped install.sh at /root/install.sh.
func installBox(t *testing.T) *box {
	t.Helper()
	a := build(t)
	b := newBox(t, boxOptions{groups: []string{"docker", "ziti"}, users: []string{"ziti"}, forShell: true})
	zitiUID, zitiGID := b.id("passwd", "ziti"), b.id("group", "ziti")
	for _, d := range []string{"/opt/openziti", "/opt/openziti/etc", identityDir} {
		if err := os.MkdirAll(b.path(d), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(b.path(d), zitiUID, zitiGID); err != nil {
			t.Fatal(err)
		}
	}
	b.write("/root/kit/bootstrap.jwt", bootstrapJWT+"\n", 0o600)
	b.write("/root/kit/monky-host."+envID+".jwt", "eyJhbGciOiJSUzI1NiJ9.eyJlbSI6Im90dCJ9.c2ln\n", 0o600)
	b.write("/root/kit/openbao-ca.pem", "-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n", 0o644)
	b.write("/root/kit/token", wrongToken+"\n", 0o600)
	copyFile(t, a.installSh, b.path("/root/install.sh"), 0o755)
	return b
}

// installSh runs install.sh inside the box under bash, as `curl … | sudo bash -s --` would.
func (b *box) installSh(extraEnv []string, args ...string) (string, error) {
	b.t.Helper()
	return run(b.t, "", b.env(extraEnv...), "chroot", append([]string{b.dir, "/bin/bash", "/root/install.sh"}, args...)...)
}

// tokenFree fails the test when a token appears in out or in any file the run left in the box
// outside the kit (logs of every stand-in, config, state, temp files).
func (b *box) tokenFree(t *testing.T, out string) {
	t.Helper()
	for _, tok := range []string{deployToken, wrongToken} {
		if strings.Contains(out, tok) {
			t.Errorf("install.sh printed a deploy token:\n%s", out)
		}
	}
	for _, dir := range []string{"etc", "var", "tmp", "run", "opt"} {
		filepath.Walk(b.path(dir), func(p string, info os.FileInfo, err error) error {
			if err != nil || !info.Mode().IsRegular() || info.Size() > 1<<20 {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, tok := range []string{deployToken, wrongToken} {
				if strings.Contains(string(data), tok) {
					t.Errorf("%s holds a deploy token", strings.TrimPrefix(p, b.dir))
				}
			}
			return nil
		})
	}
}

func readYAML(t *testing.T, text string) map[string]string {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("config is not YAML: %v\n%s", err, text)
	}
	out := map[string]string{}
	flatten("", doc, out)
	return out
}

func TestInstallScript(t *testing.T) {
	a := build(t)
	b := installBox(t)
	reg := newRegistry(t, a.version, a.deb)
	env := []string{"MONKY_DEPLOYD_BASE_URL=" + reg.base()}
	var gid, uid int

	ok := t.Run("first install", func(t *testing.T) {
		b := b.with(t)
		out, err := b.installSh(env, "--env", envID, "--site", "cbs", "--token", deployToken,
			"--bootstrap-file", "/root/kit/bootstrap.jwt", "--enrol-jwt", "/root/kit/monky-host."+envID+".jwt",
			"--bao-ca", "/root/kit/openbao-ca.pem")
		if err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		t.Logf("install.sh said:\n%s", out)
		b.tokenFree(t, out)
		gid, uid = b.id("group", "monky-deployd"), b.id("passwd", "monky-deployd")
		zitiUID, zitiGID := b.id("passwd", "ziti"), b.id("group", "ziti")

		if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
			t.Errorf("package status %q", got)
		}
		assertMode(t, b, "/etc/monky-deployd", 0o770, 0, gid)
		assertMode(t, b, "/etc/monky-deployd/config.yaml", 0o640, 0, gid)
		assertMode(t, b, "/etc/monky-deployd/bootstrap.jwt", 0o600, uid, gid)
		assertMode(t, b, "/etc/monky-deployd/openbao-ca.pem", 0o644, 0, 0)
		assertMode(t, b, "/var/lib/monky-deployd", 0o700, uid, gid)
		// Transport sdk: the agent renews the certificate, so it owns the file and may create files
		// beside it (issue 21); the ziti group keeps its read.
		assertMode(t, b, identityPath, 0o640, uid, zitiGID)
		if st, err := os.Stat(b.path(identityDir)); err != nil || st.Mode().Perm()&0o070 != 0o070 {
			t.Errorf("%s: %v, mode %v: want group ziti to rwx it", identityDir, err, st.Mode())
		}
		_ = zitiUID
		if got := strings.TrimSpace(b.read("/etc/monky-deployd/bootstrap.jwt")); got != bootstrapJWT {
			t.Error("the staged bootstrap grant differs from the kit's")
		}
		for _, g := range []string{"docker", "ziti"} {
			if !contains(b.members(g), "monky-deployd") {
				t.Errorf("monky-deployd is not in group %s", g)
			}
		}
		cfg := readYAML(t, b.read("/etc/monky-deployd/config.yaml"))
		want := map[string]string{"env_id": envID, "site": "cbs", "transport": "sdk", "identity": identityPath,
			"laptop_mode": "false", "tenancy.service": "monky.tenancy.deploy", "tenancy.port": "443",
			"bao.addr": "https://bao.cbs.tikali.net:8200", "bao.auth_mount": "jwt-tenancy", "bao.role": "see-env"}
		// The kit owns only these keys (monky-deployd config merge, issue 23): disk.* and every
		// other key keep the agent's defaults until an operator sets them.
		if fmt.Sprint(cfg) != fmt.Sprint(want) {
			t.Errorf("config:\n%v\nwant:\n%v", cfg, want)
		}
		known := exampleConfig(t)
		for k := range cfg {
			if _, ok := known[k]; !ok {
				t.Errorf("install.sh wrote key %s, which the agent does not know", k)
			}
		}
		wantACL := []string{
			"-P -m u:monky-deployd:r " + identityPath,
			"-P -m u:monky-deployd:rx " + identityDir,
			"-P -d -m u:monky-deployd:r " + identityDir,
			"-P -m u:monky-deployd:x /opt/openziti/etc",
			"-P -m u:monky-deployd:x /opt/openziti",
		}
		if got := b.calls("setfacl"); strings.Join(got, "\n") != strings.Join(wantACL, "\n") {
			t.Errorf("setfacl calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantACL, "\n"))
		}
		if got := b.calls("ziti-edge-tunnel"); len(got) != 1 || got[0] != "enroll --jwt /root/kit/monky-host."+envID+".jwt --identity "+identityPath {
			t.Errorf("ziti-edge-tunnel calls %q", got)
		}
		if !b.enabled(timer) || !b.active(timer) {
			t.Errorf("timer not enabled and started; systemctl calls %q", b.calls("systemctl"))
		}
		if b.enabled(proxy) {
			t.Error("transport sdk enabled the proxy unit")
		}
		if calls := b.calls("apt-get"); len(calls) != 0 {
			t.Errorf("apt-get called although everything was present: %q", calls)
		}
		if reg.count() != 1 {
			t.Errorf("registry hits %q, want one download", reg.hits)
		}
		for _, c := range b.calls("curl") {
			if !strings.Contains(c, "-H @") {
				t.Errorf("curl got its header on the command line: %q", c)
			}
		}
		for _, want := range []string{"installed monky-deployd " + a.version, "enrolled ziti identity", "monky-deployd is in group ziti",
			"wrote /etc/monky-deployd/config.yaml", "staged the bootstrap grant", "enabled and started monky-deployd.timer"} {
			if !strings.Contains(out, want) {
				t.Errorf("install.sh did not report %q:\n%s", want, out)
			}
		}
		if left, _ := filepath.Glob(b.path("tmp/tmp.*")); len(left) != 0 {
			t.Errorf("install.sh left temp files: %q", left)
		}
	})

	if !ok {
		return
	}
	t.Run("re-run switches to the proxy transport", func(t *testing.T) {
		b := b.with(t)
		before := b.read("/etc/monky-deployd/config.yaml")
		hits := reg.count()
		b.clearCalls()
		out, err := b.installSh(append(env, "MONKY_DEPLOYD_TOKEN="+deployToken), "--env", envID, "--site", "cbs",
			"--transport", "proxy", "--laptop", "--version", a.version)
		if err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		b.tokenFree(t, out)
		if reg.count() != hits {
			t.Error("the installed version was downloaded again")
		}
		if got := b.read("/etc/monky-deployd/config.yaml.prev"); got != before {
			t.Error("the previous config was not kept as config.yaml.prev")
		}
		cfg := readYAML(t, b.read("/etc/monky-deployd/config.yaml"))
		if cfg["transport"] != "proxy" || cfg["laptop_mode"] != "true" {
			t.Errorf("config after the re-run: %v", cfg)
		}
		assertMode(t, b, "/etc/monky-deployd/config.yaml", 0o640, 0, gid)
		if !b.enabled(proxy) || !b.active(proxy) || !b.enabled(timer) {
			t.Errorf("proxy %v/%v timer %v; calls %q", b.enabled(proxy), b.active(proxy), b.enabled(timer), b.calls("systemctl"))
		}
		if calls := b.calls("ziti-edge-tunnel"); len(calls) != 0 {
			t.Errorf("an enrolled identity was enrolled again: %q", calls)
		}
	})

	t.Run("docker data-root", func(t *testing.T) {
		b := b.with(t)
		args := []string{"--env", envID, "--site", "cbs", "--transport", "proxy", "--laptop", "--version", a.version}
		out, err := b.installSh(env, append(args, "--docker-data-root", "/srv/docker-data")...)
		if err != nil {
			t.Fatalf("install.sh: %v\n%s", err, out)
		}
		if got := b.read("/etc/docker/daemon.json"); !strings.Contains(got, `"data-root": "/srv/docker-data"`) {
			t.Errorf("daemon.json: %q", got)
		}
		assertMode(t, b, "/srv/docker-data", 0o711, 0, 0)
		out, err = b.installSh(env, append(args, "--docker-data-root", "/elsewhere")...)
		if err == nil || !strings.Contains(out, "already sets another data-root") {
			t.Errorf("moving an existing data-root was not refused: %v\n%s", err, out)
		}
	})

	t.Run("a missing compose plugin is installed with apt", func(t *testing.T) {
		b := b.with(t)
		b.write("/etc/standin-no-compose", "", 0o644)
		defer b.remove("/etc/standin-no-compose")
		b.clearCalls()
		out, err := b.installSh(env, "--env", envID, "--site", "cbs", "--version", a.version)
		// The fix names where a Debian box gets compose v2 (issue 20), as doctor's does.
		if err == nil || !strings.Contains(out, "could not install docker compose v2: add Docker's apt repository (download.docker.com/linux/debian) for docker-compose-plugin, or use a Debian release whose own docker-compose is v2") {
			t.Errorf("err %v\n%s", err, out)
		}
		if calls := b.calls("apt-get"); !containsPrefix(calls, "install -y -qq docker-compose-plugin") {
			t.Errorf("apt-get calls %q", calls)
		}
		if !b.enabled(timer) {
			t.Error("a failed re-run switched the timer off")
		}
	})

	t.Run("a refused download names the token, not its value", func(t *testing.T) {
		b := b.with(t)
		out, err := b.installSh(env, "--env", envID, "--site", "cbs", "--token-file", "/root/kit/token", "--version", "9.9.9")
		if err == nil {
			t.Fatalf("install.sh succeeded with a wrong token:\n%s", out)
		}
		if !strings.Contains(out, "HTTP 401") || !strings.Contains(out, "deploy token") {
			t.Errorf("the refusal does not explain itself:\n%s", out)
		}
		b.tokenFree(t, out)
	})

	t.Run("the kit's tenancy and OpenBao values reach the config", func(t *testing.T) {
		b := b.with(t)
		// The command the kit writes, run from the kit directory as README.txt says: its flags,
		// not install.sh's defaults, end up in config.yaml.
		k := kit.Kit{EnvID: envID, Site: "cbs", PackageVersion: a.version, Transport: "sdk",
			TenancyService: "monky.tenancy.qa", TenancyPort: 8443, BaoAddr: "https://bao.qa.tikali.net:8300",
			BaoAuthMount: "jwt-tenancy-qa", BaoRole: "see-env-qa"}
		args := strings.Fields(strings.SplitN(kit.InstallCommand(k), " bash -s -- ", 2)[1])
		argv := append([]string{b.dir, "/bin/sh", "-c", `cd /root/kit && exec /bin/bash /root/install.sh "$@"`, "install.sh"},
			append(args, "--version", a.version)...)
		out, err := run(t, "", b.env(env...), "chroot", argv...)
		if err != nil {
			t.Fatalf("install.sh %q: %v\n%s", args, err, out)
		}
		cfg := readYAML(t, b.read("/etc/monky-deployd/config.yaml"))
		for key, want := range map[string]string{"tenancy.service": "monky.tenancy.qa", "tenancy.port": "8443",
			"bao.addr": "https://bao.qa.tikali.net:8300", "bao.auth_mount": "jwt-tenancy-qa", "bao.role": "see-env-qa"} {
			if cfg[key] != want {
				t.Errorf("config %s = %q, want %q (from the kit's command)", key, cfg[key], want)
			}
		}
		known := exampleConfig(t)
		for key := range cfg {
			if _, ok := known[key]; !ok {
				t.Errorf("install.sh wrote key %s, which the agent does not know", key)
			}
		}
	})

	t.Run("bad arguments", func(t *testing.T) {
		b := b.with(t)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--site", "cbs"}, "--env"},
			{[]string{"--env", "../etc", "--site", "cbs"}, "--env"},
			{[]string{"--env", envID, "--site", "cbs", "--transport", "carrier-pigeon"}, "--transport"},
			{[]string{"--env", envID, "--site", "cbs", "--source", "ftp"}, "--source"},
			{[]string{"--env", envID, "--site", "cbs", "--bogus"}, "unknown argument"},
			{[]string{"--env", envID, "--site", "cbs", "--bootstrap-file", "/root/kit/openbao-ca.pem"}, "does not hold a JWT"},
			{[]string{"--env", envID, "--site", "cbs", "--token", "bad token;rm"}, "characters a token never has"},
			{[]string{"--env", envID, "--site", "cbs", "--tenancy-service", "a b"}, "--tenancy-service"},
			{[]string{"--env", envID, "--site", "cbs", "--tenancy-port", "70000"}, "--tenancy-port"},
			{[]string{"--env", envID, "--site", "cbs", "--tenancy-port", "0"}, "--tenancy-port"},
			{[]string{"--env", envID, "--site", "cbs", "--bao-addr", "bao.example:8200"}, "--bao-addr"},
			{[]string{"--env", envID, "--site", "cbs", "--bao-addr", "https://bao.example/v1"}, "--bao-addr"},
			{[]string{"--env", envID, "--site", "cbs", "--bao-auth-mount", "jwt\nrole: x"}, "--bao-auth-mount"},
			{[]string{"--env", envID, "--site", "cbs", "--bao-role", "see-env: x"}, "--bao-role"},
		} {
			out, err := b.installSh(env, tc.args...)
			if err == nil || !strings.Contains(out, tc.want) {
				t.Errorf("install.sh %q: err %v, output %q (want it to mention %q)", tc.args, err, out, tc.want)
			}
			if strings.Contains(out, "bad token;rm") {
				t.Errorf("install.sh echoed a token: %q", out)
			}
		}
	})
}

// TestInstallScriptUnstamped: packaging/install.sh straight from the repository knows no version.
func TestInstallScriptUnstamped(t *testing.T) {
	b := installBox(t)
	copyFile(t, filepath.Join(repoRoot(t), "packaging", "install.sh"), b.path("/root/install.sh"), 0o755)
	out, err := b.installSh(nil, "--env", envID, "--site", "cbs")
	if err == nil || !strings.Contains(out, "unstamped") {
		t.Errorf("err %v, output %q", err, out)
	}
}

// TestAnsibleTemplateMatchesInstallScript: the role and install.sh write the same config. Both
// hand their keys to `monky-deployd config merge` (issue 23): the role renders kit.yaml.j2, so
// the test renders it with ansible for the inputs install.sh was given, merges it with the
// box's monky-deployd into a box without a config, as the role's first run does, and compares
// that with install.sh's config key by key.
func TestAnsibleTemplateMatchesInstallScript(t *testing.T) {
	a := build(t)
	ansible := need(t, "ansible")
	b := installBox(t)
	reg := newRegistry(t, a.version, a.deb)
	out, err := b.installSh([]string{"MONKY_DEPLOYD_BASE_URL=" + reg.base(), "MONKY_DEPLOYD_TOKEN=" + deployToken},
		"--env", envID, "--site", "cbs", "--transport", "proxy", "--enrol-jwt", "/root/kit/monky-host."+envID+".jwt")
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	fromScript := readYAML(t, b.read("/etc/monky-deployd/config.yaml"))

	root := repoRoot(t)
	dest := filepath.Join(t.TempDir(), "kit.yaml")
	vars := fmt.Sprintf(`{"monky_deployd_env_id": %q, "monky_deployd_site": "cbs", "monky_deployd_transport": "proxy"}`, envID)
	res, err := run(t, root, append(os.Environ(), "ANSIBLE_LOCALHOST_WARNING=false", "ANSIBLE_INVENTORY_UNPARSED_WARNING=false"),
		ansible, "localhost", "-c", "local", "-i", "localhost,", "-m", "ansible.builtin.template",
		"-a", "src="+filepath.Join(root, "ansible/roles/monky_deployd/templates/kit.yaml.j2")+" dest="+dest,
		"-e", "@"+filepath.Join(root, "ansible/roles/monky_deployd/defaults/main.yml"), "-e", vars)
	if err != nil {
		t.Fatalf("ansible template: %v\n%s", err, res)
	}
	b.write("/root/role-kit.yaml", readAll(t, dest), 0o600)
	b.mustSh("monky-deployd --config /root/role-config.yaml config merge --kit /root/role-kit.yaml >/root/role-merged.yaml")
	fromRole := readYAML(t, b.read("/root/role-merged.yaml"))
	if len(fromRole) == 0 {
		t.Fatal("the role's merged config is empty: the comparison proves nothing")
	}
	var diff []string
	for k, v := range fromScript {
		if fromRole[k] != v {
			diff = append(diff, fmt.Sprintf("%s: install.sh %q, ansible %q", k, v, fromRole[k]))
		}
	}
	for k, v := range fromRole {
		if _, ok := fromScript[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: only ansible writes it (%q)", k, v))
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Errorf("install.sh and the ansible role write different configs:\n%s", strings.Join(diff, "\n"))
	}
}

// TestInstallScriptRedirectKeepsTheToken: GitLab answers a package download with a redirect to
// its object storage. The .deb is fetched from there, and the deploy token goes to the registry
// only — curl -L would have sent it to the storage host as well.
func TestInstallScriptRedirectKeepsTheToken(t *testing.T) {
	a := build(t)
	b := installBox(t)
	reg := newRegistry(t, a.version, a.deb)
	store := newStorage(t, a.deb)
	reg.redirect = store.srv.URL
	out, err := b.installSh([]string{"MONKY_DEPLOYD_BASE_URL=" + reg.base(), "MONKY_DEPLOYD_TOKEN=" + deployToken},
		"--env", envID, "--site", "cbs", "--version", a.version, "--enrol-jwt", "/root/kit/monky-host."+envID+".jwt")
	if err != nil {
		t.Fatalf("install.sh: %v\n%s", err, out)
	}
	b.tokenFree(t, out)
	if got := b.packageStatus("monky-deployd"); got != "ii "+a.version {
		t.Errorf("package status %q after a redirected download", got)
	}
	hits, withToken := reg.redirectedTo(t, store)
	if hits != 1 {
		t.Errorf("storage hits %d, want the one redirected download", hits)
	}
	if withToken != 0 {
		t.Errorf("the deploy token was sent to the storage host the registry redirected to (%d times)", withToken)
	}
}

// The kit's one-liner fetches install.sh with the deploy token. curl sends a -H header to every
// host a redirect leads to, so the one-liner must not follow one: a registry that redirects
// install.sh to object storage makes curl fail loudly (exit 47), instead of leaking the token, or
// piping an empty body into bash, which would install nothing and exit 0.
func TestKitCommandRefusesARedirect(t *testing.T) {
	curl := need(t, "curl")
	bash := need(t, "bash")
	var mu sync.Mutex
	storageTokens, storageHits := 0, 0
	storage := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		storageHits++
		if r.Header.Get("DEPLOY-TOKEN") != "" {
			storageTokens++
		}
		fmt.Fprintln(w, "echo installed-from-storage")
	}))
	defer storage.Close()
	for _, tc := range []struct {
		name     string
		redirect bool
	}{{"served directly", false}, {"redirected to storage", true}} {
		t.Run(tc.name, func(t *testing.T) {
			registry := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("DEPLOY-TOKEN") != deployToken {
					http.Error(w, "401 Unauthorized", http.StatusUnauthorized)
					return
				}
				if tc.redirect {
					http.Redirect(w, r, storage.URL+"/bucket/install.sh?X-Amz-Signature=abc", http.StatusFound)
					return
				}
				fmt.Fprintln(w, `echo "installed-from-registry $*"`)
			}))
			defer registry.Close()
			cmd := kit.InstallCommand(kit.Kit{EnvID: envID, Site: "cbs", PackageVersion: "0.2.0"})
			cmd = strings.Replace(cmd, kit.PackageBase, registry.URL, 1)
			// No sudo in the test: the agent's install is what debtest's other tests cover.
			cmd = strings.Replace(cmd, "sudo --preserve-env="+kit.TokenVar+" bash", bash, 1)
			script := "set -o pipefail\n" + cmd
			c := exec.Command(bash, "-c", script)
			c.Env = append(os.Environ(), kit.TokenVar+"="+deployToken, "PATH="+filepath.Dir(curl)+":"+os.Getenv("PATH"))
			out, err := c.CombinedOutput()
			if strings.Contains(string(out), deployToken) {
				t.Fatal("the token is in the command's output")
			}
			if !tc.redirect {
				if err != nil || !strings.Contains(string(out), "installed-from-registry --env "+envID) {
					t.Fatalf("direct download: %v\n%s", err, out)
				}
				return
			}
			if err == nil || !strings.Contains(string(out), "curl: (47)") {
				t.Errorf("a redirected install.sh did not fail the command loudly: err %v\n%s", err, out)
			}
			mu.Lock()
			defer mu.Unlock()
			if storageHits != 0 || storageTokens != 0 {
				t.Errorf("the redirect was followed (%d hits, %d with the token)", storageHits, storageTokens)
			}
		})
	}
}
