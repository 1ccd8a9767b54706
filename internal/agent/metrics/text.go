package metrics

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The textfile is written by hand in the text exposition format (version 0.0.4), byte for byte
// what client_golang's pedantic registry and expfmt.MetricFamilyToText wrote before (the golden
// files in testdata are that output): families sorted by name, each with its HELP and TYPE, its
// series sorted by label values, labels by name. Linking client_golang cost every run of
// monky-deployd its init (a registry with Go and process collectors, ~1.2M instructions and a
// millisecond or more of a converged tick, issue 24); the agent never serves metrics.

const (
	gaugeType   = "gauge"
	counterType = "counter"
)

// page is the series of one textfile as they are added.
type page struct {
	families map[string]*family
	err      error
}

type family struct {
	help, typ string
	series    []series
}

type series struct {
	names, values []string // label names sorted, values in the same order
	value         float64
}

// add adds one series: labels are name, value pairs, env the label every series carries ("": none).
// What the pedantic registry refused is an error: a name added with another help or type, the
// same series twice, a label value that is no UTF-8.
func (p *page) add(typ, name, help string, v float64, env string, labels ...string) {
	if p.err != nil {
		return
	}
	name = Namespace + "_" + name
	if p.families == nil {
		p.families = map[string]*family{}
	}
	f := p.families[name]
	switch {
	case f == nil:
		f = &family{help: help, typ: typ}
		p.families[name] = f
	case f.help != help || f.typ != typ:
		p.err = fmt.Errorf("metrics: %s added as %s %q and as %s %q", name, f.typ, f.help, typ, help)
		return
	}
	s := series{value: v}
	if env != "" {
		s.names, s.values = append(s.names, "env"), append(s.values, env)
	}
	for i := 0; i+1 < len(labels); i += 2 {
		s.names, s.values = append(s.names, labels[i]), append(s.values, labels[i+1])
	}
	for _, lv := range s.values {
		if !utf8.ValidString(lv) {
			p.err = fmt.Errorf("metrics: %s: label value %q is not valid UTF-8", name, lv)
			return
		}
	}
	sortLabels(&s)
	for _, o := range f.series {
		if slices.Equal(o.names, s.names) && slices.Equal(o.values, s.values) {
			p.err = fmt.Errorf("metrics: %s{%s} added twice", name, strings.Join(s.values, ","))
			return
		}
	}
	f.series = append(f.series, s)
}

// sortLabels orders s's labels by name (insertion sort: a series has at most three).
func sortLabels(s *series) {
	for i := 1; i < len(s.names); i++ {
		for j := i; j > 0 && s.names[j] < s.names[j-1]; j-- {
			s.names[j], s.names[j-1] = s.names[j-1], s.names[j]
			s.values[j], s.values[j-1] = s.values[j-1], s.values[j]
		}
	}
}

// text writes the page in the text exposition format.
func (p *page) text() ([]byte, error) {
	if p.err != nil {
		return nil, p.err
	}
	names := make([]string, 0, len(p.families))
	for n := range p.families {
		names = append(names, n)
	}
	slices.Sort(names)
	var b bytes.Buffer
	b.Grow(4096)
	for _, n := range names {
		f := p.families[n]
		slices.SortStableFunc(f.series, func(x, y series) int { return slices.Compare(x.values, y.values) })
		b.WriteString("# HELP ")
		b.WriteString(n)
		b.WriteByte(' ')
		helpEscaper.WriteString(&b, f.help)
		b.WriteString("\n# TYPE ")
		b.WriteString(n)
		b.WriteByte(' ')
		b.WriteString(f.typ)
		b.WriteByte('\n')
		for _, s := range f.series {
			b.WriteString(n)
			if len(s.names) > 0 {
				b.WriteByte('{')
				for i, ln := range s.names {
					if i > 0 {
						b.WriteByte(',')
					}
					b.WriteString(ln)
					b.WriteString(`="`)
					valueEscaper.WriteString(&b, s.values[i])
					b.WriteByte('"')
				}
				b.WriteByte('}')
			}
			b.WriteByte(' ')
			b.Write(appendFloat(nil, s.value))
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), nil
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// appendFloat formats a sample value as expfmt does.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case f == 1:
		return append(b, '1')
	case f == 0:
		return append(b, '0')
	case f == -1:
		return append(b, "-1"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}
