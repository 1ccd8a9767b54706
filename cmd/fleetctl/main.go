// Command fleetctl is the operator's view of the monky-deployd fleet; see internal/fleet/cli.
package main

import (
	"os"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/cli"
)

func main() { os.Exit(cli.Main()) }
