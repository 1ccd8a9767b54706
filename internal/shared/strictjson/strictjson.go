// Package strictjson decodes JSON as its writer meant it: encoding/json matches keys
// case-insensitively and keeps the last of two, so `{"allow_privileged": false,
// "ALLOW_PRIVILEGED": true}` reads as true. encoding/json/v2's defaults (go-json-experiment/json)
// match exactly and refuse duplicates; unknown members are ignored, as a newer peer's must be.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// ErrDuplicateKey is matched (errors.Is) by an *Error for a key given twice in one object.
var ErrDuplicateKey = errors.New("duplicate key")

// Error is a document that does not decode; it never quotes a value (an answer may hold a secret).
type Error struct {
	// Field is the member at fault, dotted, indexes left out ("entries.var"); "" is the document.
	Field string
	// Pointer is the same place as a JSON pointer, indexes kept ("/entries/2/var").
	Pointer string
	// Key is the last member name of the place, unescaped (a file path of a bundle's files).
	Key string
	// Got is the JSON kind found where another was wanted ("string", "null"…); "" if no type error.
	Got string
	// Duplicate: Field was given twice in one object.
	Duplicate bool
	// Trailing: the document is one JSON value followed by more than white space.
	Trailing bool
	// Offset is the byte offset of a syntax error, -1 for the other errors.
	Offset int64
}

func (e *Error) Error() string {
	at := ""
	if e.Pointer != "" {
		at = " at " + short(e.Field)
	}
	switch {
	case e.Duplicate:
		return fmt.Sprintf("key %s given twice in one object", short(e.Field))
	case e.Got != "":
		return fmt.Sprintf("unexpected JSON %s%s", e.Got, at)
	case e.Trailing:
		return fmt.Sprintf("trailing data after the JSON value at byte %d", e.Offset)
	case e.Offset >= 0:
		return fmt.Sprintf("not valid JSON at byte %d", e.Offset)
	}
	return "not valid JSON" + at
}

// Is matches ErrDuplicateKey.
func (e *Error) Is(target error) bool { return target == ErrDuplicateKey && e.Duplicate }

// Unmarshal decodes data into v; every error is an *Error (Duplicate set for a repeated key),
// invalid UTF-8 and trailing data included.
func Unmarshal(data []byte, v any) error {
	err := jsonv2.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	return classify(err, func() bool { return trailing(data) })
}

// classify turns what jsonv2 and jsontext return into an *Error; isTrailing tells, for a syntax
// error, whether a whole value came before it.
func classify(err error, isTrailing func() bool) error {
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.As(err, &syn):
		e := &Error{Pointer: string(syn.JSONPointer), Offset: syn.ByteOffset}
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			e.Duplicate, e.Offset = true, -1
		} else {
			e.Trailing = isTrailing()
		}
		e.Field, e.Key = dotted(syn.JSONPointer), syn.JSONPointer.LastToken()
		return e
	case errors.As(err, &sem):
		return &Error{Pointer: string(sem.JSONPointer), Field: dotted(sem.JSONPointer), Key: sem.JSONPointer.LastToken(), Got: kindName(sem.JSONKind), Offset: -1}
	}
	return &Error{Offset: -1}
}

// Decoder reads one JSON document from a stream as Unmarshal reads it whole (keys matched
// exactly, none given twice, valid UTF-8, nothing after the value), value by value: a large
// answer is decoded as it arrives and never held whole. Every error is an *Error whose Pointer
// and Field are the place in the whole document; an error of the reader itself is returned as
// it is (a cut connection is not a malformed answer).
type Decoder struct {
	dec *jsontext.Decoder
	// readErr is the reader's own failure, which jsontext reports as a syntax error.
	rd *errReader
}

// NewDecoder reads from r.
func NewDecoder(r io.Reader) *Decoder {
	rd := &errReader{r: r}
	return &Decoder{dec: jsontext.NewDecoder(rd), rd: rd}
}

type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

func (d *Decoder) wrap(err error) error {
	if err == nil {
		return nil
	}
	if d.rd.err != nil {
		return d.rd.err
	}
	if err == io.EOF { // the stream ended where a value was due
		err = &jsontext.SyntacticError{ByteOffset: d.dec.InputOffset() + int64(len(d.dec.UnreadBuffer())), Err: io.ErrUnexpectedEOF}
	}
	// A syntax error inside the document is never trailing data: End reports that.
	return classify(err, func() bool { return false })
}

// ReadToken reads the next token (an object's or array's delimiter, a name, a scalar).
func (d *Decoder) ReadToken() (jsontext.Token, error) {
	tok, err := d.dec.ReadToken()
	return tok, d.wrap(err)
}

// PeekKind is the kind of the next token without reading it; 0 at an error or the end.
func (d *Decoder) PeekKind() jsontext.Kind { return d.dec.PeekKind() }

// Decode reads the next value into v, as Unmarshal would that value.
func (d *Decoder) Decode(v any) error { return d.wrap(jsonv2.UnmarshalDecode(d.dec, v)) }

// SkipValue reads the next value and drops it (its keys are still checked).
func (d *Decoder) SkipValue() error { return d.wrap(d.dec.SkipValue()) }

// End checks that nothing but white space follows the document: anything else is an *Error
// with Trailing set.
func (d *Decoder) End() error {
	k := d.dec.PeekKind() // reads up to the next token: the unread buffer starts with it
	if d.rd.err != nil {
		return d.rd.err
	}
	buf := d.dec.UnreadBuffer()
	rest := bytes.TrimLeft(buf, " \t\r\n")
	at := d.dec.InputOffset() + int64(len(buf)-len(rest))
	if k == 0 && len(rest) == 0 {
		if _, err := d.dec.ReadToken(); err == io.EOF {
			return nil
		}
	}
	// As Unmarshal: what Go calls white space but JSON does not (a vertical tab) is a syntax
	// error, not trailing data.
	if k == 0 && len(bytes.TrimSpace(rest)) == 0 {
		more, _ := io.ReadAll(io.LimitReader(d.rd, 64<<10))
		if len(bytes.TrimSpace(more)) == 0 {
			return &Error{Offset: at}
		}
	}
	return &Error{Trailing: true, Offset: at}
}

// Decode reads one JSON document from r into v as Unmarshal does, without holding it whole.
func Decode(r io.Reader, v any) error {
	d := NewDecoder(r)
	if err := d.Decode(v); err != nil {
		return err
	}
	return d.End()
}

// trailing tells whether data starts with one whole JSON value and goes on after it.
func trailing(data []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	if _, err := dec.ReadValue(); err != nil {
		return false
	}
	return len(bytes.TrimSpace(data[dec.InputOffset():])) > 0
}

// Path is the place as a reader writes it: entries[2].var.
func (e *Error) Path() string {
	var b strings.Builder
	for tok := range jsontext.Pointer(e.Pointer).Tokens() {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	return b.String()
}

// dotted turns /entries/2/var into entries.var; an all-digit member is an index (no field has
// such a name).
func dotted(p jsontext.Pointer) string {
	var parts []string
	for tok := range p.Tokens() {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			continue
		}
		parts = append(parts, tok)
	}
	return strings.Join(parts, ".")
}

// short quotes a member path for a message, cut at 64 bytes: names come from the document.
func short(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…"
	}
	return strconv.Quote(s)
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "string"
	case '0':
		return "number"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return ""
}
