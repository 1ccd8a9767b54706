package bundle

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// This file is the agent's own reader of .env files, written to the rules docker compose v2
// (compose-go's dotenv package) applies, as far as the writer in env.go relies on them:
//
//   - blank lines and lines starting with `#` are skipped; `export ` before a key is ignored;
//     a key ends at `=` or `:`, and blanks around it are dropped;
//   - an unquoted value runs to the end of the line, is cut at the first " #", loses trailing
//     whitespace, and is interpolated (`$$` is a literal `$`);
//   - a single-quoted value is literal up to the next unescaped `'` (it may span lines); a
//     backslash is kept, except before `'`, where it is dropped and the quote kept;
//   - a double-quoted value is read the same way up to the next unescaped `"`; then `\n`, `\t`,
//     `\\`, `\"`, `\$` and the other C escapes are expanded, and the result is interpolated.
//
// RenderEnv reads every quoted value it writes back through readValue and refuses the value if it
// does not come back unchanged; the integration test checks the same values against a real
// `docker compose`.

// readValue reads one value starting right after the separator and its blanks, returning the
// value and the text after it.
func readValue(src string, vars map[string]string) (string, string, error) {
	if src == "" || (src[0] != '\'' && src[0] != '"') {
		line, rest, _ := strings.Cut(src, "\n")
		line, _, _ = strings.Cut(line, " #")
		line = strings.TrimRightFunc(line, unicode.IsSpace)
		v, err := interpolate(line, vars)
		return v, rest, err
	}
	quote := src[0]
	var b strings.Builder
	escaped := false
	for i := 1; i < len(src); i++ {
		c := src[i]
		if c == quote {
			if escaped {
				escaped = false
				b.WriteByte(c) // the backslash before the quote is dropped
				continue
			}
			v := b.String()
			if quote == '"' {
				var err error
				if v, err = interpolate(expandEscapes(v), vars); err != nil {
					return "", "", err
				}
			}
			return v, src[i+1:], nil
		}
		if escaped {
			escaped = false
			b.WriteByte('\\')
			b.WriteByte(c)
			continue
		}
		if c == '\\' {
			escaped = true
			continue
		}
		b.WriteByte(c)
	}
	return "", "", errors.New("unterminated quoted value")
}

// expandEscapes expands the escapes of a double-quoted value. `\$` becomes `$$`, which the
// interpolation then turns into `$`; an unknown escape is kept as written.
func expandEscapes(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		n := s[i+1]
		switch n {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case '\\':
			b.WriteByte('\\')
		case '"':
			b.WriteByte('"')
		case '$':
			b.WriteString("$$")
		case '0':
			// `\0` and up to three digits: an octal escape when exactly three octal digits
			// follow the `\0`, else kept as written.
			j := i + 2
			for j < len(s) && j < i+5 && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			digits := s[i+2 : j]
			if r, ok := octal(digits); ok {
				b.WriteRune(r)
			} else {
				b.WriteString(s[i:j])
			}
			i = j - 1
			continue
		default:
			b.WriteByte('\\')
			b.WriteByte(n)
		}
		i++
	}
	return b.String()
}

func octal(d string) (rune, bool) {
	if len(d) != 3 {
		return 0, false
	}
	v := 0
	for i := 0; i < 3; i++ {
		if d[i] > '7' {
			return 0, false
		}
		v = v*8 + int(d[i]-'0')
	}
	if v > 255 {
		return 0, false
	}
	return rune(v), true
}

// interpolate applies compose's substitution to a value: `$$` is `$`, `$NAME` and `${NAME}` take
// an earlier value ("" when unset), a `$` followed by anything else is literal. The `${NAME:-…}`
// family is not needed by the writer and is reported as unsupported.
func interpolate(s string, vars map[string]string) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch n := s[i+1]; {
		case n == '$':
			b.WriteByte('$')
			i++
		case n == '{':
			end := strings.IndexByte(s[i:], '}')
			if end < 0 {
				return "", fmt.Errorf("invalid template at byte %d", i)
			}
			name := s[i+2 : i+end]
			if !envName.MatchString(name) {
				return "", fmt.Errorf("unsupported substitution at byte %d", i)
			}
			b.WriteString(vars[name])
			i += end
		case n == '_' || isASCIILetter(n):
			j := i + 1
			for j < len(s) && (s[j] == '_' || isASCIILetter(s[j]) || (s[j] >= '0' && s[j] <= '9')) {
				j++
			}
			b.WriteString(vars[s[i+1:j]])
			i = j - 1
		default:
			b.WriteByte('$')
		}
	}
	return b.String(), nil
}

func isASCIILetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// dotenvSpace is compose's blank inside a line (no newline).
func dotenvSpace(r rune) bool {
	switch r {
	case '\t', '\v', '\f', '\r', ' ', 0x85, 0xA0:
		return true
	}
	return false
}

// parseDotenv reads a whole .env file the way docker compose does (see the rules above).
func parseDotenv(src string) (map[string]string, error) {
	out := map[string]string{}
	src = strings.TrimPrefix(src, "\uFEFF")
	for {
		src = strings.TrimLeftFunc(src, unicode.IsSpace)
		if src == "" {
			return out, nil
		}
		if src[0] == '#' {
			_, rest, found := strings.Cut(src, "\n")
			if !found {
				return out, nil
			}
			src = rest
			continue
		}
		if rest, ok := strings.CutPrefix(src, "export"); ok && rest != "" && dotenvSpace(rune(rest[0])) {
			src = strings.TrimLeftFunc(rest, dotenvSpace)
		}
		sep := -1
		for i, r := range src {
			if r == '=' || r == ':' || r == '\n' {
				sep = i
				break
			}
			if dotenvSpace(r) || r == '_' || r == '.' || r == '-' || r == '[' || r == ']' ||
				unicode.IsLetter(r) || unicode.IsNumber(r) {
				continue
			}
			return nil, fmt.Errorf("unexpected character %q in variable name", r)
		}
		if sep < 0 {
			return nil, errors.New("a key without a value at the end of the file")
		}
		key := strings.TrimRightFunc(src[:sep], unicode.IsSpace)
		if strings.ContainsFunc(key, dotenvSpace) {
			return nil, fmt.Errorf("key %q contains a space", key)
		}
		if src[sep] == '\n' {
			// a bare key inherits from the environment; nothing to read here
			src = src[sep+1:]
			continue
		}
		v, rest, err := readValue(strings.TrimLeftFunc(src[sep+1:], dotenvSpace), out)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out[key] = v
		src = rest
	}
}
