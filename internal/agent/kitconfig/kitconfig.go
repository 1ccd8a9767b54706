// Package kitconfig merges the install kit's keys into a box's config.yaml. install.sh and the
// ansible role own only the keys they write (env_id, site, transport, identity, laptop_mode, the
// tenancy and OpenBao addresses, and the role's monky_deployd_extra_config); every other key an
// operator set, and every comment, stays. A re-run that would change no value changes nothing:
// Merge hands back the file's own bytes, so the kit can compare and rewrite nothing.
package kitconfig

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/yamldoc"
)

// maxSize bounds each input: a config is a few hundred bytes.
const maxSize = 1 << 20

// Result is a merge's outcome.
type Result struct {
	// Config is the file to write: the existing bytes when Changed is empty.
	Config []byte
	// Changed are the dotted keys whose value the kit set or changed, in the kit's order, and
	// "(header)" when only the kit's header comment changed.
	Changed []string
}

// Error is a kit or config the merge refuses; File is "kit" or the config's path.
type Error struct {
	File string
	Msg  string
	Err  error
}

func (e *Error) Error() string { return e.File + ": " + e.Msg }
func (e *Error) Unwrap() error { return e.Err }

// Merge sets every key of kit (a config.yaml fragment, its head comment the kit's header) in
// existing (the box's config.yaml, nil or empty when there is none), keeping every other key,
// value and comment. The result must load as the agent loads it (config.Parse), or Merge
// refuses with the loader's words: a kit never writes a config the agent would stop on.
func Merge(existing, kit []byte, path string) (Result, error) {
	if len(existing) > maxSize || len(kit) > maxSize {
		return Result{}, &Error{File: path, Msg: fmt.Sprintf("larger than %d bytes", maxSize)}
	}
	kitDoc, err := document(kit, "kit")
	if err != nil {
		return Result{}, err
	}
	if kitDoc == nil || kitDoc.Content[0].Kind != yaml.MappingNode {
		return Result{}, &Error{File: "kit", Msg: "want a mapping of the kit's keys"}
	}
	if k := twice(kitDoc.Content[0], ""); k != "" {
		// Which of the two would the box get? Neither: a kit sets each key once.
		return Result{}, &Error{File: "kit", Msg: fmt.Sprintf("sets %s twice", k)}
	}
	doc, err := document(existing, path)
	if err != nil {
		return Result{}, &Error{File: path, Msg: err.(*Error).Msg + " — fix or move the file, then re-run the kit", Err: err}
	}
	if doc == nil {
		// No config yet (or only comments): the kit's file is the config.
		if err := loads(kit, path); err != nil {
			return Result{}, err
		}
		return Result{Config: kit, Changed: keys(kitDoc.Content[0], "")}, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Result{}, &Error{File: path, Msg: "is not a mapping of keys — fix or move the file, then re-run the kit"}
	}
	changed := merge(root, kitDoc.Content[0], "")
	if len(changed) == 0 && currentHeader(doc) {
		// No value changes and the file already carries a kit's header (install.sh's or the
		// role's): the file stays as it is, so a box run by both kits does not swap headers on
		// every run of each.
		return Result{Config: existing}, nil
	}
	if setHeader(doc, kitDoc) {
		changed = append([]string{"(header)"}, changed...)
	}
	if len(changed) == 0 {
		return Result{Config: existing}, nil
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return Result{}, &Error{File: path, Msg: "cannot write the merged config: " + err.Error(), Err: err}
	}
	if err := enc.Close(); err != nil {
		return Result{}, &Error{File: path, Msg: "cannot write the merged config: " + err.Error(), Err: err}
	}
	if err := loads(b.Bytes(), path); err != nil {
		return Result{}, err
	}
	return Result{Config: b.Bytes(), Changed: changed}, nil
}

