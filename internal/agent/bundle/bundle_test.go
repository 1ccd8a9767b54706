package bundle

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// goodFiles is a minimal valid bundle; tests change one thing at a time.
func goodFiles() map[string]string {
	return map[string]string{
		"bundle.json": `{"address": "env-qa-02", "pull": "missing", "renderer": "monky-render/2",
			"images_policy": {"registry": "harbor.tikali.net"}, "secrets_provider": "openbao",
			"compose_file": "docker-compose.yml", "some_future_field": [1, 2],
			"agent": {"allow_privileged": false, "allow_rollback": true, "disk_need_bytes": 1048576,
			          "healthy_timeout_s": 120, "future": true},
			"files": ["docker-compose.yml", ".env.template"]}`,
		"docker-compose.yml": "services:\n  api:\n    image: harbor.tikali.net/monky/api:1\n",
		".env.template":      "# header: substitutes every ${VAR}\nGEMINI_API_KEY=${GEMINI_API_KEY}\n",
		"manifest.json": `{"entries": [
			{"var": "GEMINI_API_KEY", "path": "gemini_api_key", "version": 3, "key": "api_key", "use": "env", "note": "x"},
			{"var": "DB_URL", "path": "db/url"},
			{"path": "harbor_robot", "use": "registry-auth"}]}`,
		"config/nginx.conf": "server {}\n",
	}
}

func with(files map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(files))
	for k, v := range files {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "\x00DELETE" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}

const deleted = "\x00DELETE"

func TestSha(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		// vectors computed independently (Python hashlib) from the PROTOCOL's definition
		{"empty bundle", map[string]string{}, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"byte order of paths, byte length of content", map[string]string{
			"bundle.json": "{}", "docker-compose.yml": "services: {}\n", "config/nginx.conf": "x\u00e9",
		}, "32acf105b4995f394afa57bbaaed0550f6a14cc494374fd7db178ebba7527943"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Sha(tt.files); got != tt.want {
				t.Errorf("Sha = %s, want %s", got, tt.want)
			}
		})
	}
	t.Run("framing tells content from path", func(t *testing.T) {
		a := Sha(map[string]string{"a": "b\n1\nc"})
		b := Sha(map[string]string{"a": "b", "c": ""})
		if a == b {
			t.Error("different bundles share a sha")
		}
	})
}

func TestParseGood(t *testing.T) {
	files := goodFiles()
	b, err := Parse(files, Sha(files))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	wantMeta := Meta{
		Address: "env-qa-02", Pull: PullMissing, Renderer: "monky-render/2",
		ImagesPolicy: `{"registry":"harbor.tikali.net"}`, SecretsProvider: "openbao",
		ComposeFile: "docker-compose.yml",
		Agent:       Agent{AllowRollback: true, DiskNeedBytes: 1048576, HealthyTimeoutS: 120},
		Files:       []string{"docker-compose.yml", ".env.template"},
	}
	if !reflect.DeepEqual(b.Meta, wantMeta) {
		t.Errorf("Meta = %+v\nwant   %+v", b.Meta, wantMeta)
	}
	wantEntries := []Entry{
		{Var: "GEMINI_API_KEY", Path: "gemini_api_key", Version: 3, Key: "api_key", Use: UseEnv},
		{Var: "DB_URL", Path: "db/url", Version: 0, Key: DefaultKey, Use: UseEnv},
		{Path: "harbor_robot", Key: DefaultKey, Use: UseRegistryAuth},
	}
	if !reflect.DeepEqual(b.Entries, wantEntries) {
		t.Errorf("Entries = %+v\nwant      %+v", b.Entries, wantEntries)
	}
	if got := b.EnvEntries(); !reflect.DeepEqual(got, wantEntries[:2]) {
		t.Errorf("EnvEntries = %+v", got)
	}
	if e, ok := b.RegistryEntry(); !ok || e.Path != "harbor_robot" {
		t.Errorf("RegistryEntry = %+v, %v", e, ok)
	}
	if b.Sha != Sha(files) || b.EnvTemplate != files[".env.template"] || !reflect.DeepEqual(b.Files, files) {
		t.Error("Sha, EnvTemplate or Files not carried over")
	}
}

