// Package versionflag gives a cobra root command a --version flag of its own.
//
// Not cobra's Version field: cobra prints a version line of one's own (SetVersionTemplate)
// through text/template, whose reflective method calls make the linker keep every exported
// method of every type in the binary (14 of monky-deployd's 35 MB, and 4 MiB of every run's RSS;
// internal/test/linkcheck guards this).
package versionflag

import (
	"fmt"

	"github.com/spf13/cobra"
)

// Add gives root a --version flag (shorthand, when not "", too) and makes root, run with it,
// print line() and a newline; run without it, the help. root gets no Args: cobra's own check
// answers a word that names no command with "unknown command" and the command meant.
func Add(root *cobra.Command, shorthand string, line func() string) {
	root.Flags().BoolP("version", shorthand, false, "version for "+root.Name())
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		if Asked(cmd) {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), line())
			return err
		}
		return cmd.Help()
	}
}

// Asked: cmd is the root command and runs with --version.
func Asked(cmd *cobra.Command) bool {
	if cmd.HasParent() {
		return false
	}
	asked, _ := cmd.Flags().GetBool("version")
	return asked
}
