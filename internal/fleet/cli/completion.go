package cli

import (
	"io"

	"github.com/spf13/cobra"
)

func newCompletionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script of fleetctl",
		Long: `completion prints a script that completes fleetctl's commands and flags in the shell:

  bash:  fleetctl completion bash > /etc/bash_completion.d/fleetctl   (or: source <(fleetctl completion bash))
  zsh:   fleetctl completion zsh > "${fpath[1]}/_fleetctl"
  fish:  fleetctl completion fish > ~/.config/fish/completions/fleetctl.fish`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("completion takes one shell: bash, zsh or fish")
			}
			switch args[0] {
			case "bash", "zsh", "fish":
				return nil
			}
			return usagef("completion %q: want bash, zsh or fish", args[0])
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCompletion(cmd.Root(), args[0], g.stdout)
		},
	}
}

// runCompletion writes cobra's generator's script for shell, with descriptions.
func runCompletion(root *cobra.Command, shell string, w io.Writer) error {
	switch shell {
	case "bash":
		return root.GenBashCompletionV2(w, true)
	case "zsh":
		return root.GenZshCompletion(w)
	}
	return root.GenFishCompletion(w, true)
}
