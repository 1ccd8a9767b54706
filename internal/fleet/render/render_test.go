package render

import (
	"encoding/json"
	"strings"
	"testing"
)

type doc struct {
	Schema int      `json:"schema"`
	Items  []string `json:"items"`
	rows   [][]string
}

func (d doc) Table(wide bool) Table {
	h := []string{"NAME", "STATE"}
	if wide {
		h = append(h, "EXTRA")
	}
	rows := d.rows
	if wide {
		rows = nil
		for _, r := range d.rows {
			rows = append(rows, append(append([]string{}, r...), "x"))
		}
	}
	return Table{Header: h, Rows: rows, Lines: []string{"summary line"}}
}

func TestParseFormat(t *testing.T) {
	for _, s := range []string{"table", "wide", "json"} {
		if _, err := ParseFormat(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"", "yaml", "JSON"} {
		if _, err := ParseFormat(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestPrinter(t *testing.T) {
	d := doc{Schema: 1, Items: []string{"a"}, rows: [][]string{{"alpha", "ok"}, {"b", ""}}}
	for _, tc := range []struct {
		format Format
		want   string
	}{
		{FormatTable, "NAME    STATE\nalpha   ok\nb       -\nsummary line\n"},
		{FormatWide, "NAME    STATE   EXTRA\nalpha   ok      x\nb       -       x\nsummary line\n"},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			b, err := Printer{Format: tc.format}.Render(d)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("got\n%q\nwant\n%q", b, tc.want)
			}
		})
	}
	t.Run("json", func(t *testing.T) {
		b, err := Printer{Format: FormatJSON}.Render(d)
		if err != nil {
			t.Fatal(err)
		}
		var back map[string]any
		if err := json.Unmarshal(b, &back); err != nil || back["schema"] != float64(1) {
			t.Fatalf("%s: %v", b, err)
		}
	})
	t.Run("no rows prints the lines only", func(t *testing.T) {
		b, err := Printer{Format: FormatTable}.Render(doc{})
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "summary line\n" {
			t.Errorf("got %q", b)
		}
	})
	t.Run("no trailing blanks", func(t *testing.T) {
		b, _ := Printer{Format: FormatTable}.Render(d)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasSuffix(l, " ") {
				t.Errorf("trailing blank in %q", l)
			}
		}
	})
}
