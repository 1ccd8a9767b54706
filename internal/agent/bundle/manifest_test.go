package bundle

import (
	"reflect"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

func TestResolvePath(t *testing.T) {
	tests := []struct {
		prefix, path string
		want         string // "" = refused
		detail       string
	}{
		{"env-qa-02/see", "gemini_api_key", "env-qa-02/see/gemini_api_key", ""},
		{"env-qa-02/see/", "db/url", "env-qa-02/see/db/url", ""},
		{"/env-qa-02/see", "./db//url/", "env-qa-02/see/db/url", ""},
		{"env-qa-02/see", "a/./b", "env-qa-02/see/a/b", ""},
		{"", "a", "a", ""},

		{"env-qa-02/see", "../../env-prod-01/see/key", "", `path "../../env-prod-01/see/key": has a ".." segment`},
		{"env-qa-02/see", "a/../b", "", `has a ".." segment`},
		{"env-qa-02/see", "a/..", "", `has a ".." segment`},
		{"env-qa-02/see", "..", "", `has a ".." segment`},
		{"env-qa-02/see", "/env-prod-01/see/key", "", `path "/env-prod-01/see/key": absolute`},
		{"env-qa-02/see", "", "", `path "": empty`},
		{"env-qa-02/see", "  ", "", `empty`},
		{"env-qa-02/see", ".", "", `path ".": names the prefix itself`},
		{"env-qa-02/see", "./.", "", `names the prefix itself`},
		{"env-qa-02/see", `a\..\b`, "", `contains "\"`},
		{"env-qa-02/see", "a\x00b", "", `contains NUL`},
		{"env-qa-02/see", "a?version=1", "", `contains "?" or "#"`},
		{"env-qa-02/see", "a#b", "", `contains "?" or "#"`},
		{"env-qa-02/see", "a\nb", "", `control character`},
	}
	for _, tt := range tests {
		t.Run(tt.prefix+"+"+tt.path, func(t *testing.T) {
			got, err := ResolvePath(tt.prefix, tt.path)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Fatalf("ResolvePath = %q, %v; want %q", got, err, tt.want)
				}
				return
			}
			if got != "" {
				t.Errorf("refused path still returned %q", got)
			}
			assertRefusal(t, err, protocol.CodeManifestPath, tt.detail)
		})
	}
}

func TestResolveManifest(t *testing.T) {
	b := &Bundle{Entries: []Entry{
		{Var: "A", Path: "a", Use: UseEnv},
		{Path: "robot", Use: UseRegistryAuth},
	}}
	got, err := b.ResolveManifest("env-qa-02/see")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"env-qa-02/see/a", "env-qa-02/see/robot"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ResolveManifest = %q, want %q", got, want)
	}

	t.Run("one bad entry refuses them all", func(t *testing.T) {
		b := &Bundle{Entries: []Entry{
			{Var: "A", Path: "a", Use: UseEnv},
			{Var: "B", Path: "b", Use: UseEnv},
			{Var: "STOLEN", Path: "../../env-prod-01/see/key", Use: UseEnv},
		}}
		got, err := b.ResolveManifest("env-qa-02/see")
		if got != nil {
			t.Errorf("paths returned alongside a refusal: %q", got)
		}
		assertRefusal(t, err, protocol.CodeManifestPath, `manifest.json: entries[2] (STOLEN): path "../../env-prod-01/see/key"`)
	})
	t.Run("registry entry named by its use", func(t *testing.T) {
		b := &Bundle{Entries: []Entry{{Path: "/robot", Use: UseRegistryAuth}}}
		_, err := b.ResolveManifest("p")
		assertRefusal(t, err, protocol.CodeManifestPath, `entries[0] (registry-auth): path "/robot"`)
	})
}
