package kit

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const (
	grant = "eyJhbGciOiJFUzI1NiJ9.eyJqdGkiOiJncmFudCJ9.grant-signature"
	ott   = "eyJhbGciOiJFUzI1NiJ9.eyJlbSI6Im90dCJ9.ott-signature"
)

func sampleResponse() protocol.KitResponse {
	return protocol.KitResponse{
		EnvID: "env-dev-08", Site: "cbs", Identity: "monky-host.env-dev-08", BootstrapGrant: grant,
		GrantExpiresAt: "2026-12-02T11:00:00Z", PackageVersion: "0.2.0", TenancyService: "monky.tenancy.deploy",
		TenancyPort: 443, BaoAddr: "https://bao.cbs.tikali.net:8200", BaoAuthMount: "jwt-tenancy", BaoRole: "see-env",
	}
}

func sample(t *testing.T) Kit {
	t.Helper()
	r := sampleResponse()
	k := FromResponse(&r, "sdk")
	k.EnrollmentJWT = secret.New(ott)
	k.CreatedAt = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	k.Tool = "fleetctl 0.2.0"
	k.Hostname = "dev-08"
	return k
}

func TestInstallCommand(t *testing.T) {
	k := sample(t)
	// The deploy token reaches curl through stdin and install.sh through the environment: it is
	// in no argv on the box (ps, /proc/<pid>/cmdline), unlike the Python kit's --token "$T".
	// Tenancy's tenancy and OpenBao values travel as install.sh flags: without them install.sh
	// would write its own defaults whatever the kit says.
	want := `printf 'DEPLOY-TOKEN: %s\n' "$MONKY_DEPLOYD_TOKEN" | curl -sSfL --max-redirs 0 -H @- https://scm.tikali.ai/api/v4/projects/tikali%2Fapplications%2Fmonky%2Fmonky-deployd/packages/generic/monky-deployd/0.2.0/install.sh | sudo --preserve-env=MONKY_DEPLOYD_TOKEN bash -s -- --env env-dev-08 --site cbs --bootstrap-file bootstrap.jwt --enrol-jwt ./monky-host.env-dev-08.jwt --transport sdk --tenancy-service monky.tenancy.deploy --tenancy-port 443 --bao-addr https://bao.cbs.tikali.net:8200 --bao-auth-mount jwt-tenancy --bao-role see-env`
	if got := InstallCommand(k); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	k.EnrollmentJWT = secret.Value{}
	k.Transport = ""
	// admin.ParseKit makes an absent tenancy_port 443, so the port is always passed.
	k.TenancyService, k.BaoAddr, k.BaoAuthMount, k.BaoRole = "", "", "", ""
	got := InstallCommand(k)
	for _, flag := range []string{"--enrol-jwt", "--transport", "--tenancy-service", "--bao-"} {
		if strings.Contains(got, flag) {
			t.Errorf("%s given for a value tenancy did not send: %s", flag, got)
		}
	}
}

