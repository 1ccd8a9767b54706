package report

import (
	"bufio"
	"io"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// encodeOptions make jsonv2 write what an indenting encoding/json Encoder with HTML escaping off
// writes for a Document (nil slices and maps as null, map keys sorted, invalid UTF-8 replaced,
// U+2028 and U+2029 escaped; no field of it is omitempty or ,string, where v1's rules differ), in
// one pass: v1 marshals, then indents the result.
var encodeOptions = jsonv2.JoinOptions(jsonv2.FormatNilSliceAsNull(true), jsonv2.FormatNilMapAsNull(true),
	jsonv2.Deterministic(true), jsontext.AllowInvalidUTF8(true), jsontext.EscapeForJS(true),
	jsontext.EscapeForHTML(false), jsontext.Multiline(true), jsontext.WithIndent("  "))

// WriteJSON writes what an indenting json.Encoder would, one env at a time as it is encoded:
// building 10,000 envs whole cost tens of megabytes and a fifth of fleetctl's time.
func (d *Document) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := jsontext.NewEncoder(bw, encodeOptions)
	for _, tok := range []jsontext.Token{jsontext.BeginObject, jsontext.String("schema"), jsontext.Int(int64(d.Schema)),
		jsontext.String("now"), jsontext.String(d.Now), jsontext.String("summary")} {
		if err := enc.WriteToken(tok); err != nil {
			return err
		}
	}
	if err := jsonv2.MarshalEncode(enc, d.Summary); err != nil {
		return err
	}
	if err := enc.WriteToken(jsontext.String("envs")); err != nil {
		return err
	}
	if d.Envs == nil {
		if err := enc.WriteToken(jsontext.Null); err != nil {
			return err
		}
	} else {
		if err := enc.WriteToken(jsontext.BeginArray); err != nil {
			return err
		}
		for i := range d.Envs {
			if err := jsonv2.MarshalEncode(enc, &d.Envs[i]); err != nil {
				return err
			}
		}
		if err := enc.WriteToken(jsontext.EndArray); err != nil {
			return err
		}
	}
	if err := enc.WriteToken(jsontext.EndObject); err != nil {
		return err
	}
	return bw.Flush()
}
