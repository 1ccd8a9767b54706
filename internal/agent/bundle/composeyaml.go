package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limits on a compose file, checked before decoding into maps: yaml.v3's quadratic duplicate-key
// check held a tick 65 s on a 2 MiB flat mapping. Caps: size, alias-expanded nodes (~80 µs each
// in compose-go; 100 real services ≈ 6,000) and the sum of keys² over mappings.
const (
	MaxComposeBytes = 1 << 20
	maxComposeNodes = 30_000
	maxKeyWork      = 16 << 20
	// maxMergeDepth bounds `<<` merges of merges; maxMergeWork, pairs walked through merges.
	maxMergeDepth = 16
	maxMergeWork  = 4 * maxComposeNodes
	// MaxComposeDepth bounds nesting, aliases expanded: compose-go's loader spent 64 s on 18 KB
	// of lists nested 9,000 deep. Real files stay under 12 (a device request under deploy is 9).
	MaxComposeDepth = 64
)

// parseRaw reads every document as yaml.Node (linear), refusing past the caps times scale.
func parseRaw(data []byte, scale int) ([]*yaml.Node, error) {
	if len(data) > MaxComposeBytes*scale {
		return nil, fmt.Errorf("is %d bytes; the limit is %d (%d MiB)", len(data), MaxComposeBytes*scale, scale)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	c := &nodeCount{maxNodes: maxComposeNodes * scale, maxKeyWork: maxKeyWork * scale * scale}
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("is not valid YAML: %v", err)
		}
		if err := c.add(&n); err != nil {
			return nil, err
		}
		c.expanded += expandedSize(&n, map[*yaml.Node]int{}, c.maxNodes)
		if c.expanded > c.maxNodes {
			return nil, fmt.Errorf("expands through aliases to more than %d YAML nodes", c.maxNodes)
		}
		if expandedDepth(&n, map[*yaml.Node]int{}, MaxComposeDepth) > MaxComposeDepth {
			return nil, fmt.Errorf("nests deeper than %d levels (aliases expanded)", MaxComposeDepth)
		}
		docs = append(docs, &n)
	}
	return docs, nil
}

type nodeCount struct {
	nodes, keyWork, expanded int
	maxNodes, maxKeyWork     int
}

// expandedSize is n's node count with aliases expanded; memoised and saturating, so linear.
func expandedSize(n *yaml.Node, memo map[*yaml.Node]int, limit int) int {
	if n == nil {
		return 0
	}
	if n.Kind == yaml.AliasNode {
		return expandedSize(n.Alias, memo, limit)
	}
	if v, ok := memo[n]; ok {
		return v
	}
	memo[n] = limit + 1 // an anchor that contains itself expands without end
	size := 1
	for _, ch := range n.Content {
		size = min(size+expandedSize(ch, memo, limit), limit+1)
	}
	memo[n] = size
	return size
}

// expandedDepth is n's nesting depth with aliases expanded (a document node counts as none);
// memoised and saturating at limit+1, so linear. Run after expandedSize: no anchor holds itself.
func expandedDepth(n *yaml.Node, memo map[*yaml.Node]int, limit int) int {
	if n == nil {
		return 0
	}
	if n.Kind == yaml.AliasNode {
		return expandedDepth(n.Alias, memo, limit)
	}
	if v, ok := memo[n]; ok {
		return v
	}
	memo[n] = limit + 1 // an anchor reached through itself nests without end
	deepest := 0
	for _, ch := range n.Content {
		if deepest = max(deepest, expandedDepth(ch, memo, limit)); deepest > limit {
			break
		}
	}
	d := min(deepest+1, limit+1)
	if n.Kind == yaml.DocumentNode {
		d = deepest
	}
	memo[n] = d
	return d
}

// add counts n and everything under it (aliases count once: they are references).
func (c *nodeCount) add(n *yaml.Node) error {
	return c.addAt(n, 0)
}