// TestInstallCommandFlagsExist: every flag the kit's command passes is one install.sh accepts.
func TestInstallCommandFlagsExist(t *testing.T) {
	script := readRepoFile(t, "packaging/install.sh")
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+((?:--[a-z-]+)(?: \| --[a-z-]+)*)\)`).FindAllStringSubmatch(script, -1) {
		for _, f := range strings.Split(m[1], " | ") {
			known[f] = true
		}
	}
	if !known["--env"] || !known["--bao-role"] {
		t.Fatalf("could not read install.sh's flags (found %v)", known)
	}
	for _, f := range regexp.MustCompile(`\s(--[a-z-]+)`).FindAllStringSubmatch(strings.SplitN(InstallCommand(sample(t)), "bash -s --", 2)[1], -1) {
		if !known[f[1]] {
			t.Errorf("the install command passes %s, which install.sh does not know", f[1])
		}
	}
}

// TestDownloadURLsAgree: the kit, install.sh, the ansible role, the upload tool and the docs name
// the same registry URL — the path-encoded project, never the numeric id.
func TestDownloadURLsAgree(t *testing.T) {
	sh := regexp.MustCompile(`(?m)^GITLAB_BASE="([^"]+)"$`).FindStringSubmatch(readRepoFile(t, "packaging/install.sh"))
	if sh == nil || sh[1] != PackageBase {
		t.Errorf("install.sh GITLAB_BASE %q, want %q", sh, PackageBase)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "ansible/roles/monky_deployd/defaults/main.yml")), &defaults); err != nil {
		t.Fatal(err)
	}
	if got := defaults["monky_deployd_gitlab_base_url"]; got != PackageBase {
		t.Errorf("ansible monky_deployd_gitlab_base_url %q, want %q", got, PackageBase)
	}
	up := readRepoFile(t, "packaging/upload/upload.go")
	constant := func(name string) string {
		m := regexp.MustCompile(name + `\s*=\s*"([^"]+)"`).FindStringSubmatch(up)
		if m == nil {
			t.Fatalf("upload.go has no %s", name)
		}
		return m[1]
	}
	if got := constant("defaultGitLabAPI") + "/projects/" + url.PathEscape(constant("defaultGitLabProj")) +
		"/packages/generic/" + constant("packageName"); got != PackageBase {
		t.Errorf("the upload tool publishes to %q, the kit downloads from %q", got, PackageBase)
	}
	for _, doc := range []string{"docs/OPERATIONS.md", "README.md", "ansible/roles/monky_deployd/README.md", "packaging/install.sh"} {
		text := readRepoFile(t, doc)
		for _, u := range regexp.MustCompile(`https://scm\.tikali\.ai/api/v4/projects/[^/\s"]+/packages/generic/[^/\s"]+`).FindAllString(text, -1) {
			if u != PackageBase {
				t.Errorf("%s names %s, want %s", doc, u, PackageBase)
			}
		}
	}
}

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFiles(t *testing.T) {
	k := sample(t)
	files := map[string]File{}
	for _, f := range Files(k) {
		files[f.Name] = f
	}
	want := map[string]os.FileMode{
		"bootstrap.jwt": 0o600, "monky-host.env-dev-08.jwt": 0o600, "install.sh.cmd": 0o644, "host_vars.yml": 0o644, "README.txt": 0o644,
	}
	if len(files) != len(want) {
		t.Fatalf("files %v", keys(files))
	}
	for name, mode := range want {
		if files[name].Mode != mode {
			t.Errorf("%s mode %o, want %o", name, files[name].Mode, mode)
		}
	}
	if string(files["bootstrap.jwt"].Content) != grant+"\n" || string(files["monky-host.env-dev-08.jwt"].Content) != ott+"\n" {
		t.Errorf("secret files hold the wrong thing")
	}
	for _, name := range []string{"install.sh.cmd", "host_vars.yml", "README.txt"} {
		c := string(files[name].Content)
		if strings.Contains(c, grant) || strings.Contains(c, ott) {
			t.Errorf("%s holds a secret", name)
		}
	}

	var vars map[string]any
	if err := yaml.Unmarshal(files["host_vars.yml"].Content, &vars); err != nil {
		t.Fatalf("host_vars.yml is not YAML: %v", err)
	}
	wantVars := map[string]any{
		"monky_deployd_version": "0.2.0", "monky_deployd_env_id": "env-dev-08", "monky_deployd_site": "cbs",
		"monky_deployd_transport": "sdk", "monky_deployd_tenancy_service": "monky.tenancy.deploy", "monky_deployd_tenancy_port": 443,
		"monky_deployd_bao_addr": "https://bao.cbs.tikali.net:8200", "monky_deployd_bao_auth_mount": "jwt-tenancy",
		"monky_deployd_bao_role":        "see-env",
		"monky_deployd_bootstrap_grant": "{{ vault_monky_deployd_bootstrap_grant }}",
		// The role enrols the identity when the box has none, and asserts this is set then.
		"monky_deployd_enrol_jwt":      "{{ vault_monky_deployd_enrol_jwt }}",
		"monky_deployd_download_token": "{{ vault_monky_deployd_download_token }}",
	}
	for k, v := range wantVars {
		if vars[k] != v {
			t.Errorf("%s = %v, want %v", k, vars[k], v)
		}
	}
	if len(vars) != len(wantVars) {
		t.Errorf("vars %v", vars)
	}
	hv := string(files["host_vars.yml"].Content)
	if !strings.Contains(hv, "ansible-vault encrypt_string --stdin-name vault_monky_deployd_enrol_jwt < monky-host.env-dev-08.jwt") {
		t.Errorf("host_vars.yml does not say how to vault the enrolment JWT:\n%s", hv)
	}
	if strings.Contains(hv, "does not enrol") {
		t.Errorf("host_vars.yml claims the role does not enrol:\n%s", hv)
	}
	// Every variable the kit writes is one the role knows.
	var defaults map[string]any
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "ansible/roles/monky_deployd/defaults/main.yml")), &defaults); err != nil {
		t.Fatal(err)
	}
	for name := range vars {
		if _, ok := defaults[name]; !ok {
			t.Errorf("host_vars.yml sets %s, which the role does not define", name)
		}
	}

	// Enrolled already: no enrolment variable, and the comment says the box keeps its identity.
	k.EnrollmentJWT = secret.Value{}
	enrolled := string(hostVars(k))
	if strings.Contains(enrolled, "monky_deployd_enrol_jwt") || !strings.Contains(enrolled, "enrolled already") {
		t.Errorf("host_vars.yml of an enrolled identity:\n%s", enrolled)
	}
	k = sample(t)

	readme := string(files["README.txt"].Content)
	for _, s := range []string{"dev-08", "2026-12-02T11:00:00Z", InstallCommand(k), "supersedes every earlier bootstrap grant",
		"fleetctl onboard env-dev-08 --site cbs --reissue"} {
		if !strings.Contains(readme, s) {
			t.Errorf("README lacks %q", s)
		}
	}
}

