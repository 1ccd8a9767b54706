//go:build integration

// Package pkgtest is what the two packaging test harnesses share — packaging/debtest (maintainer
// scripts in a throw-away chroot) and packaging/boxtest (the package on a systemd box): how a
// missing part fails in CI and skips elsewhere, running a command for its output, and the
// stand-in packages both install (the Python agent's 0.1.x package, and small packages carrying
// a few files and a postinst).
package pkgtest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/files"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debpkg"
)

// Missing fails the test in CI and skips it elsewhere (itest.Unavailable): a developer's machine
// may lack a part, CI must not.
func Missing(t testing.TB, why string) {
	t.Helper()
	itest.Unavailable(t, why)
}

// Run runs name with args in dir (env nil: this process's environment) and returns its
// combined output.
func Run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// File is one file of a stand-in package: Source on this machine, Dest in the package, owned by
// root with Mode.
type File struct {
	Source, Dest string
	Mode         os.FileMode
}

// Standin describes a stand-in package. PostInstall and PreRemove are script paths ("" none).
type Standin struct {
	Name, Version, Description string
	Provides                   []string
	Files                      []File
	PostInstall, PreRemove     string
}

// Build writes the stand-in's .deb into dir and returns its path.
func (s Standin) Build(dir string) (string, error) {
	var contents files.Contents
	for _, f := range s.Files {
		contents = append(contents, &files.Content{Source: f.Source, Destination: f.Dest, Type: files.TypeFile,
			FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: f.Mode}})
	}
	info := nfpm.WithDefaults(&nfpm.Info{
		Name: s.Name, Arch: "amd64", Version: s.Version, Maintainer: "stand-in <stand-in@example.invalid>",
		Description: s.Description,
		Overridables: nfpm.Overridables{Provides: s.Provides, Contents: contents,
			Scripts: nfpm.Scripts{PostInstall: s.PostInstall, PreRemove: s.PreRemove}},
	})
	return debpkg.Write(info, dir)
}

// OldPackage builds the stand-in of the Python agent's package at version (0.1.8 or 0.1.9) into
// dir/old-VERSION from packaging/debtest/testdata/oldpkg under the module root: units under
// /lib/systemd/system, and the prerm of that version (0.1.8's disables the timer on every call,
// upgrades included).
func OldPackage(root, dir, version string) (string, error) {
	td := filepath.Join(root, "packaging", "debtest", "testdata", "oldpkg")
	f := func(src, dst string, mode os.FileMode) File {
		return File{Source: filepath.Join(td, src), Dest: dst, Mode: mode}
	}
	return Standin{
		Name: debpkg.AgentName, Version: version, Description: "stand-in for the Python agent package " + version,
		Files: []File{
			f("monky-deployd.py", "/opt/monky-deployd/venv/bin/monky-deployd", 0o755),
			f("monky-deployd.service", "/lib/systemd/system/monky-deployd.service", 0o644),
			f("monky-deployd.timer", "/lib/systemd/system/monky-deployd.timer", 0o644),
			f("monky-deployd-proxy.service", "/lib/systemd/system/monky-deployd-proxy.service", 0o644),
		},
		PostInstall: filepath.Join(td, "postinst"),
		PreRemove:   filepath.Join(td, "prerm-"+version),
	}.Build(filepath.Join(dir, "old-"+version))
}
