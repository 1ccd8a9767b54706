// Package debpkg describes the two Debian packages built from one tree — monky-deployd (the
// agent, its proxy, their units) and monky-fleetctl (the operator's fleet view, its exporter, the
// alert rules) — with what a Debian package carries besides its programs: man pages generated
// from the cobra commands, a changelog generated from docs/CHANGELOG.md, a DEP-5 copyright naming
// every module compiled into the binaries, lintian overrides. It writes them with nfpm, so
// `make deb` and the packaging tests build the same thing.
package debpkg

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb" // registers the "deb" packager
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/spf13/cobra"

	agentcli "scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/cli"
	fleetcli "scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/cli"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debchangelog"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debcopyright"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/manpages"
)

// The packages. The Python agent (<= 0.1.9) and the Go agent up to 0.2.0 shipped as one package
// named monky-deployd, so `dpkg -i` of the agent package is an upgrade of it, with the old
// package's prerm and postrm run. Both packages come from one source, named like the agent's.
const (
	Source     = "monky-deployd"
	AgentName  = "monky-deployd"
	FleetName  = "monky-fleetctl"
	Maintainer = "Tikali Monky team <monky@tikali.ai>"
	Homepage   = "https://scm.tikali.ai/tikali/applications/monky/monky-deployd"
)

// SplitVersion is the first version in which fleetctl ships in monky-fleetctl: up to it the agent
// package held /usr/bin/fleetctl, its unit and the alert rules (Breaks and Replaces, Debian
// Policy 7.6.1).
const SplitVersion = "0.3.0~"

// Installed paths. The units live under /usr/lib: the Python package's units may have lived
// elsewhere, which the agent's postinst repairs (see scripts/agent/postinst.sh).
const (
	DeploydPath  = "/usr/bin/monky-deployd"
	FleetctlPath = "/usr/bin/fleetctl"
	UnitDir      = "/usr/lib/systemd/system"
	// RulesPath is the Prometheus alert rules file (packaging/prometheus).
	RulesPath = "/usr/share/" + FleetName + "/prometheus/monky-deployd.rules.yml"
)

// DocDir is a package's documentation directory (copyright, changelog).
func DocDir(pkg string) string { return "/usr/share/doc/" + pkg }

// AgentUnits are the agent package's systemd units, by file name under packaging/systemd.
var AgentUnits = []string{"monky-deployd.service", "monky-deployd.timer", "monky-deployd-proxy.service"}

// ExporterUnit is `fleetctl exporter`'s unit, in monky-fleetctl. It ships disabled: it belongs on
// the one host that watches the fleet, and the operator turns it on there.
const ExporterUnit = "fleetctl-exporter.service"

// Man page sections: the agent is a daemon an administrator runs (8), fleetctl a command an
// operator runs (1).
const (
	AgentManSection = "8"
	FleetManSection = "1"
)

// DockerTriggers are the paths whose installation runs the agent's postinst `triggered`: the
// docker daemon of either packaging.
var DockerTriggers = []string{"/usr/bin/dockerd", "/usr/sbin/dockerd"}

// Options say what goes into one build of the packages.
type Options struct {
	// Version is the release version (the VERSION file), e.g. "0.3.0" or "0.3.0-rc1"; a semver
	// pre-release becomes a Debian "~" version that sorts before the release.
	Version string
	// Arch is the Debian architecture; empty means amd64.
	Arch string
	// DeploydBin and FleetctlBin are the built binaries to ship: static Go programs whose build
	// information names the modules the copyright files list.
	DeploydBin, FleetctlBin string
	// PackagingDir is the repository's packaging/ directory (units, scripts, config example,
	// lintian overrides); docs/CHANGELOG.md is read from its parent.
	PackagingDir string
	// MTime is the time stamped on every file and dating the man pages and an unreleased
	// changelog entry; zero means now.
	MTime time.Time
	// ModCache and GoRoot are `go env GOMODCACHE` and `go env GOROOT` of the build: where the
	// compiled-in modules' and the Go library's licenses are read.
	ModCache, GoRoot string
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
	for _, f := range []struct{ field, v string }{{"PackagingDir", o.PackagingDir}, {"ModCache", o.ModCache}, {"GoRoot", o.GoRoot}} {
		if f.v == "" {
			return fmt.Errorf("%w: %s is empty", ErrInvalidOptions, f.field)
		}
	}
	return nil
}