func TestPrepareAndCommit(t *testing.T) {
	// A tight umask must not narrow the 0644 files: the modes are part of the kit.
	old := umask(0o077)
	defer umask(old)
	dir := filepath.Join(t.TempDir(), "kits")
	k := sample(t)

	st, err := Prepare(dir, k.EnvID, false)
	if err != nil {
		t.Fatal(err)
	}
	path, err := st.Commit(k)
	if err != nil {
		t.Fatal(err)
	}
	checkModes(t, path)
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o700 {
		t.Errorf("kit dir mode %o, want 0700", fi.Mode().Perm())
	}

	if _, err := Prepare(dir, k.EnvID, false); !errors.Is(err, ErrExists) || !strings.Contains(err.Error(), "--reissue") {
		t.Fatalf("second kit without --reissue: %v", err)
	}

	st, err = Prepare(dir, k.EnvID, true)
	if err != nil {
		t.Fatal(err)
	}
	k.Grant = secret.New("eyJ.second.grant")
	k.EnrollmentJWT = secret.Value{}
	k.Reissued = true
	if _, err := st.Commit(k); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(path, "bootstrap.jwt"))
	if string(b) != "eyJ.second.grant\n" {
		t.Errorf("reissued grant %q", b)
	}
	if _, err := os.Stat(filepath.Join(path, "monky-host.env-dev-08.jwt")); !os.IsNotExist(err) {
		t.Errorf("the old enrolment token survived the reissue")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("leftovers in %s: %v", dir, entries)
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	st, err := Prepare(dir, "env-x", false)
	if err != nil {
		t.Fatal(err)
	}
	st.Abort()
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left %v", entries)
	}
}

// An output directory no kit can be written to is refused before the reveal. A regular file
// where a directory must be (ENOTDIR) stops root too, which CI is; permission bits stop the rest.
func TestPrepareUnwritable(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{file, filepath.Join(file, "kits")} {
		st, err := Prepare(out, "env-x", false)
		if err == nil {
			st.Abort()
			t.Fatalf("output directory %s (a file on its path) was accepted before the reveal", out)
		}
		if !errors.Is(err, syscall.ENOTDIR) || !strings.Contains(err.Error(), out) {
			t.Errorf("Prepare(%s) = %v, want ENOTDIR naming the path", out, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("Prepare left %v", entries)
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(ro, 0o700)
		if _, err := Prepare(filepath.Join(ro, "kits"), "env-x", false); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("an output directory under a read-only one: %v, want a permission error", err)
		}
	}
}

func checkModes(t *testing.T, dir string) {
	t.Helper()
	want := map[string]os.FileMode{"bootstrap.jwt": 0o600, "monky-host.env-dev-08.jwt": 0o600, "install.sh.cmd": 0o644, "host_vars.yml": 0o644, "README.txt": 0o644}
	for name, mode := range want {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s mode %o, want %o", name, fi.Mode().Perm(), mode)
		}
	}
}

func keys(m map[string]File) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
