package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

func newVersionCommand(g *cliDeps) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the agent's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(g.stdout, "monky-deployd %s (%s, %s/%s)\n", version.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
