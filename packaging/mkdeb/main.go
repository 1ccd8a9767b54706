// Command mkdeb builds dist/monky-deployd_<version>_<arch>.deb and
// dist/monky-fleetctl_<version>_<arch>.deb from already built binaries; `make deb` builds it with
// `go -C packaging build` (packaging/ is a module of its own) and runs it from the repository
// root after building them. It prints the two packages' paths, one a line.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/debpkg"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stdout, os.Stderr))
}

func run(args []string, sourceDateEpoch string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mkdeb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o debpkg.Options
	versionFile := fs.String("version-file", "VERSION", "file holding the release version (used when -version is empty)")
	fs.StringVar(&o.Version, "version", "", "release version, e.g. 0.3.0")
	fs.StringVar(&o.Arch, "arch", "amd64", "Debian architecture")
	fs.StringVar(&o.DeploydBin, "deployd", "dist/bin/monky-deployd", "built monky-deployd binary")
	fs.StringVar(&o.FleetctlBin, "fleetctl", "dist/bin/fleetctl", "built fleetctl binary")
	fs.StringVar(&o.PackagingDir, "packaging", "packaging", "the repository's packaging/ directory")
	fs.StringVar(&o.ModCache, "modcache", "", "the Go module cache the binaries were built from (go env GOMODCACHE)")
	fs.StringVar(&o.GoRoot, "goroot", "", "the Go tree the binaries were built with (go env GOROOT)")
	out := fs.String("out", "dist", "output directory")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.Version == "" {
		b, err := os.ReadFile(*versionFile)
		if err != nil {
			fmt.Fprintf(stderr, "mkdeb: %v\n", err)
			return 2
		}
		o.Version = strings.TrimSpace(string(b))
	}
	if sourceDateEpoch != "" {
		sec, err := strconv.ParseInt(sourceDateEpoch, 10, 64)
		if err != nil {
			fmt.Fprintf(stderr, "mkdeb: SOURCE_DATE_EPOCH %q is not a number of seconds\n", sourceDateEpoch)
			return 2
		}
		o.MTime = time.Unix(sec, 0).UTC()
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "mkdeb: %v\n", err)
		return 2
	}
	pkgs, err := debpkg.Build(o, *out)
	if err != nil {
		fmt.Fprintf(stderr, "mkdeb: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, pkgs.Agent)
	fmt.Fprintln(stdout, pkgs.Fleet)
	return 0
}