func TestParseDefaults(t *testing.T) {
	files := map[string]string{
		"bundle.json":        `{}`,
		"docker-compose.yml": "services: {}\n",
	}
	b, err := Parse(files, strings.ToUpper(Sha(files)))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if b.Meta.Pull != PullAlways || b.Meta.ComposeFile != DefaultComposeFile {
		t.Errorf("defaults: pull %q compose_file %q", b.Meta.Pull, b.Meta.ComposeFile)
	}
	if len(b.Entries) != 0 || b.EnvTemplate != "" {
		t.Errorf("no manifest / template: entries %v template %q", b.Entries, b.EnvTemplate)
	}
	if _, ok := b.RegistryEntry(); ok {
		t.Error("RegistryEntry without a manifest")
	}
}

func TestParseRefusals(t *testing.T) {
	big := strings.Repeat("x", MaxTotalBytes/2+1)
	many := goodFiles()
	for i := 0; len(many) <= MaxFiles; i++ {
		many[fmt.Sprintf("extra/f%03d", i)] = ""
	}
	entry := func(s string) string { return `{"entries": [` + s + `]}` }
	tests := []struct {
		name  string
		files map[string]string
		sha   string // "" = the content's own sha
		code  string
		want  string // substring of the detail
	}{
		{"dot-dot segment", with(goodFiles(), "config/../../etc/passwd", "x"), "", protocol.CodeBundleInvalid, `path "config/../../etc/passwd": ".." segment`},
		{"bare dot-dot", with(goodFiles(), "..", "x"), "", protocol.CodeBundleInvalid, `path "..": ".." segment`},
		{"leading slash", with(goodFiles(), "/etc/cron.d/x", "x"), "", protocol.CodeBundleInvalid, `path "/etc/cron.d/x": absolute path`},
		{"backslash", with(goodFiles(), `config\x`, "x"), "", protocol.CodeBundleInvalid, `path "config\\x": contains "\"`},
		{"NUL", with(goodFiles(), "a\x00b", "x"), "", protocol.CodeBundleInvalid, `path "a\x00b": contains NUL`},
		{"empty segment", with(goodFiles(), "config//x", "x"), "", protocol.CodeBundleInvalid, `path "config//x": empty path segment`},
		{"trailing slash", with(goodFiles(), "config/", "x"), "", protocol.CodeBundleInvalid, `path "config/": empty path segment`},
		{"empty path", with(goodFiles(), "", "x"), "", protocol.CodeBundleInvalid, `path "": empty path`},
		{"dot segment", with(goodFiles(), "./x", "x"), "", protocol.CodeBundleInvalid, `path "./x": "." segment`},
		{"newline in path", with(goodFiles(), "a\nb", "x"), "", protocol.CodeBundleInvalid, `path "a\nb": contains a control character`},
		{"file and directory", with(goodFiles(), "config", "x"), "", protocol.CodeBundleInvalid, `path "config/nginx.conf": "config" is a file`},
		{"shipped .env", with(goodFiles(), ".env", "A=1"), "", protocol.CodeBundleInvalid, `path ".env": written by the agent`},
		{"too many files", many, "", protocol.CodeBundleInvalid, fmt.Sprintf("%d files, at most 256", len(many))},
		{"too large", with(goodFiles(), "a", big, "b", big), "", protocol.CodeBundleInvalid, "at most 8388608"},
		{"path checked before sha", with(goodFiles(), "../x", "x"), "0000", protocol.CodeBundleInvalid, `"../x"`},

		{"sha mismatch", goodFiles(), "7a10c3d2e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1", protocol.CodeBundleShaMismatch,
			"does not match desired sha 7a10c3d2e4f5"},
		{"sha missing", goodFiles(), "-", protocol.CodeBundleShaMismatch, "desired sha -"},

		{"bundle.json missing", with(goodFiles(), "bundle.json", deleted), "", protocol.CodeBundleInvalid, "bundle.json: missing"},
		{"bundle.json not JSON", with(goodFiles(), "bundle.json", "{"), "", protocol.CodeBundleInvalid, "bundle.json: not valid JSON"},
		{"bundle.json not an object", with(goodFiles(), "bundle.json", "[]"), "", protocol.CodeBundleInvalid, "bundle.json: want an object, got array"},
		{"disk_need_bytes a string", with(goodFiles(), "bundle.json", `{"agent": {"disk_need_bytes": "1G"}}`), "", protocol.CodeBundleInvalid,
			"bundle.json: agent.disk_need_bytes: want an integer, got string"},
		{"disk_need_bytes fractional", with(goodFiles(), "bundle.json", `{"agent": {"disk_need_bytes": 1.5}}`), "", protocol.CodeBundleInvalid,
			"bundle.json: agent.disk_need_bytes: want an integer"},
		{"disk_need_bytes negative", with(goodFiles(), "bundle.json", `{"agent": {"disk_need_bytes": -1}}`), "", protocol.CodeBundleInvalid,
			"agent.disk_need_bytes: must not be negative"},
		{"healthy_timeout_s negative", with(goodFiles(), "bundle.json", `{"agent": {"healthy_timeout_s": -5}}`), "", protocol.CodeBundleInvalid,
			"agent.healthy_timeout_s: must not be negative"},
		{"healthy_timeout_s above the cap", with(goodFiles(), "bundle.json", `{"agent": {"healthy_timeout_s": 1801}}`), "", protocol.CodeBundleInvalid,
			"agent.healthy_timeout_s: at most 1800 seconds, got 1801"},
		{"healthy_timeout_s huge", with(goodFiles(), "bundle.json", `{"agent": {"healthy_timeout_s": 9223372036854775807}}`), "", protocol.CodeBundleInvalid,
			"agent.healthy_timeout_s: at most 1800 seconds"},
		{"auto_revert a string", with(goodFiles(), "bundle.json", `{"agent": {"auto_revert": "no"}}`), "", protocol.CodeBundleInvalid,
			"bundle.json: agent.auto_revert: want true or false"},
		{"drift_correction a number", with(goodFiles(), "bundle.json", `{"agent": {"drift_correction": 0}}`), "", protocol.CodeBundleInvalid,
			"bundle.json: agent.drift_correction: want true or false"},
		{"allow_privileged a string", with(goodFiles(), "bundle.json", `{"agent": {"allow_privileged": "yes"}}`), "", protocol.CodeBundleInvalid,
			"bundle.json: agent.allow_privileged: want true or false"},
		{"agent a list", with(goodFiles(), "bundle.json", `{"agent": []}`), "", protocol.CodeBundleInvalid, "bundle.json: agent: want an object"},
		// encoding/json keeps the last of two keys: tenancy never writes two, so two is no bundle.
		{"allow_privileged twice", with(goodFiles(), "bundle.json", `{"agent": {"allow_privileged": false, "allow_privileged": true}}`), "", protocol.CodeBundleInvalid,
			"bundle.json: agent.allow_privileged: given twice"},
		{"agent twice", with(goodFiles(), "bundle.json", `{"agent": {}, "agent": {"allow_rollback": true}}`), "", protocol.CodeBundleInvalid, "bundle.json: agent: given twice"},
		{"a key twice in an informational field", with(goodFiles(), "bundle.json", `{"renderer": {"a": 1, "a": 2}}`), "", protocol.CodeBundleInvalid, "bundle.json: renderer.a: given twice"},
		{"files not strings", with(goodFiles(), "bundle.json", `{"files": [1]}`), "", protocol.CodeBundleInvalid, "bundle.json: files: want a list of strings"},
		{"pull unknown", with(goodFiles(), "bundle.json", `{"pull": "never"}`), "", protocol.CodeBundleInvalid, `bundle.json: pull: want "always" or "missing", got "never"`},
		{"pull a number", with(goodFiles(), "bundle.json", `{"pull": 1}`), "", protocol.CodeBundleInvalid, "bundle.json: pull: want a string"},
		{"compose_file absent from files", with(goodFiles(), "bundle.json", `{"compose_file": "compose.yaml"}`), "", protocol.CodeBundleInvalid,
			`bundle.json: compose_file: "compose.yaml" is not a file of the bundle`},
		{"default compose_file absent", with(goodFiles(), "bundle.json", `{}`, "docker-compose.yml", deleted), "", protocol.CodeBundleInvalid,
			`compose_file: "docker-compose.yml" is not a file`},

		{"manifest not JSON", with(goodFiles(), "manifest.json", "nope"), "", protocol.CodeBundleInvalid, "manifest.json: not valid JSON"},
		{"manifest entries not a list", with(goodFiles(), "manifest.json", `{"entries": {}}`), "", protocol.CodeBundleInvalid, "manifest.json: entries: want a list of objects"},
		{"entry not an object", with(goodFiles(), "manifest.json", entry(`{"var":"A","path":"a"}, "x"`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[1]: want an object"},
		{"var missing", with(goodFiles(), "manifest.json", entry(`{"path": "a"}`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[0].var: missing"},
		{"var a number", with(goodFiles(), "manifest.json", entry(`{"var": 1, "path": "a"}`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[0].var: want a string"},
		{"var invalid name", with(goodFiles(), "manifest.json", entry(`{"var":"A","path":"a"},{"var":"B","path":"b"},{"var": "1BAD-NAME", "path": "c"}`)), "", protocol.CodeBundleInvalid,
			`manifest.json: entries[2].var: "1BAD-NAME" is not a valid variable name`},
		{"var with equals", with(goodFiles(), "manifest.json", entry(`{"var": "A=B", "path": "a"}`)), "", protocol.CodeBundleInvalid, `entries[0].var: "A=B" is not a valid`},
		{"var duplicate", with(goodFiles(), "manifest.json", entry(`{"var":"A","path":"a"},{"var":"A","path":"b"}`)), "", protocol.CodeBundleInvalid,
			`manifest.json: entries[1].var: "A" already declared by entries[0]`},
		{"path missing", with(goodFiles(), "manifest.json", entry(`{"var": "A"}`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[0].path: missing"},
		{"path twice", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "path": "../../b"}`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[0].path: given twice"},
		{"entries twice", with(goodFiles(), "manifest.json", `{"entries": [], "entries": [{"var": "A", "path": "a"}]}`), "", protocol.CodeBundleInvalid, "manifest.json: entries: given twice"},
		{"PATH in capitals only", with(goodFiles(), "manifest.json", entry(`{"var": "A", "PATH": "a"}`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[0].path: missing"},
		{"path a list", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": ["a"]}`)), "", protocol.CodeBundleInvalid, "manifest.json: entries[0].path: want a string"},
		{"key a number", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "key": 7}`)), "", protocol.CodeBundleInvalid, "entries[0].key: want a string"},
		{"use unknown", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "use": "file"}`)), "", protocol.CodeBundleInvalid,
			`manifest.json: entries[0].use: want "env" or "registry-auth", got "file"`},
		{"two registry-auth", with(goodFiles(), "manifest.json", entry(`{"path":"a","use":"registry-auth"},{"path":"b","use":"registry-auth"}`)), "", protocol.CodeBundleInvalid,
			`entries[1].use: a second "registry-auth" entry (entries[0] is one already)`},
		{"registry-auth with a bad var", with(goodFiles(), "manifest.json", entry(`{"var":"a b","path":"a","use":"registry-auth"}`)), "", protocol.CodeBundleInvalid, `entries[0].var: "a b"`},
		{"version zero", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "version": 0}`)), "", protocol.CodeBundleInvalid,
			"manifest.json: entries[0].version: want an integer ≥ 1, got 0"},
		{"version negative", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "version": -2}`)), "", protocol.CodeBundleInvalid, "entries[0].version: want an integer ≥ 1, got -2"},
		{"version fractional", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "version": 3.0}`)), "", protocol.CodeBundleInvalid, "entries[0].version: want an integer ≥ 1, got 3.0"},
		{"version a string", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "version": "3"}`)), "", protocol.CodeBundleInvalid, "entries[0].version: want an integer ≥ 1, got a string"},
		{"version huge", with(goodFiles(), "manifest.json", entry(`{"var": "A", "path": "a", "version": 99999999999}`)), "", protocol.CodeBundleInvalid, "entries[0].version: want an integer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sha := tt.sha
			switch sha {
			case "":
				sha = Sha(tt.files)
			case "-":
				sha = ""
			}
			b, err := Parse(tt.files, sha)
			if b != nil {
				t.Fatal("Parse returned a bundle with an error")
			}
			assertRefusal(t, err, tt.code, tt.want)
		})
	}
}

