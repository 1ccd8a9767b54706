// Command devstack runs the local control plane of monky-deployd (internal/dev/devstack): `devstack
// demo` plays `make demo`, `devstack serve` keeps a small fleet running for you to point
// fleetctl at. Everything listens on 127.0.0.1 only and is removed when it ends.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: devstack demo|serve|preflight [flags]

  demo       five agents deploy, one goes silent, one is refused; fleetctl status catches both
  serve      the control plane and N agents, until Ctrl-C
  preflight  monky-deployd doctor's docker and compose checks, as the demo's agents run docker:
             exit 1 with the fix when an engine answers without compose v2

flags:
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "demo" && args[0] != "serve" && args[0] != "preflight") {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd := args[0]
	fs := flag.NewFlagSet("devstack "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o demo.Options
	fs.StringVar(&o.Dir, "dir", "", "work directory (required; must exist)")
	fs.StringVar(&o.AgentBin, "agent-bin", "bin/monky-deployd", "monky-deployd binary")
	fs.StringVar(&o.FleetctlBin, "fleetctl-bin", "bin/fleetctl", "fleetctl binary")
	fs.StringVar(&o.AppBin, "app-bin", "", "the demo app, built static (go build ./internal/dev/cmd/demoapp); none: no image")
	fs.StringVar(&o.BaoBin, "bao-bin", "", "OpenBao server binary for the real dev server; none: the in-process fake")
	fs.StringVar(&o.ZitiBin, "ziti-bin", "", "ziti binary (scripts/build-ziti.sh) for the real OpenZiti controller and router; none: the in-process fake")
	fs.StringVar(&o.RegistryBin, "registry-bin", "", "registry binary (default /usr/bin/docker-registry)")
	fs.StringVar(&o.RulesFile, "rules", "packaging/prometheus/monky-deployd.rules.yml", "the alert rules the demo's Prometheus evaluates")
	fs.StringVar(&o.PrometheusBin, "prometheus-bin", "", "Prometheus server (default /usr/bin/prometheus; absent: no alert is evaluated)")
	boxes := 5
	if cmd == "serve" {
		boxes = 3
	}
	fs.IntVar(&o.Boxes, "boxes", boxes, "number of agents")
	fs.DurationVar(&o.Interval, "interval", 5*time.Second, "check-in interval and tick period")
	fs.BoolVar(&o.SkipPreflight, "no-preflight", false, "skip the docker and compose preflight (scripts/demo.sh ran it already)")
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if o.Dir == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	o.Stdout = stdout
	var err error
	switch cmd {
	case "demo":
		err = demo.Run(ctx, o)
	case "preflight":
		_, err = demo.Preflight(ctx, o.Dir, stdout)
	default:
		err = demo.Serve(ctx, o)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "devstack: interrupted; everything it started is stopped")
		return 130
	}
	fmt.Fprintf(stderr, "devstack: %v\n", err)
	return 1
}
