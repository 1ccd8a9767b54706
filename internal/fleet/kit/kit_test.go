package kit

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
)

const (
	grant = "eyJhbGciOiJFUzI1NiJ9.eyJqdGkiOiJncmFudCJ9.grant-signature"
	ott   = "eyJhbGciOiJFUzI1NiJ9.eyJlbSI6Im90dCJ9.ott-signature"
)

func sample(t *testing.T) Kit {
	t.Helper()
	k, err := FromResponse(&protocol.KitResponse{
		EnvID: "env-dev-08", Site: "cbs", Identity: "monky-host.env-dev-08", BootstrapGrant: grant,
		GrantExpiresAt: "2026-12-02T11:00:00Z", PackageVersion: "0.2.0", TenancyService: "monky.tenancy.deploy",
		TenancyPort: 443, BaoAddr: "https://bao.cbs.tikali.net:8200", BaoAuthMount: "jwt-tenancy", BaoRole: "see-env",
	}, "sdk")
	if err != nil {
		t.Fatal(err)
	}
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
	want := `printf 'DEPLOY-TOKEN: %s\n' "$MONKY_DEPLOYD_TOKEN" | curl -sSf -H @- https://scm.tikali.ai/api/v4/projects/69/packages/generic/monky-deployd/0.2.0/install.sh | sudo --preserve-env=MONKY_DEPLOYD_TOKEN bash -s -- --env env-dev-08 --site cbs --bootstrap-file bootstrap.jwt --enrol-jwt ./monky-host.env-dev-08.jwt --transport sdk`
	if got := InstallCommand(k); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	k.EnrollmentJWT = secret.Value{}
	k.Transport = ""
	if got := InstallCommand(k); strings.Contains(got, "--enrol-jwt") || strings.Contains(got, "--transport") {
		t.Errorf("enrolled identity, no transport: %s", got)
	}
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
		"monky_deployd_transport": "sdk", "monky_deployd_tenancy_port": 443,
		"monky_deployd_bao_addr": "https://bao.cbs.tikali.net:8200", "monky_deployd_bao_auth_mount": "jwt-tenancy",
		"monky_deployd_bao_role":        "see-env",
		"monky_deployd_bootstrap_grant": "{{ vault_monky_deployd_bootstrap_grant }}",
		"monky_deployd_download_token":  "{{ vault_monky_deployd_download_token }}",
	}
	for k, v := range wantVars {
		if vars[k] != v {
			t.Errorf("%s = %v, want %v", k, vars[k], v)
		}
	}
	if len(vars) != len(wantVars) {
		t.Errorf("vars %v", vars)
	}

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

func TestPrepareUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes anywhere: permission bits cannot be tested")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	if _, err := Prepare(filepath.Join(dir, "kits"), "env-x", false); err == nil {
		t.Fatal("an unwritable output directory was accepted before the reveal")
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