// Keys match exactly: a capitalised key is another, unknown, member, never the field.
func TestMetaKeysMatchExactly(t *testing.T) {
	files := with(goodFiles(), "bundle.json", `{"agent": {"ALLOW_PRIVILEGED": true, "Allow_Rollback": true}, "PULL": "never"}`)
	b, err := Parse(files, Sha(files))
	if err != nil {
		t.Fatal(err)
	}
	if b.Meta.Agent.AllowPrivileged || b.Meta.Agent.AllowRollback || b.Meta.Pull != PullAlways {
		t.Fatalf("meta = %+v: a key in another case was read as the field", b.Meta)
	}
}

func TestParseManifestOptionalFields(t *testing.T) {
	tests := []struct {
		name  string
		entry string
		want  Entry
	}{
		{"all defaults", `{"var": "A", "path": "a"}`, Entry{Var: "A", Path: "a", Key: "value", Use: "env"}},
		{"null version is latest", `{"var": "A", "path": "a", "version": null}`, Entry{Var: "A", Path: "a", Key: "value", Use: "env"}},
		{"empty key and use take defaults", `{"var": "A", "path": "a", "key": "", "use": ""}`, Entry{Var: "A", Path: "a", Key: "value", Use: "env"}},
		{"version 1", `{"var": "_a1", "path": "a", "version": 1}`, Entry{Var: "_a1", Path: "a", Version: 1, Key: "value", Use: "env"}},
		{"registry-auth with a name", `{"var": "HARBOR", "path": "r", "use": "registry-auth", "key": "json"}`,
			Entry{Var: "HARBOR", Path: "r", Key: "json", Use: "registry-auth"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := with(goodFiles(), "manifest.json", `{"entries": [`+tt.entry+`]}`)
			b, err := Parse(files, Sha(files))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if len(b.Entries) != 1 || !reflect.DeepEqual(b.Entries[0], tt.want) {
				t.Errorf("Entries = %+v, want [%+v]", b.Entries, tt.want)
			}
		})
	}
}

