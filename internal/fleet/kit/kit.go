// Package kit writes one backend's install kit: grant and enrolment token (0600), the install
// command, ansible host variables (vault placeholders for secrets) and a README.
package kit

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// ErrExists: the kit directory is there already and --reissue was not given.
var ErrExists = errors.New("kit exists")

// PackageBase is the project's private GitLab package registry; a test holds it equal to
// install.sh's GITLAB_BASE and the ansible role's monky_deployd_gitlab_base_url.
const PackageBase = "https://scm.tikali.ai/api/v4/projects/tikali%2Fapplications%2Fmonky%2Fmonky-deployd/packages/generic/monky-deployd"

// PackageURL is where install.sh of release version is published.
func PackageURL(version string) string { return PackageBase + "/" + version + "/install.sh" }

// Kit is everything written for one backend.
type Kit struct {
	EnvID          string
	Site           string
	Transport      string
	PackageVersion string
	TenancyService string
	TenancyPort    int
	BaoAddr        string
	BaoAuthMount   string
	BaoRole        string
	Grant          secret.Value
	GrantExpiresAt time.Time
	// EnrollmentJWT is empty when the identity is enrolled already (the box keeps it).
	EnrollmentJWT secret.Value
	// Hostname is the box, when tenancy or the controller know it.
	Hostname string
	// Reissued is true when this kit replaced an earlier one.
	Reissued  bool
	CreatedAt time.Time
	// Tool names what wrote the kit ("fleetctl 0.2.0").
	Tool string
}

// FromResponse fills a Kit from an answer admin.ParseKit accepted (the one check of its values).
func FromResponse(r *protocol.KitResponse, transport string) Kit {
	exp, _ := time.Parse(time.RFC3339, r.GrantExpiresAt) // ParseKit checked it
	return Kit{
		EnvID: r.EnvID, Site: r.Site, Transport: transport, PackageVersion: r.PackageVersion,
		TenancyService: r.TenancyService, TenancyPort: r.TenancyPort,
		BaoAddr: r.BaoAddr, BaoAuthMount: r.BaoAuthMount, BaoRole: r.BaoRole,
		Grant: secret.New(r.BootstrapGrant), GrantExpiresAt: exp.UTC(),
	}
}

// File is one file of the kit.
type File struct {
	Name    string
	Mode    fs.FileMode
	Content []byte
}

// Names of the kit's files.
const (
	GrantFile   = "bootstrap.jwt"
	CommandFile = "install.sh.cmd"
	VarsFile    = "host_vars.yml"
	ReadmeFile  = "README.txt"
)

// EnrollmentFile is the name of the ziti enrolment token file.
func EnrollmentFile(env string) string { return "monky-host." + env + ".jwt" }

// TokenVar is the environment variable the install command reads the deploy token from.
const TokenVar = "MONKY_DEPLOYD_TOKEN"

// InstallCommand is the line to run in the kit directory with TokenVar exported. The token is in
// no file and no argv: curl reads its header from stdin (printf is a builtin), install.sh the env.
func InstallCommand(k Kit) string {
	args := []string{"--env", k.EnvID, "--site", k.Site, "--bootstrap-file", GrantFile}
	if !k.EnrollmentJWT.Empty() {
		args = append(args, "--enrol-jwt", "./"+EnrollmentFile(k.EnvID))
	}
	if k.Transport != "" {
		args = append(args, "--transport", k.Transport)
	}
	// Tenancy's values for this backend; install.sh's defaults apply to what tenancy left out.
	for _, o := range []struct{ flag, value string }{
		{"--tenancy-service", k.TenancyService},
		{"--tenancy-port", strconv.Itoa(k.TenancyPort)},
		{"--bao-addr", k.BaoAddr},
		{"--bao-auth-mount", k.BaoAuthMount},
		{"--bao-role", k.BaoRole},
	} {
		if o.value != "" {
			args = append(args, o.flag, o.value)
		}
	}
	return `printf 'DEPLOY-TOKEN: %s\n' "$` + TokenVar + `" | curl -sSfL --max-redirs 0 -H @- ` + PackageURL(k.PackageVersion) +
		` | sudo --preserve-env=` + TokenVar + ` bash -s -- ` + strings.Join(args, " ")
}