func (c *nodeCount) addAt(n *yaml.Node, depth int) error {
	c.nodes++
	if c.nodes > c.maxNodes {
		return fmt.Errorf("has more than %d YAML nodes", c.maxNodes)
	}
	if depth > MaxComposeDepth+1 { // +1: the document node
		return fmt.Errorf("nests deeper than %d levels", MaxComposeDepth)
	}
	if n.Kind == yaml.MappingNode {
		k := len(n.Content) / 2
		c.keyWork += k * k
		if c.keyWork > c.maxKeyWork {
			return fmt.Errorf("has mappings of too many keys (%d in one)", k)
		}
	}
	for _, ch := range n.Content {
		if err := c.addAt(ch, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// rawWalk finds `include`, `extends.file` and judged settings holding a variable: compose
// interpolates before validating, so those are BUNDLE_INVALID whatever they hold.
type rawWalk struct {
	memo     map[*yaml.Node]bool
	work     int
	findings []Finding
	seen     map[string]bool
}

func walkRaw(docs []*yaml.Node) ([]Finding, error) {
	w := &rawWalk{memo: map[*yaml.Node]bool{}, seen: map[string]bool{}}
	for _, doc := range docs {
		root := doc
		if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
			root = root.Content[0]
		}
		if err := w.top(root); err != nil {
			return nil, err
		}
	}
	return w.findings, nil
}

func (w *rawWalk) add(f Finding) {
	k := f.String(true)
	if !w.seen[k] {
		w.seen[k] = true
		w.findings = append(w.findings, f)
	}
}

func (w *rawWalk) top(root *yaml.Node) error {
	top, err := w.pairs(root, 0)
	if err != nil {
		return err
	}
	for _, p := range top {
		switch p.key {
		case "include":
			w.add(Finding{Subject: "(file)", Key: "include", What: "other compose files are not allowed (the agent judges one file)", Invalid: true})
		case "services":
			services, err := w.pairs(p.val, 0)
			if err != nil {
				return err
			}
			for _, s := range services {
				if err := w.service(s.key, s.val); err != nil {
					return err
				}
			}
		case "volumes", "networks", "secrets", "configs", "models":
			entries, err := w.pairs(p.val, 0)
			if err != nil {
				return err
			}
			for _, e := range entries {
				fields, err := w.pairs(e.val, 0)
				if err != nil {
					return err
				}
				for _, f := range fields {
					if f.key == "labels" || strings.HasPrefix(f.key, "x-") {
						continue
					}
					if w.hasVar(f.val) {
						w.add(varFinding(topSubject(p.key, e.key), f.key))
					}
				}
			}
		}
	}
	return nil
}

func (w *rawWalk) service(name string, n *yaml.Node) error {
	fields, err := w.pairs(n, 0)
	if err != nil {
		return err
	}
	for _, f := range fields {
		if f.key == "extends" {
			ext, err := w.pairs(f.val, 0)
			if err != nil {
				return err
			}
			for _, e := range ext {
				if e.key == "file" {
					w.add(Finding{Subject: name, Key: "extends.file", What: "another compose file the agent does not judge", Invalid: true})
				}
			}
		}
		if !serviceKeyJudged(f.key) {
			continue
		}
		judged, err := w.judgedPart(f.key, f.val)
		if err != nil {
			return err
		}
		for _, n := range judged {
			if w.hasVar(n) {
				w.add(varFinding(name, f.key))
				break
			}
		}
	}
	return nil
}

// judgedPart is what the policy reads: all, but for `deploy` and `networks` only what it judges.
func (w *rawWalk) judgedPart(key string, n *yaml.Node) ([]*yaml.Node, error) {
	var path [][]string
	switch key {
	case "deploy":
		path = [][]string{{"resources"}, {"limits", "reservations"}, {"devices"}}
	case "networks":
		path = [][]string{nil, {"driver_opts"}}
	default:
		return []*yaml.Node{n}, nil
	}
	level := []*yaml.Node{n}
	for _, keys := range path {
		var next []*yaml.Node
		for _, m := range level {
			if r := resolve(m); r != nil && r.Kind == yaml.SequenceNode {
				// a service's networks may be a list of names: nothing judged there
				continue
			}
			ps, err := w.pairs(m, 0)
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if keys == nil || slices.Contains(keys, p.key) {
					next = append(next, p.val)
				}
			}
		}
		level = next
	}
	return level, nil
}

func varFinding(subject, key string) Finding {
	return Finding{Subject: subject, Key: key, What: "holds a variable: it cannot be judged before secrets are read (write it literally)", Invalid: true}
}

type pair struct {
	key string
	val *yaml.Node
}

// pairs lists a mapping's pairs, aliases resolved, every `<<` pair included (over-approximates).
func (w *rawWalk) pairs(n *yaml.Node, depth int) ([]pair, error) {
	if depth > maxMergeDepth {
		return nil, fmt.Errorf("merges (<<) nested deeper than %d", maxMergeDepth)
	}
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	var out []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		w.work++
		if w.work > maxMergeWork {
			return nil, errors.New("expands to too much through aliases and merges")
		}
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && k.Tag != "!!str" {
			src := resolve(v)
			var merged []*yaml.Node
			switch {
			case src == nil:
			case src.Kind == yaml.SequenceNode:
				merged = src.Content
			default:
				merged = []*yaml.Node{src}
			}
			for _, m := range merged {
				mp, err := w.pairs(m, depth+1)
				if err != nil {
					return nil, err
				}
				out = append(out, mp...)
			}
			continue
		}
		out = append(out, pair{key: k.Value, val: v})
	}
	return out, nil
}

func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

// hasVar reports whether a value under n holds an unescaped `$`; memoised per node.
func (w *rawWalk) hasVar(n *yaml.Node) bool {
	n = resolve(n)
	if n == nil {
		return false
	}
	if v, ok := w.memo[n]; ok {
		return v
	}
	w.memo[n] = false // a node reached again through itself adds nothing
	found := false
	switch n.Kind {
	case yaml.ScalarNode:
		found = holdsVariable(n.Value)
	case yaml.MappingNode:
		for i := 1; i < len(n.Content) && !found; i += 2 {
			found = w.hasVar(n.Content[i])
		}
	default:
		for _, c := range n.Content {
			if found = w.hasVar(c); found {
				break
			}
		}
	}
	w.memo[n] = found
	return found
}

// holdsVariable reads `$` as compose does: `$$` is literal, any other `$` starts a variable.
func holdsVariable(s string) bool {
	return strings.Contains(strings.ReplaceAll(s, "$$", ""), "$")
}

func topSubject(section, name string) string {
	return strings.TrimSuffix(section, "s") + " " + name
}
