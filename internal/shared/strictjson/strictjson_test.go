package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

type meta struct {
	Agent struct {
		AllowPrivileged bool `json:"allow_privileged"`
	} `json:"agent"`
	Files []string        `json:"files"`
	Raw   json.RawMessage `json:"raw"`
}

func TestUnmarshal(t *testing.T) {
	for _, tc := range []struct {
		name, in  string
		want      bool   // agent.allow_privileged after a successful decode
		wantErr   string // substring of the error, "" for none
		field     string
		duplicate bool
	}{
		{name: "exact key", in: `{"agent": {"allow_privileged": true}}`, want: true},
		{name: "a key in another case is an unknown member", in: `{"agent": {"allow_privileged": false, "ALLOW_PRIVILEGED": true}}`},
		{name: "only the other case", in: `{"AGENT": {"allow_privileged": true}}`},
		{name: "duplicate key", in: `{"agent": {"allow_privileged": false, "allow_privileged": true}}`,
			wantErr: `key "agent.allow_privileged" given twice`, field: "agent.allow_privileged", duplicate: true},
		{name: "duplicate at top", in: `{"files": [], "files": ["a"]}`, wantErr: "given twice", field: "files", duplicate: true},
		{name: "duplicate inside a raw member", in: `{"raw": {"a": 1, "a": 2}}`, wantErr: "given twice", field: "raw.a", duplicate: true},
		{name: "duplicate inside an ignored member", in: `{"other": [{"a": 1, "a": 2}]}`, wantErr: "given twice", field: "other.a", duplicate: true},
		{name: "escaped duplicate", in: `{"files": [], "fil\u0065s": []}`, wantErr: "given twice", field: "files", duplicate: true},
		{name: "wrong type", in: `{"agent": {"allow_privileged": "yes"}}`, wantErr: `unexpected JSON string at "agent.allow_privileged"`, field: "agent.allow_privileged"},
		{name: "wrong element type", in: `{"files": ["a", 3]}`, wantErr: `unexpected JSON number at "files"`, field: "files"},
		{name: "not an object", in: `[]`, wantErr: "unexpected JSON array"},
		{name: "syntax", in: `{"agent": `, wantErr: "not valid JSON at byte", field: "agent"},
		{name: "trailing data", in: `{} {}`, wantErr: "trailing data after the JSON value at byte 3"},
		{name: "invalid UTF-8", in: "{\"files\": [\"\xff\"]}", wantErr: "not valid JSON at byte", field: "files"},
		{name: "empty", in: ``, wantErr: "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var m, streamed meta
			err := Unmarshal([]byte(tc.in), &m)
			// The stream decoder reads the same document the same way, a byte at a time.
			serr := Decode(iotest.OneByteReader(strings.NewReader(tc.in)), &streamed)
			if !sameError(err, serr) || !reflect.DeepEqual(m, streamed) {
				t.Errorf("Decode = %#v, %+v; Unmarshal %#v, %+v", serr, streamed, err, m)
			}
			if tc.wantErr == "" {
				if err != nil || m.Agent.AllowPrivileged != tc.want {
					t.Fatalf("Unmarshal = %v, allow_privileged %v; want nil, %v", err, m.Agent.AllowPrivileged, tc.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Unmarshal = %v (%T), want an *Error with %q", err, err, tc.wantErr)
			}
			if e.Field != tc.field || e.Duplicate != tc.duplicate || errors.Is(err, ErrDuplicateKey) != tc.duplicate {
				t.Errorf("Field %q Duplicate %v, want %q %v", e.Field, e.Duplicate, tc.field, tc.duplicate)
			}
		})
	}
}

// The error text names members and kinds, never a value: answers carry grants and tokens.
func TestErrorsQuoteNoValue(t *testing.T) {
	const secret = "eyJhbGciOiJFZERTQSJ9.c2VjcmV0"
	for _, in := range []string{
		`{"files": "` + secret + `"}`,
		`{"agent": {"allow_privileged": "` + secret + `"}}`,
		`{"x": "` + secret + `", "x": "` + secret + `"}`,
		`{"x": "` + secret + `" ` + secret + `}`,
		`"` + secret,
	} {
		var m meta
		if err := Unmarshal([]byte(in), &m); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("Unmarshal(%s) = %v", in, err)
		}
	}
}

