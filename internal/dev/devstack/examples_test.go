package devstack

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
)

func TestExamplesAreBundlesTheAgentJudgesRight(t *testing.T) {
	names, err := ExampleNames(Examples())
	if err != nil || strings.Join(names, ",") != "hello,hello-privileged" {
		t.Fatalf("examples = %v, %v", names, err)
	}
	for _, tc := range []struct {
		example    string
		params     ExampleParams
		privileged []string // findings the agent's scan must report
		entries    int
	}{
		{"hello", ExampleParams{Image: "127.0.0.1:5000/monky-demo/hello:1", Pull: "always", RegistryAuth: true}, nil, 3},
		{"hello", ExampleParams{Image: "monky-demo/hello:1", Pull: "missing"}, nil, 2},
		{"hello-privileged", ExampleParams{Image: "monky-demo/hello:1", Pull: "always"},
			[]string{"worker: privileged: the whole host (true)", "worker: volumes[0]: bind source outside the release directory (/var/run/docker.sock)"}, 2},
	} {
		t.Run(tc.example+" "+tc.params.Pull, func(t *testing.T) {
			files, err := Example(Examples(), tc.example, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			for path, content := range files {
				if strings.Contains(content, "[[") {
					t.Errorf("%s keeps a placeholder:\n%s", path, content)
				}
			}
			// The agent's own parser and checks, on the exact files tenancy will serve.
			b, err := bundle.Parse(files, tenancytest.BundleSha(files))
			if err != nil {
				t.Fatalf("the agent refuses the example: %v", err)
			}
			if b.Meta.Pull != tc.params.Pull || len(b.Entries) != tc.entries {
				t.Errorf("pull %q, %d manifest entries; want %q, %d", b.Meta.Pull, len(b.Entries), tc.params.Pull, tc.entries)
			}
			if _, ok := b.RegistryEntry(); ok != tc.params.RegistryAuth {
				t.Errorf("registry-auth entry present = %v", ok)
			}
			if !strings.Contains(files["docker-compose.yml"], "image: "+tc.params.Image+"\n") {
				t.Errorf("compose file does not run %s", tc.params.Image)
			}
			priv, invalid, err := judgeExample(t, files, b)
			if err != nil || len(invalid) > 0 {
				t.Fatalf("judgement: %v %v", invalid, err)
			}
			if strings.Join(priv, "; ") != strings.Join(tc.privileged, "; ") {
				t.Errorf("privileged findings %q, want %q", priv, tc.privileged)
			}
		})
	}
}

func TestExampleRefusesBadInput(t *testing.T) {
	good := ExampleParams{Image: "monky-demo/hello:1", Pull: "always"}
	dir := fstest.MapFS{
		"nometa/docker-compose.yml": {Data: []byte("services: {}\n")},
		"broken/bundle.json":        {Data: []byte(`{"pull": "[[.Pul]]"}`)},
		"unclosed/bundle.json":      {Data: []byte(`{"pull": "[[.Pull"}`)},
	}
	for _, tc := range []struct {
		name, example string
		dir           fstest.MapFS
		params        ExampleParams
		want          string
	}{
		{"image with a space", "hello", nil, ExampleParams{Image: "evil image", Pull: "always"}, "Image"},
		{"image with a newline", "hello", nil, ExampleParams{Image: "a\nprivileged: true", Pull: "always"}, "Image"},
		{"pull policy", "hello", nil, ExampleParams{Image: good.Image, Pull: "sometimes"}, "Pull"},
		{"escaping name", "../hello", nil, good, "not a directory name"},
		{"unknown example", "nope", nil, good, "nope"},
		{"no bundle.json", "nometa", dir, good, "no bundle.json"},
		{"unknown placeholder", "broken", dir, good, "Pul"},
		{"unclosed placeholder", "unclosed", dir, good, "bundle.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Examples()
			if tc.dir != nil {
				d = tc.dir
			}
			_, err := Example(d, tc.example, tc.params)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
	if _, err := Example(dir, "nometa", good); !errors.Is(err, errNoBundleJSON) {
		t.Errorf("a directory without bundle.json: %v", err)
	}
}

func TestExampleManifestIsJSONEitherWay(t *testing.T) {
	for _, auth := range []bool{false, true} {
		files, err := Example(Examples(), "hello", ExampleParams{Image: "x/y:1", Pull: "always", RegistryAuth: auth})
		if err != nil {
			t.Fatal(err)
		}
		var m struct{ Entries []map[string]any }
		if err := json.Unmarshal([]byte(files["manifest.json"]), &m); err != nil {
			t.Fatalf("registry auth %v: manifest.json: %v\n%s", auth, err, files["manifest.json"])
		}
	}
}

// FuzzExample: whatever the image and pull policy, Example either refuses them or renders a
// bundle the agent accepts, running exactly that image in both services — a parameter can
// never smuggle YAML (a privileged flag, another service) into the compose file.
func FuzzExample(f *testing.F) {
	f.Add("127.0.0.1:5000/monky-demo/hello:1", "always", true)
	f.Add("monky-demo/hello:1", "missing", false)
	f.Add("x\n    privileged: true", "always", false)
	f.Add("x@sha256:"+strings.Repeat("a", 64), "always", true)
	f.Add("", "never", false)
	f.Fuzz(func(t *testing.T, image, pull string, auth bool) {
		files, err := Example(Examples(), "hello", ExampleParams{Image: image, Pull: pull, RegistryAuth: auth})
		if err != nil {
			return
		}
		b, err := bundle.Parse(files, tenancytest.BundleSha(files))
		if err != nil {
			t.Fatalf("rendered a bundle the agent refuses: %v", err)
		}
		priv, invalid, err := judgeExample(t, files, b)
		if err != nil || len(priv) > 0 || len(invalid) > 0 {
			t.Fatalf("image %q made the compose file %v %v %v", image, priv, invalid, err)
		}
		if n := strings.Count(files["docker-compose.yml"], "image: "+image+"\n"); n != 2 {
			t.Fatalf("image %q appears %d times", image, n)
		}
	})
}

// judgeExample runs the agent's pre-lease compose judgement on an example's compose file.
func judgeExample(t testing.TB, files map[string]string, b *bundle.Bundle) (priv, invalid []string, err error) {
	known, err := b.KnownEnv()
	if err != nil {
		return nil, nil, err
	}
	j := bundle.Judgement{Compose: []byte(files[b.Meta.ComposeFile]), File: b.Meta.ComposeFile, ReleaseDir: t.TempDir(),
		Project: "monky-demo", Env: known, WithValues: true}
	fs, err := j.Findings()
	for _, f := range fs {
		if f.Invalid {
			invalid = append(invalid, f.String(true))
		} else {
			priv = append(priv, f.String(true))
		}
	}
	return priv, invalid, err
}
