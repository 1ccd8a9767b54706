package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// versionLine is what `monky-deployd version` and `monky-deployd --version` print, the same line.
func versionLine() string {
	return "monky-deployd " + version.Line(runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
}

func newVersionCommand(g *cliDeps) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the agent's version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(g.stdout, versionLine())
			return err
		},
	}
}
