package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
)

// WriteJSON writes what an indenting json.Encoder would, one env at a time: building 10,000
// envs whole cost tens of megabytes and a fifth of fleetctl's time.
func (d *Document) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	head, err := encode(struct {
		Schema  int            `json:"schema"`
		Now     string         `json:"now"`
		Summary map[string]int `json:"summary"`
	}{d.Schema, d.Now, d.Summary}, "")
	if err != nil {
		return err
	}
	// head is `{ … "summary": {…}\n}`; the envs go before its closing brace.
	bw.Write(bytes.TrimSuffix(head, []byte("\n}")))
	if d.Envs == nil {
		bw.WriteString(",\n  \"envs\": null\n}\n")
		return bw.Flush()
	}
	if len(d.Envs) == 0 {
		bw.WriteString(",\n  \"envs\": []\n}\n")
		return bw.Flush()
	}
	bw.WriteString(",\n  \"envs\": [")
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("    ", "  ")
	for i := range d.Envs {
		if i > 0 {
			bw.WriteByte(',')
		}
		buf.Reset()
		if err := enc.Encode(&d.Envs[i]); err != nil {
			return err
		}
		bw.WriteString("\n    ")
		bw.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	}
	bw.WriteString("\n  ]\n}\n")
	return bw.Flush()
}

// encode marshals v indented under prefix, without HTML escaping or trailing newline.
func encode(v any, prefix string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