// document parses one YAML document; nil for an empty or comment-only file.
func document(data []byte, file string) (*yaml.Node, error) {
	if _, err := yamldoc.Root(data); err != nil {
		var de *yamldoc.Error
		if errors.As(err, &de) && de.Line > 0 {
			return nil, &Error{File: file, Msg: fmt.Sprintf("%s (line %d)", de.Msg, de.Line), Err: err}
		}
		return nil, &Error{File: file, Msg: err.Error(), Err: err}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{File: file, Msg: "invalid YAML: " + err.Error(), Err: err}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || yamldoc.IsNull(doc.Content[0]) {
		return nil, nil
	}
	return &doc, nil
}

// loads is the agent's own verdict on a config.
func loads(data []byte, path string) error {
	if _, err := config.Parse(data, path); err != nil {
		return &Error{File: path, Msg: "the merged config would not load: " + err.Error(), Err: err}
	}
	return nil
}

// merge sets kit's keys in dst, recursing into mappings both have; it returns the dotted keys
// it set or changed.
func merge(dst, kit *yaml.Node, prefix string) []string {
	var changed []string
	for i := 0; i+1 < len(kit.Content); i += 2 {
		k, v := kit.Content[i], kit.Content[i+1]
		key := prefix + k.Value
		j := find(dst, k.Value)
		if j < 0 {
			dst.Content = append(dst.Content, clone(k), clone(v))
			changed = append(changed, keys(v, key)...)
			if v.Kind != yaml.MappingNode {
				changed = append(changed, key)
			}
			continue
		}
		cur := dst.Content[j+1]
		if v.Kind == yaml.MappingNode && cur.Kind == yaml.MappingNode {
			changed = append(changed, merge(cur, v, key+".")...)
			continue
		}
		if equal(cur, v) {
			continue
		}
		nv := clone(v)
		if nv.LineComment == "" {
			nv.LineComment = cur.LineComment
		}
		nv.HeadComment, nv.FootComment = cur.HeadComment, cur.FootComment
		dst.Content[j+1] = nv
		changed = append(changed, key)
	}
	return changed
}

// keys are the dotted leaf keys under a mapping value (none for a scalar or a list).
func keys(n *yaml.Node, key string) []string {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	prefix := ""
	if key != "" {
		prefix = key + "."
	}
	var out []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if v.Kind == yaml.MappingNode {
			out = append(out, keys(v, prefix+k.Value)...)
		} else {
			out = append(out, prefix+k.Value)
		}
	}
	return out
}

// twice is the first key (dotted) that a mapping under n sets twice, "" when none does.
func twice(n *yaml.Node, key string) string {
	if n.Kind != yaml.MappingNode {
		return ""
	}
	prefix := ""
	if key != "" {
		prefix = key + "."
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		if seen[k] {
			return prefix + k
		}
		seen[k] = true
		if d := twice(v, prefix+k); d != "" {
			return d
		}
	}
	return ""
}

func find(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Kind == yaml.ScalarNode && m.Content[i].Value == key {
			return i
		}
	}
	return -1
}

// equal compares values as the loader reads them: kind, resolved tag and text; comments and
// quoting do not count.
func equal(a, b *yaml.Node) bool {
	if a.Kind == yaml.AliasNode || b.Kind == yaml.AliasNode || a.Kind != b.Kind || a.ShortTag() != b.ShortTag() {
		return false
	}
	if a.Kind == yaml.ScalarNode {
		return a.Value == b.Value
	}
	if len(a.Content) != len(b.Content) {
		return false
	}
	for i := range a.Content {
		if !equal(a.Content[i], b.Content[i]) {
			return false
		}
	}
	return true
}

func clone(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, ch := range n.Content {
		c.Content[i] = clone(ch)
	}
	return &c
}

// kitHeader says whether a comment line was written by an install kit (this one or 0.2.0's,
// whose two header lines sat right above env_id).
func kitHeader(line string) bool {
	for _, p := range []string{"# Written by install.sh", "# Written by ansible", "# Every key and its default"} {
		if strings.HasPrefix(strings.TrimSpace(line), p) {
			return true
		}
	}
	return false
}

// currentHeader says whether doc starts with the header of a kit that merges (install.sh's or the
// role's, at the top of the file). 0.2.0's header (above the first key, saying a re-run rewrites
// the file) is not current: a merge replaces it even when no value changes.
func currentHeader(doc *yaml.Node) bool {
	first, _, _ := strings.Cut(doc.HeadComment, "\n")
	first = strings.TrimSpace(first)
	if strings.Contains(doc.HeadComment, "rewrites it") {
		return false
	}
	return strings.HasPrefix(first, "# Written by install.sh") || strings.HasPrefix(first, "# Written by ansible")
}

// setHeader puts the kit's header at the top of doc, replacing an earlier kit's header and
// keeping an operator's own comment below it; it says whether anything changed.
func setHeader(doc, kitDoc *yaml.Node) bool {
	want := kitDoc.HeadComment
	if want == "" && len(kitDoc.Content[0].Content) > 0 {
		want = kitDoc.Content[0].Content[0].HeadComment
	}
	// The header is the document's head comment or, with no blank line below it, the first key's
	// (as yaml reads a kit whose header sits right above env_id): either way it is the same one.
	have := doc.HeadComment
	if root := doc.Content[0]; have == "" && len(root.Content) > 0 {
		have = root.Content[0].HeadComment
	}
	if have == want {
		return false
	}
	own := doc.HeadComment
	if lines := strings.Split(own, "\n"); len(lines) > 0 && kitHeader(lines[0]) {
		own = "" // an earlier kit's header, wholly replaced
	}
	// 0.2.0's header lines were the first key's head comment.
	if root := doc.Content[0]; len(root.Content) > 0 {
		first := root.Content[0]
		var keep []string
		for _, l := range strings.Split(first.HeadComment, "\n") {
			if l != "" && !kitHeader(l) {
				keep = append(keep, l)
			}
		}
		first.HeadComment = strings.Join(keep, "\n")
	}
	if own != "" {
		want += "\n\n" + own
	}
	if doc.HeadComment == want {
		return false
	}
	doc.HeadComment = want
	return true
}
