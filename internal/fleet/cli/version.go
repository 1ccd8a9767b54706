package cli

import (
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
	// Commit and Date are the build's ("unknown" when neither the link nor Go's stamp says).
	Commit string `json:"commit"`
	Date   string `json:"date"`
}

func (v versionInfo) Table(bool) render.Table {
	return render.Table{Lines: []string{versionLine()}}
}

// versionLine is what `fleetctl version` and `fleetctl --version` print, the same line.
func versionLine() string {
	return "fleetctl " + version.Line(runtime.Version(), runtime.GOOS+"/"+runtime.GOARCH)
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
	commit, date := version.Build()
	return g.printer().Print(w, versionInfo{
		Schema: report.Schema, Version: version.Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH,
		Commit: commit, Date: date,
	})
}
