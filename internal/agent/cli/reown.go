package cli

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// DefaultStateDir is the package's state directory, which postinst hands to reown.
const DefaultStateDir = "/var/lib/monky-deployd"

type reownOptions struct {
	dir string
}

func newReownCommand(g *cliDeps) *cobra.Command {
	var opts reownOptions
	cmd := &cobra.Command{
		Use:   "reown",
		Short: "Give root's files in the state directory back to the agent's account (as root)",
		Long: `reown gives every file root owns under the state directory to the directory's owner, the
agent's account: what a tick run as root by an agent before 0.2.0 left there, which stops every
later tick. The package runs it on every configure. It follows no symlink and changes only what
it opened; a file with a second name (a hard link to a file elsewhere) keeps its owner and is
named, and other users' files (a container's, in a bind mount) stay as they are.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return exit(runReown(opts, g))
		},
	}
	cmd.Flags().StringVar(&opts.dir, "dir", DefaultStateDir, "the state directory (state_dir)")
	return cmd
}

func runReown(opts reownOptions, g *cliDeps) error {
	if g.proc.euid() != 0 {
		return errors.New("reown: run as root (sudo monky-deployd reown)")
	}
	fi, err := os.Lstat(opts.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing was ever written
	}
	if err != nil {
		return fmt.Errorf("reown: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.IsDir() {
		return fmt.Errorf("reown: %s is not a directory", opts.dir)
	}
	if st.Uid == 0 {
		return fmt.Errorf("reown: %s is root's own: give it to the agent's account first (chown monky-deployd: %s)", opts.dir, opts.dir)
	}
	name := strconv.FormatUint(uint64(st.Uid), 10)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	res, err := state.GiveBack(opts.dir, int(st.Uid), int(st.Gid))
	if n := len(res.Changed); n > 0 {
		fmt.Fprintf(g.stdout, "reown: gave %d entries under %s back to %s (root had them)\n", n, opts.dir, name)
	}
	for _, p := range res.Linked {
		fmt.Fprintf(g.stdout, "reown: not re-owned (a file with more than one name): %s — if it is the agent's: chown %s: %s\n", p, name, p)
	}
	if err != nil {
		return fmt.Errorf("reown: %w", err)
	}
	return nil
}
