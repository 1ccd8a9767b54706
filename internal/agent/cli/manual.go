package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// CommandTree is monky-deployd's command tree for documentation: the package's man pages are
// generated from it at build time (packaging/manpages), so a new command or flag is documented by
// adding it. It is never executed; its defaults are the documented ones, not taken from this
// process's environment.
func CommandTree() *cobra.Command {
	return newRootCommand(&cliDeps{stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }, proc: realProcess})
}