// DebianVersion is the version the packages carry: a semver pre-release as Debian's "~"
// (0.3.0-rc1 → 0.3.0~rc1), which sorts before the release as semver's does.
func DebianVersion(v string) string { return strings.Replace(v, "-", "~", 1) }

// Packages are the paths of one build's two packages.
type Packages struct {
	Agent, Fleet string
}

// Build generates what both packages carry besides the binaries, describes them, and writes
// them into dir under their conventional names.
func Build(o Options, dir string) (Packages, error) {
	if err := o.Validate(); err != nil {
		return Packages{}, err
	}
	if o.MTime.IsZero() {
		o.MTime = time.Now()
	}
	o.MTime = o.MTime.UTC()
	work, err := os.MkdirTemp("", "monky-debpkg-")
	if err != nil {
		return Packages{}, fmt.Errorf("debpkg: %w", err)
	}
	defer os.RemoveAll(work)
	var out Packages
	for _, p := range []struct {
		name string
		info func(Options, string) (*nfpm.Info, error)
		dst  *string
	}{{AgentName, agentInfo, &out.Agent}, {FleetName, fleetInfo, &out.Fleet}} {
		info, err := p.info(o, filepath.Join(work, p.name))
		if err != nil {
			return Packages{}, err
		}
		if *p.dst, err = Write(info, dir); err != nil {
			return Packages{}, err
		}
	}
	return out, nil
}

// generate writes the package's generated files under dir and returns their contents entries.
func generate(o Options, pkg string, bin debcopyright.Binary, tree *cobra.Command, section, dir string) (files.Contents, error) {
	var c files.Contents
	put := func(name string, data []byte, dst string) error {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("debpkg: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return fmt.Errorf("debpkg: %w", err)
		}
		c = append(c, file(p, dst, 0o644, o.MTime))
		return nil
	}
	pages, err := manpages.Generate(tree, manpages.Options{Section: section, Source: Source + " " + DebianVersion(o.Version),
		Manual: "Monky backend deployment", Date: o.MTime})
	if err != nil {
		return nil, fmt.Errorf("debpkg: %s: %w", pkg, err)
	}
	for _, pg := range pages {
		gz, err := gzip9n(pg.Roff)
		if err != nil {
			return nil, fmt.Errorf("debpkg: %s: %w", pg.Name, err)
		}
		if err := put("man/"+pg.Name+".gz", gz, "/usr/share/man/man"+section+"/"+pg.Name+".gz"); err != nil {
			return nil, err
		}
	}

	md, err := os.ReadFile(filepath.Join(o.PackagingDir, "..", "docs", "CHANGELOG.md"))
	if err != nil {
		return nil, fmt.Errorf("debpkg: the changelog: %w", err)
	}
	releases, err := debchangelog.Parse(md)
	if err != nil {
		return nil, fmt.Errorf("debpkg: docs/%w", err)
	}
	changelog, err := debchangelog.Render(releases, debchangelog.Options{Source: Source, Version: DebianVersion(o.Version),
		Maintainer: Maintainer, Built: o.MTime})
	if err != nil {
		return nil, fmt.Errorf("debpkg: %w", err)
	}
	gz, err := gzip9n(changelog)
	if err != nil {
		return nil, fmt.Errorf("debpkg: changelog: %w", err)
	}
	// A native package (its version has no Debian revision) installs its changelog as
	// changelog.gz (Debian Policy 12.7).
	if err := put("changelog.gz", gz, DocDir(pkg)+"/changelog.gz"); err != nil {
		return nil, err
	}

	copyright, err := debcopyright.Render(debcopyright.Options{
		UpstreamName: Source, UpstreamContact: Maintainer, Source: Homepage,
		Copyright: "2026 Tikali", License: "proprietary",
		LicenseText: "Copyright 2026 Tikali. All rights reserved.\n\nThis software is Tikali's own, for the Monky " +
			"platform's hosts; it may be used, copied and changed only as Tikali agrees.",
		Binaries: []debcopyright.Binary{bin}, ModCache: o.ModCache, GoRoot: o.GoRoot,
		// packaging/ sits at the agent module's root, which local replaces are relative to.
		SourceRoot: filepath.Dir(filepath.Clean(o.PackagingDir)),
	})
	if err != nil {
		return nil, fmt.Errorf("debpkg: %s: %w", pkg, err)
	}
	if err := put("copyright", copyright, DocDir(pkg)+"/copyright"); err != nil {
		return nil, err
	}
	return c, nil
}