// Files renders the kit.
func Files(k Kit) []File {
	files := []File{{Name: GrantFile, Mode: 0o600, Content: []byte(k.Grant.Reveal() + "\n")}}
	if !k.EnrollmentJWT.Empty() {
		files = append(files, File{Name: EnrollmentFile(k.EnvID), Mode: 0o600, Content: []byte(k.EnrollmentJWT.Reveal() + "\n")})
	}
	return append(files,
		File{Name: CommandFile, Mode: 0o644, Content: []byte(InstallCommand(k) + "\n")},
		File{Name: VarsFile, Mode: 0o644, Content: hostVars(k)},
		File{Name: ReadmeFile, Mode: 0o644, Content: readme(k)},
	)
}

func q(s string) string {
	b, _ := json.Marshal(s) // a JSON string is a valid YAML double-quoted scalar
	return string(b)
}

func hostVars(k Kit) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "# host_vars of the backend box of %s (site %s) for the ansible role monky_deployd.\n", k.EnvID, k.Site)
	fmt.Fprintf(&b, "# Written by %s at %s.\n", k.Tool, k.CreatedAt.UTC().Format(time.RFC3339))
	b.WriteString("# Secrets are placeholders for vaulted variables; put the values in the host's vault file:\n")
	fmt.Fprintf(&b, "#   ansible-vault encrypt_string --stdin-name vault_monky_deployd_bootstrap_grant < %s\n", GrantFile)
	if !k.EnrollmentJWT.Empty() {
		fmt.Fprintf(&b, "#   ansible-vault encrypt_string --stdin-name vault_monky_deployd_enrol_jwt < %s\n", EnrollmentFile(k.EnvID))
	}
	b.WriteString("#   ansible-vault encrypt_string --stdin-name vault_monky_deployd_download_token   # paste the deploy token\n")
	fmt.Fprintf(&b, "# The bootstrap grant expires at %s: run the play before then.\n", k.GrantExpiresAt.Format(time.RFC3339))
	if !k.EnrollmentJWT.Empty() {
		fmt.Fprintf(&b, "# The role enrols monky-host.%s with the one-time JWT of %s when the box has no identity yet.\n", k.EnvID, EnrollmentFile(k.EnvID))
	} else {
		fmt.Fprintf(&b, "# monky-host.%s is enrolled already: the role keeps the identity the box has (no enrolment JWT).\n", k.EnvID)
	}
	enrol := ""
	if !k.EnrollmentJWT.Empty() {
		enrol = q("{{ vault_monky_deployd_enrol_jwt }}")
	}
	vars := []struct{ k, v string }{
		{"monky_deployd_version", q(k.PackageVersion)},
		{"monky_deployd_env_id", q(k.EnvID)},
		{"monky_deployd_site", q(k.Site)},
		{"monky_deployd_transport", q(k.Transport)},
		{"monky_deployd_tenancy_service", q(k.TenancyService)},
		{"monky_deployd_tenancy_port", strconv.Itoa(k.TenancyPort)},
		{"monky_deployd_bao_addr", q(k.BaoAddr)},
		{"monky_deployd_bao_auth_mount", q(k.BaoAuthMount)},
		{"monky_deployd_bao_role", q(k.BaoRole)},
		{"monky_deployd_bootstrap_grant", q("{{ vault_monky_deployd_bootstrap_grant }}")},
		{"monky_deployd_enrol_jwt", enrol},
		{"monky_deployd_download_token", q("{{ vault_monky_deployd_download_token }}")},
	}
	for _, v := range vars {
		if v.v == `""` || v.v == "" {
			continue // not sent by tenancy: the role's default applies
		}
		fmt.Fprintf(&b, "%s: %s\n", v.k, v.v)
	}
	return []byte(b.String())
}

