// Package yamldoc reads the one YAML document of a config file as a node tree, for the strict
// decoders that walk it key by key (unknown keys are errors naming the key and line).
package yamldoc

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a file that is not one YAML document. Line is 0 when the parser gave none.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Root returns the top node of data's only document, or nil when the file is empty, only
// comments, or null. A second document (`---`) is an error: its keys would be silently ignored.
func Root(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, &Error{Msg: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		return nil, &Error{Line: next.Line, Msg: "more than one YAML document (a second '---')"}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, &Error{Msg: "invalid YAML document"}
	}
	if root := doc.Content[0]; !IsNull(root) {
		return root, nil
	}
	return nil, nil
}

// IsNull reports whether n is an explicit or empty null (`key:`, `key: ~`), which the decoders
// read as absent.
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }
