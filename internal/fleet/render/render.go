// Package render is fleetctl's one output formatter: every command's result goes through
// Printer, as a table (tablewriter), a wide table, or a JSON document carrying a schema number.
package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/renderer"
	"github.com/olekukonko/tablewriter/tw"
)

// Format is an output format.
type Format string

// Formats.
const (
	FormatTable Format = "table"
	FormatWide  Format = "wide"
	FormatJSON  Format = "json"
	// FormatPrometheus: only `fleetctl status` prints it (through internal/fleet/exporter).
	FormatPrometheus Format = "prometheus"
)

// ParseFormat reads the value of -o.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatTable, FormatWide, FormatJSON, FormatPrometheus:
		return f, nil
	}
	return "", fmt.Errorf("-o %q: want table, wide, json or prometheus", s)
}

// Table is a result as text: header, rows, and summary lines under it (alone when no rows).
type Table struct {
	Header []string
	Rows   [][]string
	Lines  []string
	// Colour gives, by column, the SGR colour of a cell ("31": red; "" none); used only by a
	// Printer with Color set.
	Colour map[int]func(cell string) string
}

// ColumnGap is the blanks between two columns of a table.
const ColumnGap = 3

// Printable is a result; its JSON (-o json) must carry a "schema" number.
type Printable interface {
	Table(wide bool) Table
}

// JSONWriter writes its own JSON piece by piece, byte-identical to the encoder's.
type JSONWriter interface {
	WriteJSON(w io.Writer) error
}

// Printer writes results in one format.
type Printer struct {
	Format Format
	// Color paints table cells (a terminal that did not set NO_COLOR); never JSON.
	Color bool
}

// Render returns v as the bytes Print would write.
func (p Printer) Render(v Printable) ([]byte, error) {
	var buf bytes.Buffer
	if p.Format == FormatJSON {
		if err := p.Print(&buf, v); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	t := v.Table(p.Format == FormatWide)
	if !p.Color {
		t.Colour = nil
	}
	if len(t.Rows) > 0 {
		if err := writeTable(&buf, t); err != nil {
			return nil, err
		}
	}
	for _, l := range t.Lines {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	return buf.Bytes(), nil
}

// Print writes v to w; JSON goes straight from the encoder (10,000 envs are 12 MB: no copies).
func (p Printer) Print(w io.Writer, v Printable) error {
	if p.Format == FormatPrometheus {
		return errors.New("render: -o prometheus is for fleetctl status only")
	}
	if p.Format == FormatJSON {
		if jw, ok := v.(JSONWriter); ok {
			if err := jw.WriteJSON(w); err != nil {
				return fmt.Errorf("render: %w", err)
			}
			return nil
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("render: %w", err)
		}
		return nil
	}
	b, err := p.Render(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// writeTable draws a borderless, left-aligned table as kubectl and nomad do: easy to grep and cut.
func writeTable(w io.Writer, t Table) error {
	var buf bytes.Buffer
	pad := tw.CellPadding{Global: tw.Padding{Left: "", Right: strings.Repeat(" ", ColumnGap), Overwrite: true}}
	tbl := tablewriter.NewTable(&buf,
		tablewriter.WithRenderer(renderer.NewBlueprint(tw.Rendition{
			Borders: tw.BorderNone,
			Symbols: tw.NewSymbols(tw.StyleNone),
			Settings: tw.Settings{
				Separators: tw.Separators{ShowHeader: tw.Off, ShowFooter: tw.Off, BetweenRows: tw.Off, BetweenColumns: tw.Off},
				Lines:      tw.Lines{ShowTop: tw.Off, ShowBottom: tw.Off, ShowHeaderLine: tw.Off, ShowFooterLine: tw.Off},
			},
		})),
		tablewriter.WithConfig(tablewriter.Config{
			Header: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoFormat: tw.Off, AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    pad,
			},
			Row: tw.CellConfig{
				Formatting: tw.CellFormatting{AutoWrap: tw.WrapNone},
				Alignment:  tw.CellAlignment{Global: tw.AlignLeft},
				Padding:    pad,
			},
		}),
	)
	header := make([]any, len(t.Header))
	for i, h := range t.Header {
		header[i] = h
	}
	tbl.Header(header...)
	for _, r := range t.Rows {
		cells := make([]string, len(r))
		for i, c := range r {
			if c == "" {
				c = "-" // an empty cell would shift what cut and awk see
			}
			if paint := t.Colour[i]; paint != nil {
				if sgr := paint(c); sgr != "" {
					c = "\x1b[" + sgr + "m" + c + "\x1b[0m"
				}
			}
			cells[i] = c
		}
		if err := tbl.Append(cells); err != nil {
			return fmt.Errorf("render: %w", err)
		}
	}
	if err := tbl.Render(); err != nil {
		return fmt.Errorf("render: %w", err)
	}
	// tablewriter pads the last column; trailing blanks only make diffs and goldens noisy.
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		if _, err := io.WriteString(w, strings.TrimRight(l, " ")+"\n"); err != nil {
			return err
		}
	}
	return nil
}