// gzip9n is `gzip -9n`: the best compression (lintian wants it) and no name or time in the
// header, so the bytes depend on the text alone.
func gzip9n(b []byte) ([]byte, error) {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(b); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// agentInfo describes monky-deployd: the agent, its units and man pages.
func agentInfo(o Options, gen string) (*nfpm.Info, error) {
	dir := o.PackagingDir
	contents := files.Contents{
		file(o.DeploydBin, DeploydPath, 0o755, o.MTime),
		file(filepath.Join(dir, "config.example.yaml"), DocDir(AgentName)+"/config.example.yaml", 0o644, o.MTime),
		file(filepath.Join(dir, "lintian", AgentName), "/usr/share/lintian/overrides/"+AgentName, 0o644, o.MTime),
	}
	for _, u := range AgentUnits {
		contents = append(contents, file(filepath.Join(dir, "systemd", u), UnitDir+"/"+u, 0o644, o.MTime))
	}
	g, err := generate(o, AgentName, debcopyright.Binary{Path: o.DeploydBin, Installed: DeploydPath}, agentcli.CommandTree(), AgentManSection, gen)
	if err != nil {
		return nil, err
	}
	contents = append(contents, g...)
	// No /etc file is shipped, and so no conffile: /etc/monky-deployd/config.yaml belongs to
	// install.sh / the ansible role, and a packaged copy would be offered for replacement (or
	// replaced) on every upgrade.
	scripts := nfpm.Scripts{
		PreInstall:  filepath.Join(dir, "scripts", "agent", "preinst.sh"),
		PostInstall: filepath.Join(dir, "scripts", "agent", "postinst.sh"),
		PreRemove:   filepath.Join(dir, "scripts", "agent", "prerm.sh"),
		PostRemove:  filepath.Join(dir, "scripts", "agent", "postrm.sh"),
	}
	return describe(o, AgentName, contents, scripts, nfpm.Overridables{
		// passwd: useradd/usermod/groupadd in postinst.
		Depends: []string{"passwd"},
		// The docker CLI and the compose v2 plugin: not a hard dependency, because boxes get
		// docker from several sources (Debian, docker-ce, static binaries).
		Recommends: []string{"docker.io | docker-ce-cli", "acl"},
		Suggests:   []string{FleetName},
		// docker installed after the agent: dpkg runs postinst `triggered` once dockerd lands
		// (docker-ce puts it in /usr/bin, docker.io in /usr/sbin), and postinst adds the agent's
		// account to the group docker's own postinst has just created. Without it the ticks run
		// but cannot use docker until someone runs usermod by hand.
		Deb: nfpm.Deb{Triggers: nfpm.DebTriggers{InterestNoAwait: DockerTriggers}},
	},
		"Monky backend pull agent",
		"monky-deployd checks in with monky-tenancy over the OpenZiti mesh, reads the\n"+
			"backend's secrets from OpenBao and runs its docker compose project, every\n"+
			"minute from a systemd timer. The package holds the agent, its ziti loopback\n"+
			"proxy and their systemd units; fleetctl, the operator's view of the fleet,\n"+
			"is in monky-fleetctl.")
}

// fleetInfo describes monky-fleetctl: fleetctl, its exporter unit, the alert rules, man pages.
func fleetInfo(o Options, gen string) (*nfpm.Info, error) {
	dir := o.PackagingDir
	contents := files.Contents{
		file(o.FleetctlBin, FleetctlPath, 0o755, o.MTime),
		file(filepath.Join(dir, "systemd", ExporterUnit), UnitDir+"/"+ExporterUnit, 0o644, o.MTime),
		file(filepath.Join(dir, "prometheus", "monky-deployd.rules.yml"), RulesPath, 0o644, o.MTime),
		file(filepath.Join(dir, "lintian", FleetName), "/usr/share/lintian/overrides/"+FleetName, 0o644, o.MTime),
	}
	g, err := generate(o, FleetName, debcopyright.Binary{Path: o.FleetctlBin, Installed: FleetctlPath}, fleetcli.CommandTree(), FleetManSection, gen)
	if err != nil {
		return nil, err
	}
	contents = append(contents, g...)
	scripts := nfpm.Scripts{
		PostInstall: filepath.Join(dir, "scripts", "fleetctl", "postinst.sh"),
		PreRemove:   filepath.Join(dir, "scripts", "fleetctl", "prerm.sh"),
		PostRemove:  filepath.Join(dir, "scripts", "fleetctl", "postrm.sh"),
	}
	older := AgentName + " (<< " + SplitVersion + ")"
	return describe(o, FleetName, contents, scripts, nfpm.Overridables{
		// fleetctl, its unit and the rules were the agent package's up to 0.2.0: this package
		// takes the files over (Replaces) and cannot be unpacked beside an agent package that
		// still ships them (Breaks), as Debian Policy 7.6.1 has it for files moving between
		// packages. apt upgrades the agent package with it; dpkg -i of both does the same.
		Replaces: []string{older},
		Deb:      nfpm.Deb{Breaks: []string{older}, Fields: map[string]string{"Source": Source}},
	},
		"Monky fleet view for operators",
		"fleetctl joins the OpenZiti controller's view of every monky-deployd host\n"+
			"with tenancy's view of every agent and gives each environment a verdict\n"+
			"with the next step; gate blocks a release pipeline on it. The package holds\n"+
			"fleetctl, the unit of its Prometheus exporter (shipped disabled: it belongs\n"+
			"on the one host that watches the fleet) and the alert rules.")
}

// describe is the nfpm description shared by both packages. Every file it names must exist, so
// a missing unit or script fails here rather than inside nfpm.
func describe(o Options, name string, contents files.Contents, scripts nfpm.Scripts, ov nfpm.Overridables, summary, long string) (*nfpm.Info, error) {
	for _, c := range contents {
		if err := mustExist(c.Source); err != nil {
			return nil, err
		}
	}
	for _, s := range []string{scripts.PreInstall, scripts.PostInstall, scripts.PreRemove, scripts.PostRemove} {
		if s == "" {
			continue
		}
		if err := mustExist(s); err != nil {
			return nil, err
		}
	}
	for _, l := range strings.Split(long, "\n") {
		// lintian: extended-description-line-too-long beyond 80 columns, the leading space included.
		if len([]rune(l)) > 79 {
			return nil, fmt.Errorf("debpkg: %s: description line longer than 79 columns: %q", name, l)
		}
	}
	arch := o.Arch
	if arch == "" {
		arch = "amd64"
	}
	ov.Contents = contents
	ov.Scripts = scripts
	info := &nfpm.Info{
		Name:         name,
		Arch:         arch,
		Platform:     "linux",
		Version:      o.Version,
		Section:      "admin",
		Priority:     "optional",
		Maintainer:   Maintainer,
		Description:  summary + "\n" + long,
		Vendor:       "Tikali",
		Homepage:     Homepage,
		MTime:        o.MTime,
		Overridables: ov,
	}
	return nfpm.WithDefaults(info), nil
}

// FileName is the conventional Debian file name of the package, e.g.
// monky-deployd_0.3.0_amd64.deb.
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

func file(src, dst string, mode fs.FileMode, mtime time.Time) *files.Content {
	return &files.Content{
		Source:      src,
		Destination: dst,
		Type:        files.TypeFile,
		FileInfo:    &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: mtime},
	}
}

func mustExist(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("debpkg: package file: %w", err)
	}
	return nil
}
