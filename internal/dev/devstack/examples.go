package devstack

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"text/template"
)

// The example bundles, one directory each; `all:` keeps .env.template.
//
//go:embed all:examples
var embedded embed.FS

// Examples is the directory of example bundles built into the stack (examples/<name>/…).
func Examples() fs.FS {
	sub, err := fs.Sub(embedded, "examples")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory
	}
	return sub
}

// ExampleParams fill an example's [[…]] placeholders.
type ExampleParams struct {
	// Image is the image every service runs, e.g. 127.0.0.1:5000/hello:1.
	Image string
	// Pull is bundle.json's pull policy: "always" (from the registry) or "missing" (an image
	// present on the engine is used as is: the stack without a registry).
	Pull string
	// RegistryAuth adds the manifest entry whose secret is the registry pull credential.
	RegistryAuth bool
}

var imageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._:/-]*(@sha256:[a-f0-9]{64})?$`)

// ExampleNames lists the examples in dir, sorted.
func ExampleNames(dir fs.FS) ([]string, error) {
	ents, err := fs.ReadDir(dir, ".")
	if err != nil {
		return nil, fmt.Errorf("devstack: examples: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// Example renders the bundle dir/<name>: every file, relative path to content, with the
// placeholders (text/template, delimiters [[ ]] so that compose's and the agent's ${VAR} stay
// as they are) filled from p. The result is what tenancy serves.
func Example(dir fs.FS, name string, p ExampleParams) (map[string]string, error) {
	if !imageRE.MatchString(p.Image) {
		return nil, fmt.Errorf("devstack: example %s: Image %q is not an image reference", name, p.Image)
	}
	if p.Pull != "always" && p.Pull != "missing" {
		return nil, fmt.Errorf("devstack: example %s: Pull %q: want always or missing", name, p.Pull)
	}
	if !fs.ValidPath(name) || name == "." {
		return nil, fmt.Errorf("devstack: example %q: not a directory name", name)
	}
	files := map[string]string{}
	err := fs.WalkDir(dir, name, func(p2 string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := fs.ReadFile(dir, p2)
		if err != nil {
			return err
		}
		rel := p2[len(name)+1:]
		t, err := template.New(rel).Delims("[[", "]]").Option("missingkey=error").Parse(string(raw))
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		var out bytes.Buffer
		if err := t.Execute(&out, p); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		files[path.Clean(rel)] = out.String()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("devstack: example %s: %w", name, err)
	}
	if _, ok := files["bundle.json"]; !ok {
		return nil, fmt.Errorf("devstack: example %s: %w", name, errNoBundleJSON)
	}
	return files, nil
}

var errNoBundleJSON = errors.New("no bundle.json (is it a bundle directory?)")
