// Package debpkg describes the monky-deployd Debian package — its files, units and maintainer
// scripts — and writes it with nfpm, so `make deb` and the packaging tests build the same thing.
package debpkg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
)

// Name is the Debian package name. The Python agent (<= 0.1.9) shipped under the same name, so
// `dpkg -i` of this package is an upgrade of it, with the old package's prerm and postrm run.
const Name = "monky-deployd"

// Installed paths. The units live under /usr/lib: the Python package's units may have lived
// elsewhere, which postinst repairs (see scripts/postinst.sh).
const (
	DeploydPath  = "/usr/bin/monky-deployd"
	FleetctlPath = "/usr/bin/fleetctl"
	UnitDir      = "/usr/lib/systemd/system"
	DocDir       = "/usr/share/doc/monky-deployd"
	// RulesPath is the Prometheus alert rules file (packaging/prometheus).
	RulesPath = "/usr/share/monky-deployd/prometheus/monky-deployd.rules.yml"
)

// Units are the systemd unit files shipped, by file name under packaging/systemd.
var Units = []string{"monky-deployd.service", "monky-deployd.timer", "monky-deployd-proxy.service"}

// ExporterUnit is `fleetctl exporter`'s unit. No maintainer script enables, starts or stops it:
// it is for the one host that watches the fleet, and the operator turns it on there.
const ExporterUnit = "fleetctl-exporter.service"

// Options say what goes into one build of the package.
type Options struct {
	// Version is the release version (the VERSION file), e.g. "0.2.0" or "0.2.0-rc1"; nfpm turns
	// a semver pre-release into a Debian "~" version that sorts before the release.
	Version string
	// Arch is the Debian architecture; empty means amd64.
	Arch string
	// DeploydBin and FleetctlBin are the built binaries to ship.
	DeploydBin, FleetctlBin string
	// PackagingDir is the repository's packaging/ directory (units, scripts, config example).
	PackagingDir string
	// MTime is the time stamped on every file; zero means SOURCE_DATE_EPOCH or now (nfpm's rule).
	MTime time.Time
}

// ErrInvalidOptions is wrapped by every error about Options.
var ErrInvalidOptions = errors.New("debpkg: invalid options")

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// Validate checks the options before anything is read or written, naming the bad field.
func (o Options) Validate() error {
	if !versionRE.MatchString(o.Version) {
		return fmt.Errorf("%w: Version %q is not MAJOR.MINOR.PATCH[-PRERELEASE]", ErrInvalidOptions, o.Version)
	}
	if o.Arch != "" && o.Arch != "amd64" && o.Arch != "arm64" {
		return fmt.Errorf("%w: Arch %q: only amd64 and arm64 are built", ErrInvalidOptions, o.Arch)
	}
	for _, f := range []struct{ field, path string }{{"DeploydBin", o.DeploydBin}, {"FleetctlBin", o.FleetctlBin}} {
		if f.path == "" {
			return fmt.Errorf("%w: %s is empty", ErrInvalidOptions, f.field)
		}
		st, err := os.Stat(f.path)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrInvalidOptions, f.field, err)
		}
		if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%w: %s %q is not an executable file", ErrInvalidOptions, f.field, f.path)
		}
	}
	if o.PackagingDir == "" {
		return fmt.Errorf("%w: PackagingDir is empty", ErrInvalidOptions)
	}
	return nil
}

