package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/kitconfig"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

func newConfigCommand(g *cliDeps) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Work on config.yaml as the install kit does",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newConfigMergeCommand(g))
	return cmd
}

type configMergeOptions struct {
	kit string
}

func newConfigMergeCommand(g *cliDeps) *cobra.Command {
	var opts configMergeOptions
	cmd := &cobra.Command{
		Use:   "merge --kit FILE",
		Short: "Print config.yaml with the install kit's keys set and every other key kept",
		Long: `merge prints the config (--config) with every key of the kit's file set, keeping every other
key and comment: install.sh and the ansible role write only their own keys, so what an operator
tuned survives a re-run. When no value changes it prints the file as it is, byte for byte, and
the kit rewrites nothing. It refuses (exit 78) a config or kit that is not YAML, and a result the
agent would not load, naming the key. It writes nothing itself; a missing config is the kit's.
The keys it set are listed on stderr. --kit - reads the kit from stdin.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConfigMerge(opts, g, cmd.InOrStdin())
		},
	}
	cmd.Flags().StringVar(&opts.kit, "kit", "", "the kit's keys, a config.yaml fragment (- for stdin)")
	_ = cmd.MarkFlagRequired("kit")
	return cmd
}

func runConfigMerge(opts configMergeOptions, g *cliDeps, stdin io.Reader) error {
	refuse := func(err error) error { return &exitError{code: tick.ExitConfig, err: err} }
	var kit []byte
	var err error
	if opts.kit == "-" {
		kit, err = io.ReadAll(io.LimitReader(stdin, 1<<20+1))
	} else {
		kit, err = os.ReadFile(opts.kit)
	}
	if err != nil {
		return refuse(fmt.Errorf("config merge: the kit: %w", err))
	}
	existing, err := readNoFollow(g.configPath)
	if err != nil {
		return refuse(fmt.Errorf("config merge: %w", err))
	}
	r, err := kitconfig.Merge(existing, kit, g.configPath)
	if err != nil {
		return refuse(fmt.Errorf("config merge: %w", err))
	}
	if _, err := g.stdout.Write(r.Config); err != nil {
		return err
	}
	if len(r.Changed) == 0 {
		fmt.Fprintf(g.stderr, "config merge: %s unchanged\n", g.configPath)
	} else {
		fmt.Fprintf(g.stderr, "config merge: the kit sets %s in %s; every other key is kept\n", strings.Join(r.Changed, ", "), g.configPath)
	}
	return nil
}

// readNoFollow reads a regular file without following a symlink at its name: the directory of
// config.yaml is writable by the agent's group, and root running the kit must not read another
// file through a link planted there. A missing file reads as empty.
func readNoFollow(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symlink: remove it (the kit writes a regular file)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return io.ReadAll(io.LimitReader(f, 1<<20+1))
}
