package metrics

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
)

// Whatever a label value or sample holds (quotes, backslashes, newlines, a huge value, NaN, Inf),
// expfmt's parser reads the textfile and gives the value back.
func TestTextfileParsesForEveryLabelAndValue(t *testing.T) {
	for _, v := range []string{`a"b`, `a\b`, "a\nb", "a\rb", "a\tb", `\`, `"`, `\n`, "}", `{x="y"}`, "\u2028", "é", strings.Repeat("x", 1<<20), "a\x00b", "# HELP x"} {
		tk := fullTick()
		tk.Version = v
		tk.Disk = []Disk{{Path: v, FreeBytes: 1}}
		tk.State.LastResult = "failed"
		data, err := Encode(tk)
		if err != nil {
			t.Fatalf("%q: %v", v[:min(len(v), 20)], err)
		}
		var p expfmt.TextParser
		fams, err := p.TextToMetricFamilies(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%q: %v", v[:min(len(v), 20)], err)
		}
		got := ""
		for _, l := range fams["monky_deployd_info"].Metric[0].Label {
			if l.GetName() == "version" {
				got = l.GetValue()
			}
		}
		if got != v {
			t.Errorf("%q: read back %q", v[:min(len(v), 20)], got[:min(len(got), 20)])
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), 1e300, math.Copysign(0, -1), math.SmallestNonzeroFloat64, 1e21, 123456789012} {
		var p page
		p.add(gaugeType, "x", "h\\e\nl\"p", f, "")
		data, err := p.text()
		if err != nil {
			t.Fatal(err)
		}
		var tp expfmt.TextParser
		if _, err := tp.TextToMetricFamilies(bytes.NewReader(data)); err != nil {
			t.Errorf("%v: %v\n%s", f, err, data)
		}
	}
}