// Info builds the nfpm description of the agent package. It checks that every file it names
// exists, so a missing unit or script fails here rather than inside nfpm.
func Info(o Options) (*nfpm.Info, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	arch := o.Arch
	if arch == "" {
		arch = "amd64"
	}
	dir := o.PackagingDir
	contents := files.Contents{
		file(o.DeploydBin, DeploydPath, 0o755),
		file(o.FleetctlBin, FleetctlPath, 0o755),
		file(filepath.Join(dir, "config.example.yaml"), DocDir+"/config.example.yaml", 0o644),
	}
	for _, u := range append(Units[:len(Units):len(Units)], ExporterUnit) {
		contents = append(contents, file(filepath.Join(dir, "systemd", u), UnitDir+"/"+u, 0o644))
	}
	contents = append(contents, file(filepath.Join(dir, "prometheus", "monky-deployd.rules.yml"), RulesPath, 0o644))
	// No /etc file is shipped, and so no conffile: /etc/monky-deployd/config.yaml belongs to
	// install.sh / the ansible role, and a packaged copy would be offered for replacement (or
	// replaced) on every upgrade.
	scripts := nfpm.Scripts{
		PreInstall:  filepath.Join(dir, "scripts", "preinst.sh"),
		PostInstall: filepath.Join(dir, "scripts", "postinst.sh"),
		PreRemove:   filepath.Join(dir, "scripts", "prerm.sh"),
		PostRemove:  filepath.Join(dir, "scripts", "postrm.sh"),
	}
	for _, c := range contents {
		if err := mustExist(c.Source); err != nil {
			return nil, err
		}
	}
	for _, s := range []string{scripts.PreInstall, scripts.PostInstall, scripts.PreRemove, scripts.PostRemove} {
		if err := mustExist(s); err != nil {
			return nil, err
		}
	}
	info := &nfpm.Info{
		Name:        Name,
		Arch:        arch,
		Platform:    "linux",
		Version:     o.Version,
		Section:     "admin",
		Priority:    "optional",
		Maintainer:  "Tikali Monky team <monky@tikali.ai>",
		Description: "Monky backend pull agent\nmonky-deployd checks in with monky-tenancy over the ziti mesh, reads its secrets\nfrom OpenBao and runs the backend's docker compose project; fleetctl is the\noperator's fleet view.",
		Vendor:      "Tikali",
		Homepage:    "https://scm.tikali.ai/tikali/applications/monky/monky-deployd",
		MTime:       o.MTime,
		Overridables: nfpm.Overridables{
			// passwd: useradd/usermod/groupadd in postinst.
			Depends: []string{"passwd"},
			// The docker CLI and the compose v2 plugin: not a hard dependency, because boxes get
			// docker from several sources (Debian, docker-ce, static binaries).
			Recommends: []string{"docker.io | docker-ce-cli", "acl"},
			Contents:   contents,
			Scripts:    scripts,
			// docker installed after the agent: dpkg runs postinst `triggered` once dockerd
			// lands (docker-ce puts it in /usr/bin, docker.io in /usr/sbin), and postinst adds
			// the agent's account to the group docker's own postinst has just created. Without
			// it the ticks run but cannot use docker until someone runs usermod by hand.
			Deb: nfpm.Deb{Triggers: nfpm.DebTriggers{InterestNoAwait: DockerTriggers}},
		},
	}
	return nfpm.WithDefaults(info), nil
}

// DockerTriggers are the paths whose installation runs postinst `triggered`: the docker daemon
// of either packaging.
var DockerTriggers = []string{"/usr/bin/dockerd", "/usr/sbin/dockerd"}

// FileName is the conventional Debian file name of the package, e.g.
// monky-deployd_0.2.0_amd64.deb.
func FileName(info *nfpm.Info) (string, error) {
	p, err := nfpm.Get("deb")
	if err != nil {
		return "", fmt.Errorf("debpkg: %w", err)
	}
	named, ok := p.(nfpm.PackagerWithExtension)
	if !ok {
		return "", errors.New("debpkg: the deb packager has no conventional file name")
	}
	return named.ConventionalFileName(info), nil
}

// Write packages info into dir under its conventional name, atomically (a temp file renamed
// into place, so an interrupted build never leaves a truncated .deb that looks finished), and
// returns the path written.
func Write(info *nfpm.Info, dir string) (string, error) {
	name, err := FileName(info)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("debpkg: %w", err)
	}
	p, err := nfpm.Get("deb")
	if err != nil {
		return "", fmt.Errorf("debpkg: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".*")
	if err != nil {
		return "", fmt.Errorf("debpkg: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := p.Package(info, tmp); err != nil {
		tmp.Close()
		return "", fmt.Errorf("debpkg: package %s: %w", name, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", fmt.Errorf("debpkg: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("debpkg: write %s: %w", name, err)
	}
	out := filepath.Join(dir, name)
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("debpkg: %w", err)
	}
	return out, nil
}

func file(src, dst string, mode fs.FileMode) *files.Content {
	return &files.Content{
		Source:      src,
		Destination: dst,
		Type:        files.TypeFile,
		FileInfo:    &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode},
	}
}

func mustExist(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("debpkg: package file: %w", err)
	}
	return nil
}
