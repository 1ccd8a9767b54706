package bundle

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/compose-spec/compose-go/v2/dotenv"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// RenderEnv fills the `${NAME}` references of .env.template with the secret values; `$$` and
// `$NAME` are left to compose, and comment lines are copied and not counted (0.1.5 refused a bundle
// over a header comment). Missing values are ENV_INCOMPLETE; a value compose would not read back
// byte for byte is ENV_UNSAFE_VALUE. Details name variables, never values.
func RenderEnv(template string, values map[string]secret.Value) (string, error) {
	lines := strings.Split(template, "\n")

	unresolved := map[string]bool{}
	for _, line := range lines {
		if isComment(line) {
			continue
		}
		for _, r := range findRefs(line) {
			if _, ok := values[r.name]; !ok {
				unresolved[r.name] = true
			}
		}
	}
	if len(unresolved) > 0 {
		return "", protocol.Refuse(protocol.CodeEnvIncomplete, "unresolved: %s", strings.Join(sortedSet(unresolved), ", "))
	}

	unsafe := map[string]string{}
	out := make([]string, len(lines))
	for i, line := range lines {
		if isComment(line) {
			out[i] = line
			continue
		}
		if prefix, name, suffix, ok := wholeValue(line); ok {
			enc, why := encodeValue(values[name].Reveal())
			if why != "" {
				unsafe[name] = why
			}
			if enc == "" && strings.TrimFunc(suffix, unicode.IsSpace) != "" {
				// `KEY= # note` would read as the value "# note": an empty value followed
				// by anything must be spelled out
				enc = "''"
			}
			out[i] = prefix + enc + substitute(suffix, values, unsafe)
			continue
		}
		out[i] = substitute(line, values, unsafe)
	}
	if len(unsafe) > 0 {
		names := make([]string, 0, len(unsafe))
		for n := range unsafe {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = n + " (" + unsafe[n] + ")"
		}
		return "", protocol.Refuse(protocol.CodeEnvUnsafeValue, "%s", strings.Join(parts, ", "))
	}
	return strings.Join(out, "\n"), nil
}

func isComment(line string) bool {
	t := strings.TrimLeftFunc(line, unicode.IsSpace)
	return strings.HasPrefix(t, "#")
}

type ref struct {
	start, end int // line[start:end] is `${NAME}`
	name       string
}

// findRefs lists the `${NAME}` references of a line, skipping `$$` escapes.
func findRefs(line string) []ref {
	var out []ref
	for i := 0; i < len(line); i++ {
		if line[i] != '$' || i+1 == len(line) {
			continue
		}
		if line[i+1] == '$' {
			i++
			continue
		}
		if line[i+1] != '{' {
			continue
		}
		end := strings.IndexByte(line[i:], '}')
		if end < 0 {
			continue
		}
		if name := line[i+2 : i+end]; envName().MatchString(name) {
			out = append(out, ref{start: i, end: i + end + 1, name: name})
			i += end
		}
	}
	return out
}

// substitute replaces references inside a longer value: only plain values are safe there.
func substitute(s string, values map[string]secret.Value, unsafe map[string]string) string {
	refs := findRefs(s)
	if len(refs) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, r := range refs {
		b.WriteString(s[last:r.start])
		v := values[r.name].Reveal()
		if plain(v) {
			b.WriteString(v)
		} else if _, seen := unsafe[r.name]; !seen {
			unsafe[r.name] = "inside a longer value, and not plain"
		}
		last = r.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// keyPrefix is the start of a KEY=VALUE line as compose reads it.
// Compiled on first use (a bundle judgement), not at init: every process linked it.
var keyPrefix = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[ \t]*(?:export[ \t]+)?[A-Za-z0-9_.\[\]-]+[ \t]*[=:][ \t]*`)
})

// wholeValue recognises a value that is one reference: text before, the variable, text after.
func wholeValue(line string) (prefix, name, suffix string, ok bool) {
	loc := keyPrefix().FindStringIndex(line)
	if loc == nil {
		return "", "", "", false
	}
	prefix, rest := line[:loc[1]], line[loc[1]:]
	for _, q := range []string{`"`, `'`} {
		if strings.HasPrefix(rest, q+"${") {
			refs := findRefs(rest)
			if len(refs) > 0 && refs[0].start == 1 && strings.HasPrefix(rest[refs[0].end:], q) {
				return prefix, refs[0].name, rest[refs[0].end+1:], true
			}
			return "", "", "", false
		}
	}
	refs := findRefs(rest)
	if len(refs) == 0 || refs[0].start != 0 {
		return "", "", "", false
	}
	suffix = rest[refs[0].end:]
	// Unquoted, compose cuts at the first " #" and trims: only blanks may follow the reference.
	before, _, _ := strings.Cut(suffix, " #")
	if strings.TrimFunc(before, unicode.IsSpace) != "" {
		return "", "", "", false
	}
	return prefix, refs[0].name, suffix, true
}

// plain reports whether v can stand unquoted anywhere in a .env line and be read back as is.
func plain(v string) bool {
	if !utf8.ValidString(v) {
		return false
	}
	if v == "" {
		return true
	}
	first, _ := utf8.DecodeRuneInString(v)
	lastR, _ := utf8.DecodeLastRuneInString(v)
	if unicode.IsSpace(first) || unicode.IsSpace(lastR) {
		return false
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(`'"#$\`, r) {
			return false
		}
	}
	return true
}

// encodeValue writes v as the whole value of a .env line, or says why it cannot: raw when plain,
// single-quoted (literal to compose) without ', \ or newline, else double-quoted with \\, \", \n, $$.
func encodeValue(v string) (string, string) {
	switch {
	case !utf8.ValidString(v):
		return "", "not valid UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return "", "contains a NUL byte"
	case strings.IndexByte(v, '\r') >= 0:
		return "", "contains a carriage return"
	case plain(v):
		return v, ""
	}
	var enc string
	if !strings.ContainsAny(v, "'\\\n") {
		// literal to compose: no escapes, no interpolation
		enc = "'" + v + "'"
	} else {
		enc = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "$", "$$").Replace(v) + `"`
	}
	// Belt and braces: read it back with compose's own reader before trusting it.
	got, err := dotenv.UnmarshalWithLookup("K="+enc, nil)
	if err != nil || len(got) != 1 || got["K"] != v {
		return "", "cannot be written so that docker compose reads it back unchanged"
	}
	return enc, ""
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
