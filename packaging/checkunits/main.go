// Command checkunits extracts the built packages of one version and fails when one of their
// systemd units is more exposed than the project allows (packaging/unitscore); `make deb-check`
// runs it after lintian.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debpkg"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/unitscore"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checkunits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dist := fs.String("dist", "dist", "directory holding the packages")
	version := fs.String("version", "", "the packages' (Debian) version")
	arch := fs.String("arch", "amd64", "Debian architecture")
	analyze := fs.String("systemd-analyze", "systemd-analyze", "systemd-analyze (systemd 250 or newer: --offline)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version == "" {
		fmt.Fprintln(stderr, "checkunits: -version is required")
		return 2
	}
	root, err := os.MkdirTemp("", "checkunits-")
	if err != nil {
		fmt.Fprintf(stderr, "checkunits: %v\n", err)
		return 1
	}
	defer os.RemoveAll(root)
	for _, name := range []string{debpkg.AgentName, debpkg.FleetName} {
		deb := filepath.Join(*dist, fmt.Sprintf("%s_%s_%s.deb", name, *version, *arch))
		if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			fmt.Fprintf(stderr, "checkunits: dpkg-deb -x %s: %v\n%s", deb, err, out)
			return 1
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := unitscore.Check(ctx, *analyze, root)
	if err != nil {
		fmt.Fprintf(stderr, "checkunits: %v\n", err)
		return 1
	}
	code := 0
	for _, r := range results {
		fmt.Fprintln(stdout, "checkunits: "+r.String())
		if r.Over() {
			code = 1
		}
	}
	if code != 0 {
		fmt.Fprintln(stderr, "checkunits: a unit lost hardening; see: systemd-analyze security --offline=true <unit file>")
	}
	return code
}
