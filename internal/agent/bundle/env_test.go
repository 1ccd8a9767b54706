package bundle

import (
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

func vals(kv ...string) map[string]secret.Value {
	m := map[string]secret.Value{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = secret.New(kv[i+1])
	}
	return m
}

func TestRenderEnv(t *testing.T) {
	tests := []struct {
		name     string
		template string
		values   map[string]secret.Value
		want     string
		read     map[string]string // what compose reads back (nil: not checked)
	}{
		{"comment line references do not count (0.1.5)",
			"# rendered by the agent: substitutes every ${VAR}\n  # indented: ${ALSO_NOT}\nA=${A}\n",
			vals("A", "x"),
			"# rendered by the agent: substitutes every ${VAR}\n  # indented: ${ALSO_NOT}\nA=x\n",
			map[string]string{"A": "x"}},
		{"plain value raw", "KEY=${V}", vals("V", "abc-123_./:=@+,"), "KEY=abc-123_./:=@+,", map[string]string{"KEY": "abc-123_./:=@+,"}},
		{"empty value raw", "KEY=${V}\n", vals("V", ""), "KEY=\n", map[string]string{"KEY": ""}},
		{"empty value before a comment is spelled out", "KEY=${V} # note\n", vals("V", ""), "KEY='' # note\n", map[string]string{"KEY": ""}},
		{"spaces single-quoted", "KEY=${V}", vals("V", " a b "), "KEY=' a b '", map[string]string{"KEY": " a b "}},
		{"hash single-quoted", "KEY=${V}", vals("V", "a #b"), "KEY='a #b'", map[string]string{"KEY": "a #b"}},
		{"dollar single-quoted, not interpolated", "KEY=${V}", vals("V", "$HOME ${X}"), "KEY='$HOME ${X}'", map[string]string{"KEY": "$HOME ${X}"}},
		{"double quote single-quoted", "KEY=${V}", vals("V", `say "hi"`), `KEY='say "hi"'`, map[string]string{"KEY": `say "hi"`}},
		{"single quote double-quoted", "KEY=${V}", vals("V", "it's $5"), `KEY="it's $$5"`, map[string]string{"KEY": "it's $5"}},
		{"backslash double-quoted", "KEY=${V}", vals("V", `a\nb\`), `KEY="a\\nb\\"`, map[string]string{"KEY": `a\nb\`}},
		{"newline double-quoted", "KEY=${V}", vals("V", "l1\nl2 \"q\""), `KEY="l1\nl2 \"q\""`, map[string]string{"KEY": "l1\nl2 \"q\""}},
		{"export, colon and spaced forms", "export A=${V}\nB: ${V}\n  C = ${V}\n", vals("V", "a b "),
			"export A='a b '\nB: 'a b '\n  C = 'a b '\n", map[string]string{"A": "a b ", "B": "a b ", "C": "a b "}},
		{"inner spaces are plain, a tab is not", "A=${V}\nB=${T}\n", vals("V", "a b c", "T", "a\tb"), "A=a b c\nB='a\tb'\n", map[string]string{"A": "a b c", "B": "a\tb"}},
		{"template quotes replaced", "A=\"${V}\"\nB='${V}' # c\n", vals("V", "it's"), "A=\"it's\"\nB=\"it's\" # c\n",
			map[string]string{"A": "it's", "B": "it's"}},
		{"trailing comment kept", "A=${V}   # the key\n", vals("V", "x #y"), "A='x #y'   # the key\n", map[string]string{"A": "x #y"}},
		{"embedded plain", "URL=https://${HOST}:${PORT}/x\n", vals("HOST", "db.internal", "PORT", "5432"),
			"URL=https://db.internal:5432/x\n", map[string]string{"URL": "https://db.internal:5432/x"}},
		{"embedded plain inside template quotes", "MSG=\"hello ${WHO} and ${WHO}\"\n", vals("WHO", "world"),
			"MSG=\"hello world and world\"\n", map[string]string{"MSG": "hello world and world"}},
		{"escaped dollar kept", "A=$${NOT_A_REF}\nB=${V}\n", vals("V", "v"), "A=$${NOT_A_REF}\nB=v\n",
			map[string]string{"A": "${NOT_A_REF}", "B": "v"}},
		{"unbraced and invalid names are not references", "A=$NAME\nB=${1X}\nC=${V}", vals("V", "v"), "A=$NAME\nB=${1X}\nC=v", nil},
		{"references in a trailing comment substituted when plain", "A=${V} # was ${V}\n", vals("V", "v"), "A=v # was v\n", map[string]string{"A": "v"}},
		{"CRLF template", "A=${V}\r\nB=${V}\r\n", vals("V", " a"), "A=' a'\r\nB=' a'\r\n", map[string]string{"A": " a", "B": " a"}},
		{"no references", "A=1\n\n# c\n", nil, "A=1\n\n# c\n", map[string]string{"A": "1"}},
		{"empty template", "", nil, "", map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RenderEnv(tt.template, tt.values)
			if err != nil {
				t.Fatalf("RenderEnv: %v", err)
			}
			if got != tt.want {
				t.Errorf("RenderEnv =\n%q\nwant\n%q", got, tt.want)
			}
			if tt.read == nil {
				return
			}
			read, err := dotenv.UnmarshalWithLookup(got, nil)
			if err != nil {
				t.Fatalf("reading back: %v", err)
			}
			for k, v := range tt.read {
				if read[k] != v {
					t.Errorf("read back %s = %q, want %q", k, read[k], v)
				}
			}
		})
	}
}

func TestRenderEnvRefusals(t *testing.T) {
	tests := []struct {
		name     string
		template string
		values   map[string]secret.Value
		code     string
		want     string
	}{
		{"unresolved, sorted and unique", "B=${B}\nA=${A}\nB2=${B}\nC=${C}\n", vals("C", "c"), protocol.CodeEnvIncomplete, "unresolved: A, B"},
		{"unresolved in a longer value", "URL=https://${HOST}/x\n", nil, protocol.CodeEnvIncomplete, "unresolved: HOST"},
		{"unresolved outside a comment still counts", "# ${X}\nX=${X}\n", nil, protocol.CodeEnvIncomplete, "unresolved: X"},
		{"unresolved wins over unsafe", "A=${A}\nB=x${B}\n", vals("B", "bad\x00value"), protocol.CodeEnvIncomplete, "unresolved: A"},
		{"NUL", "A=${A}", vals("A", "sec\x00ret-nul"), protocol.CodeEnvUnsafeValue, "A (contains a NUL byte)"},
		{"carriage return", "A=${A}", vals("A", "secret-cr\r\n"), protocol.CodeEnvUnsafeValue, "A (contains a carriage return)"},
		{"invalid UTF-8", "A=${A}", vals("A", "secret-\xff\xfe"), protocol.CodeEnvUnsafeValue, "A (not valid UTF-8)"},
		{"not plain inside a longer value", "URL=https://${HOST}/x", vals("HOST", "evil host#frag"), protocol.CodeEnvUnsafeValue,
			"HOST (inside a longer value, and not plain)"},
		{"quote inside a longer quoted value", "MSG=\"pre ${V}\"", vals("V", `secret"quote`), protocol.CodeEnvUnsafeValue, "V (inside a longer value, and not plain)"},
		{"every unsafe variable listed", "Z=${Z}\nA=x${A}\n", vals("Z", "s\x00z", "A", "secret#a"), protocol.CodeEnvUnsafeValue,
			"A (inside a longer value, and not plain), Z (contains a NUL byte)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RenderEnv(tt.template, tt.values)
			if got != "" {
				t.Errorf("output returned with an error: %q", got)
			}
			assertRefusal(t, err, tt.code, tt.want)
			for name, v := range tt.values {
				if strings.Contains(err.Error(), v.Reveal()) {
					t.Errorf("error %q reveals the value of %s", err, name)
				}
			}
		})
	}
}
