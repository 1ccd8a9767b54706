package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// CommandTree is fleetctl's command tree for documentation: the monky-fleetctl package's man
// pages are generated from it at build time (packaging/manpages), so a new command or flag is
// documented by adding it. It is never executed and reads nothing from this process.
func CommandTree() *cobra.Command {
	return newRootCommand(newGlobals(Deps{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(string) string { return "" }}))
}
