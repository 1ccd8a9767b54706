package cli

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/render"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

type versionInfo struct {
	Schema   int    `json:"schema"`
	Version  string `json:"version"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func (v versionInfo) Table(bool) render.Table {
	return render.Table{Lines: []string{fmt.Sprintf("fleetctl %s (%s, %s)", v.Version, v.Go, v.Platform)}}
}

func newVersionCommand(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print fleetctl's version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			return runVersion(g, g.stdout)
		},
	}
}

func runVersion(g *globalOptions, w io.Writer) error {
	return g.printer().Print(w, versionInfo{
		Schema: report.Schema, Version: version.Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
	})
}