func readme(k Kit) []byte {
	box := "the backend box of " + k.EnvID
	if k.Hostname != "" {
		box += " (" + k.Hostname + ")"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Install kit of %s, site %s, monky-deployd %s.\n", k.EnvID, k.Site, k.PackageVersion)
	fmt.Fprintf(&b, "Written by %s at %s.\n\n", k.Tool, k.CreatedAt.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "WHERE  on %s, as a user who may sudo.\n", box)
	fmt.Fprintf(&b, "WHEN   before %s: the bootstrap grant expires then.\n", k.GrantExpiresAt.Format(time.RFC3339))
	fmt.Fprintf(&b, "       Too late? Reveal a new kit: fleetctl onboard %s --site %s --reissue\n", k.EnvID, k.Site)
	b.WriteString("WHAT   copy this directory to the box, cd into it, export the read-only GitLab deploy token\n")
	b.WriteString("       (scope read_package_registry) as " + TokenVar + ", and run the command in " + CommandFile + ":\n\n")
	b.WriteString("         read -rs " + TokenVar + " && export " + TokenVar + "   # paste the token; it is not echoed\n")
	b.WriteString("         " + InstallCommand(k) + "\n\n")
	b.WriteString("       Or, with ansible: " + VarsFile + " holds the role monky_deployd's variables for this host.\n\n")
	b.WriteString("FILES\n")
	fmt.Fprintf(&b, "  %-28s 0600  bootstrap deploy grant: secret, for this box only\n", GrantFile)
	if !k.EnrollmentJWT.Empty() {
		fmt.Fprintf(&b, "  %-28s 0600  one-time ziti enrolment of monky-host.%s: secret\n", EnrollmentFile(k.EnvID), k.EnvID)
	} else {
		fmt.Fprintf(&b, "  (no enrolment token: monky-host.%s is enrolled already; the box keeps its identity)\n", k.EnvID)
	}
	fmt.Fprintf(&b, "  %-28s 0644  the install command\n", CommandFile)
	fmt.Fprintf(&b, "  %-28s 0644  ansible host variables, secrets as vault placeholders\n\n", VarsFile)
	b.WriteString("This kit supersedes every earlier bootstrap grant of " + k.EnvID + ": an older kit no longer works,\n")
	b.WriteString("and an agent holding a token minted from one is refused (AGENT_UNAUTHENTICATED) until it gets this one.\n")
	if k.Reissued {
		b.WriteString("It was reissued: it replaced the kit that was in this directory.\n")
	}
	fmt.Fprintf(&b, "\nAfterwards: fleetctl status --env %s shows OK within a few minutes. Delete the kit once used.\n", k.EnvID)
	return []byte(b.String())
}

// Staging is a kit being written beside its final place, made before the reveal so that an
// unwritable directory is found before the backend's grant is superseded.
type Staging struct {
	dir, final string
	reissue    bool
	existed    bool
}

// Check says whether dir/env exists, touching nothing (onboard --dry-run); ErrExists when it does
// and reissue is false.
func Check(dir, env string, reissue bool) (exists bool, err error) {
	final := filepath.Join(dir, env)
	_, err = os.Lstat(final)
	switch {
	case err == nil && !reissue:
		return true, fmt.Errorf("kit: %s: %w (--reissue reveals a new kit and supersedes the old grant)", final, ErrExists)
	case err == nil:
		return true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("kit: %w", err)
	}
	return false, nil
}

// Prepare makes the staging directory; ErrExists when dir/env exists and reissue is false.
func Prepare(dir, env string, reissue bool) (*Staging, error) {
	final := filepath.Join(dir, env)
	existed, err := Check(dir, env, reissue)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kit: %w", err)
	}
	tmp, err := os.MkdirTemp(dir, "."+env+".staging-")
	if err != nil {
		return nil, fmt.Errorf("kit: %w", err)
	}
	return &Staging{dir: tmp, final: final, reissue: reissue, existed: existed}, nil
}

// Replaces reports whether a kit was already in place when the staging began.
func (s *Staging) Replaces() bool { return s.existed }

// Abort removes the staging directory.
func (s *Staging) Abort() { _ = os.RemoveAll(s.dir) }

// Commit writes the files and moves the kit into place, returning its directory.
func (s *Staging) Commit(k Kit) (string, error) {
	if err := os.Chmod(s.dir, 0o700); err != nil {
		s.Abort()
		return "", fmt.Errorf("kit: %w", err)
	}
	for _, f := range Files(k) {
		if err := atomicfile.WriteNew(filepath.Join(s.dir, f.Name), f.Content, f.Mode); err != nil {
			s.Abort()
			return "", fmt.Errorf("kit: write %s: %w", f.Name, err)
		}
	}
	old := ""
	if _, err := os.Lstat(s.final); err == nil {
		if !s.reissue {
			s.Abort()
			return "", fmt.Errorf("kit: %s: %w", s.final, ErrExists)
		}
		old = s.final + ".superseded-" + rand.Text()
		if err := os.Rename(s.final, old); err != nil {
			s.Abort()
			return "", fmt.Errorf("kit: move the old kit aside: %w", err)
		}
	}
	if err := os.Rename(s.dir, s.final); err != nil {
		if old != "" {
			_ = os.Rename(old, s.final)
		}
		s.Abort()
		return "", fmt.Errorf("kit: %w", err)
	}
	if old != "" {
		// The old kit's grant is superseded: keeping its secrets around helps nobody.
		_ = os.RemoveAll(old)
	}
	_ = atomicfile.SyncDir(filepath.Dir(s.final))
	return s.final, nil
}
