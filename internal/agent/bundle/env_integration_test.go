//go:build integration

package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// trickyValues are the values the .env writer must hand to docker compose unchanged.
var trickyValues = []string{
	"plain-value_1.2",
	"with inner space",
	" leading blank",
	"trailing blank ",
	"\ttab at start",
	"a # not a comment",
	"#starts-with-hash",
	"it's",
	`say "hi"`,
	`'`,
	`"`,
	`back\slash`,
	`trailing\`,
	`\\two`,
	`\`,
	`a\'b`,
	`\0123 not octal`,
	`\n literal backslash-n`,
	`\$ backslash dollar`,
	"$dollar",
	"${NOT_A_REF}",
	"$$",
	"cost: $5 and ${x:-y}",
	"multi\nline",
	"multi\nline with 'single' and \"double\" and $x and \\",
	"\n",
	"ends with newline\n",
	"line\n# looks like a comment",
	"=equals=",
	"key: colon",
	"unicodé ✓ 😀",
	"`backtick` ; semi | pipe & amp",
	"",
	"   ",
	"x\vy\fz",
}

// TestComposeReadsRenderedValues renders every tricky value into .env, several ways, and asks a
// real `docker compose` what it makes of them, through interpolation of the compose file and
// through env_file.
func TestComposeReadsRenderedValues(t *testing.T) {
	docker, err := exec.LookPath("docker")
	if err != nil {
		t.Fatalf("integration: docker CLI not found: %v", err)
	}
	if out, err := exec.Command(docker, "compose", "version").CombinedOutput(); err != nil {
		t.Fatalf("integration: docker compose v2 plugin not usable: %v\n%s", err, out)
	}

	values := map[string]secret.Value{"HOST": secret.New("example.test")}
	want := map[string]string{"URL": "https://example.test/x", "LITERAL": "$$kept"}
	var tmpl strings.Builder
	tmpl.WriteString("# rendered by monky-deployd: substitutes every ${VAR}\n\n")
	tmpl.WriteString("URL=https://${HOST}/x\n")
	tmpl.WriteString("LITERAL='$$kept'\n")
	// a plain value inside a longer value, whatever quotes the template put around it
	tmpl.WriteString("Q1=\"pre ${HOST} post\"\nQ2='pre ${HOST}' # c\nQ3=a${HOST}b # c\n")
	want["Q1"], want["Q2"], want["Q3"] = "pre example.test post", "pre example.test", "aexample.testb"
	want["LITERAL"] = "$$kept" // single quotes: literal to compose
	for i, v := range trickyValues {
		name := fmt.Sprintf("V%02d", i)
		values[name] = secret.New(v)
		// four spellings of a whole-value line
		fmt.Fprintf(&tmpl, "A%02d=${%s}\n", i, name)
		fmt.Fprintf(&tmpl, "export B%02d=${%s}\n", i, name)
		fmt.Fprintf(&tmpl, "C%02d=\"${%s}\" # quoted in the template\n", i, name)
		fmt.Fprintf(&tmpl, "D%02d=${%s} # trailing comment\n", i, name)
		for _, p := range []string{"A", "B", "C", "D"} {
			want[fmt.Sprintf("%s%02d", p, i)] = v
		}
	}
	env, err := RenderEnv(tmpl.String(), values)
	if err != nil {
		t.Fatalf("RenderEnv: %v", err)
	}

	dir := t.TempDir()
	var compose strings.Builder
	compose.WriteString("services:\n  interp:\n    image: scratch-test\n    environment:\n")
	keys := sortedKeysOf(want)
	for _, k := range keys {
		fmt.Fprintf(&compose, "      %s: ${%s}\n", k, k)
	}
	compose.WriteString("  file:\n    image: scratch-test\n    env_file: .env\n")
	writeFile(t, filepath.Join(dir, "docker-compose.yml"), compose.String())
	writeFile(t, filepath.Join(dir, ".env"), env)

	cmd := exec.CommandContext(context.Background(), docker, "compose", "--project-directory", dir,
		"-f", filepath.Join(dir, "docker-compose.yml"), "config", "--format", "json")
	// a clean environment: the process env would win over .env for interpolation
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "DOCKER_CONFIG=" + t.TempDir()}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, stderr.String())
	}
	var cfg struct {
		Services map[string]struct {
			Environment map[string]*string `json:"environment"`
		} `json:"services"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &cfg); err != nil {
		t.Fatalf("config output: %v", err)
	}
	for _, svc := range []string{"interp", "file"} {
		got := cfg.Services[svc].Environment
		for _, k := range keys {
			g := got[k]
			if g == nil {
				t.Errorf("%s: %s missing", svc, k)
				continue
			}
			// `config` prints a model that can be loaded again, so it writes every `$` as
			// `$$`; undo exactly that.
			if v := strings.ReplaceAll(*g, "$$", "$"); v != want[k] {
				t.Errorf("%s: %s = %q, want %q", svc, k, v, want[k])
			}
		}
	}
}

func sortedKeysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