// FuzzUnmarshal holds strictjson to encoding/json where both accept a document, and checks
// the two promises encoding/json does not keep: no key given twice is accepted, and a field is
// only set from a key spelled exactly as its name.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"agent": {"allow_privileged": true}}`,
		`{"agent": {"allow_privileged": false, "ALLOW_PRIVILEGED": true}}`,
		`{"agent": {"Allow_Privileged": true}}`,
		`{"files": ["a"], "files": []}`,
		`{"raw": {"a": {"b": 1, "b": 2}}}`,
		`{"a": [1, {"x": null}], "fil\u0065s": ["\u00e9"]}`,
		`[{"a":1},{"a":1}]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m, streamed meta
		err := Unmarshal(data, &m)
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("error %v is a %T, not an *Error", err, err)
		}
		if serr := Decode(bytes.NewReader(data), &streamed); !sameError(err, serr) || (err == nil && !reflect.DeepEqual(m, streamed)) {
			t.Fatalf("Decode = %#v, %+v; Unmarshal %#v, %+v: %q", serr, streamed, err, m, data)
		}
		dup, loose := inspect(data)
		if dup && err == nil {
			t.Fatalf("a duplicate key was accepted: %s", data)
		}
		if err != nil {
			return
		}
		var old meta
		if jerr := json.Unmarshal(data, &old); jerr != nil {
			t.Fatalf("strictjson accepted what encoding/json refuses (%v): %s", jerr, data)
		}
		if !loose && !reflect.DeepEqual(m, old) {
			t.Fatalf("strictjson read %+v, encoding/json %+v: %s", m, old, data)
		}
		// allow_privileged is true only when the document says so under exactly that name.
		var generic map[string]any
		_ = json.Unmarshal(data, &generic)
		agent, _ := generic["agent"].(map[string]any)
		if m.Agent.AllowPrivileged && agent["allow_privileged"] != true {
			t.Fatalf("allow_privileged set from another key: %s", data)
		}
	})
}

// sameError: the stream decoder refuses what Unmarshal refuses, for the same reason at the same
// place. A syntax error is at the same byte; its member may differ (jsonv2's own buffered and
// streaming decoders name a truncated `{{"0"` differently).
func sameError(a, b error) bool {
	var ea, eb *Error
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if !errors.As(a, &ea) || !errors.As(b, &eb) {
		return false
	}
	if ea.Got == "" && !ea.Duplicate && !ea.Trailing {
		return eb.Got == "" && !eb.Duplicate && !eb.Trailing && ea.Offset == eb.Offset
	}
	return *ea == *eb
}

// A reader's own failure is not a malformed document: Decode returns it as it is.
func TestDecodeReaderError(t *testing.T) {
	cut := errors.New("connection reset")
	var m meta
	err := Decode(io.MultiReader(strings.NewReader(`{"files": ["a", `), iotest.ErrReader(cut)), &m)
	if err != cut {
		t.Fatalf("Decode = %#v, want the reader's error", err)
	}
}

// Token by token, a member after the one decoded still counts twice, and End finds trailing data.
func TestDecoderTokens(t *testing.T) {
	d := NewDecoder(strings.NewReader(`{"files": ["a"], "files": []}`))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		t.Fatal(tok, err)
	}
	if tok, err := d.ReadToken(); err != nil || tok.String() != "files" {
		t.Fatal(tok, err)
	}
	var files []string
	if err := d.Decode(&files); err != nil {
		t.Fatal(err)
	}
	_, err := d.ReadToken()
	var e *Error
	if !errors.As(err, &e) || !e.Duplicate || e.Field != "files" {
		t.Fatalf("second files: %#v", err)
	}
	d = NewDecoder(strings.NewReader(`{"files": [1]}`))
	_, _ = d.ReadToken()
	_, _ = d.ReadToken()
	if err := d.Decode(&files); !errors.As(err, &e) || e.Field != "files" || e.Got != "number" || e.Pointer != "/files/0" {
		t.Fatalf("a number in files: %#v", err)
	}
	d = NewDecoder(strings.NewReader("{}\n x"))
	if err := d.SkipValue(); err != nil {
		t.Fatal(err)
	}
	if err := d.End(); !errors.As(err, &e) || !e.Trailing || e.Offset != 4 {
		t.Fatalf("End = %#v", err)
	}
}

// inspect walks data with encoding/json's tokenizer and tells whether an object holds a key
// twice (as decoded, escapes resolved), and whether any key differs only in case from another
// key or from a field name of meta (where encoding/json and strictjson may rightly differ).
func inspect(data []byte) (dup, loose bool) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	type frame struct {
		object  bool
		keys    map[string]bool
		wantKey bool
	}
	var stack []*frame
	known := map[string]bool{"agent": true, "allow_privileged": true, "files": true, "raw": true}
	for {
		tok, err := dec.Token()
		if err != nil {
			return dup, loose
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				if top != nil && top.object {
					top.wantKey = true
				}
				stack = append(stack, &frame{object: d == '{', keys: map[string]bool{}, wantKey: true})
			default:
				stack = stack[:len(stack)-1]
			}
			continue
		}
		if top != nil && top.object && top.wantKey {
			k := tok.(string)
			if top.keys[k] {
				dup = true
			}
			for seen := range top.keys {
				if seen != k && strings.EqualFold(seen, k) {
					loose = true
				}
			}
			for name := range known {
				if name != k && strings.EqualFold(name, k) {
					loose = true
				}
			}
			top.keys[k] = true
			top.wantKey = false
			continue
		}
		if top != nil && top.object {
			top.wantKey = true
		}
	}
}

func TestKeyIsUnescaped(t *testing.T) {
	var v struct {
		Files map[string]string `json:"files"`
	}
	err := Unmarshal([]byte(`{"files": {"compose/a~b.yml": "x", "compose\/a~b.yml": "y"}}`), &v)
	var e *Error
	if !errors.As(err, &e) || !e.Duplicate || e.Key != "compose/a~b.yml" || e.Field != "files.compose/a~b.yml" || e.Path() != "files.compose/a~b.yml" {
		t.Fatalf("Unmarshal = %#v", err)
	}
}

func TestPath(t *testing.T) {
	var v struct {
		Entries []map[string]any `json:"entries"`
	}
	err := Unmarshal([]byte(`{"entries": [{}, {"var": "A", "var": "B"}]}`), &v)
	var e *Error
	if !errors.As(err, &e) || e.Path() != "entries[1].var" || e.Field != "entries.var" {
		t.Fatalf("Unmarshal = %v, Path %q", err, e.Path())
	}
}
