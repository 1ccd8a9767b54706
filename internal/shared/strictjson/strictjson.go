// Package strictjson decodes JSON as its writer meant it: encoding/json matches keys
// case-insensitively and keeps the last of two, so `{"allow_privileged": false,
// "ALLOW_PRIVILEGED": true}` reads as true. encoding/json/v2's defaults (go-json-experiment/json)
// match exactly and refuse duplicates; unknown members are ignored, as a newer peer's must be.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
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
	var syn *jsontext.SyntacticError
	var sem *jsonv2.SemanticError
	switch {
	case errors.As(err, &syn):
		e := &Error{Pointer: string(syn.JSONPointer), Offset: syn.ByteOffset}
		if errors.Is(syn.Err, jsontext.ErrDuplicateName) {
			e.Duplicate, e.Offset = true, -1
		} else {
			e.Trailing = trailing(data)
		}
		e.Field, e.Key = dotted(syn.JSONPointer), syn.JSONPointer.LastToken()
		return e
	case errors.As(err, &sem):
		return &Error{Pointer: string(sem.JSONPointer), Field: dotted(sem.JSONPointer), Key: sem.JSONPointer.LastToken(), Got: kindName(sem.JSONKind), Offset: -1}
	}
	return &Error{Offset: -1}
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