// assertRefusal checks that err is a *protocol.Refusal with code and a detail containing want.
func assertRefusal(t *testing.T, err error, code, want string) {
	t.Helper()
	var r *protocol.Refusal
	if !errors.As(err, &r) {
		t.Fatalf("error %v (%T) is not a *protocol.Refusal", err, err)
	}
	if r.Code != code {
		t.Errorf("code = %s, want %s (detail %q)", r.Code, code, r.Detail)
	}
	if !strings.Contains(r.Detail, want) {
		t.Errorf("detail = %q, want it to contain %q", r.Detail, want)
	}
}

func TestDriftCorrectionIsUnsetUnlessWritten(t *testing.T) {
	for meta, want := range map[string]string{`{}`: "unset", `{"agent": {"drift_correction": null}}`: "unset",
		`{"agent": {"drift_correction": false}}`: "false", `{"agent": {"drift_correction": true}}`: "true"} {
		files := with(goodFiles(), "bundle.json", meta)
		b, err := Parse(files, Sha(files))
		if err != nil {
			t.Fatalf("%s: %v", meta, err)
		}
		got := "unset"
		if v := b.Meta.Agent.DriftCorrection; v != nil {
			got = fmt.Sprint(*v)
		}
		if got != want {
			t.Errorf("%s: drift_correction %s, want %s", meta, got, want)
		}
	}
}

func TestAutoRevertIsUnsetUnlessWritten(t *testing.T) {
	for _, tc := range []struct {
		meta string
		want *bool
	}{
		{`{}`, nil},
		{`{"agent": {"auto_revert": null}}`, nil},
		{`{"agent": {"auto_revert": false}}`, new(bool)},
		{`{"agent": {"auto_revert": true}}`, func() *bool { v := true; return &v }()},
	} {
		files := with(goodFiles(), "bundle.json", tc.meta)
		b, err := Parse(files, Sha(files))
		if err != nil {
			t.Fatalf("%s: %v", tc.meta, err)
		}
		got := b.Meta.Agent.AutoRevert
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: auto_revert = %v, want %v", tc.meta, got, tc.want)
		}
	}
}
