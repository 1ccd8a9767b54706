package debcopyright

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

const mitText = `MIT License

Copyright (c) 2019 Jane Doe

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction.`

const bsd3Text = `Copyright (c) 2009 The Go Authors. All rights reserved.

Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:
   * Neither the name of Google Inc. nor the names of its
contributors may be used to endorse or promote products.`

const bsd2Text = `Copyright 2012 Some One
Redistribution and use in source and binary forms, with or without
modification, are permitted provided that the following conditions are met:
1. Redistributions of source code must retain the above copyright notice.`

const apacheText = `
                                 Apache License
                           Version 2.0, January 2004
                        http://www.apache.org/licenses/

   TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION
      (c) You must retain, in the Source form of any Derivative Works

   END OF TERMS AND CONDITIONS

   APPENDIX: How to apply the Apache License to your work.

      Copyright [yyyy] [name of copyright owner]

   limitations under the License.
`

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       string
	}{
		{"mit", mitText, "MIT"},
		{"bsd3", bsd3Text, "BSD-3-Clause"},
		{"bsd2", bsd2Text, "BSD-2-Clause"},
		{"apache", apacheText, "Apache-2.0"},
		{"mpl", "Mozilla Public License Version 2.0\n==================", "MPL-2.0"},
		{"isc", "ISC License\n\nPermission to use, copy, modify, and/or distribute this software for any\npurpose with or without fee is hereby granted", "ISC"},
		{"unlicense", "This is free and unencumbered software released into the public domain.", "Unlicense"},
		{"apache and bsd", apacheText + "\n---\n" + bsd3Text, "Apache-2.0 BSD-3-Clause"},
		{"unknown", "All rights reserved. Ask us.", ""},
		{"wrapped differently", "permission   is hereby\n granted, FREE of charge", "MIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(Classify(tc.text), " "); got != tc.want {
				t.Errorf("Classify = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCopyrightLines(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []string
	}{
		{"mit", mitText, []string{"2019 Jane Doe"}},
		{"apache template and clause left out", apacheText, nil},
		{"apache and bsd", apacheText + bsd3Text, []string{"2009 The Go Authors. All rights reserved."}},
		{"prose is no statement", "with the additional\ncopyright staring in 2011 when the project was ported over:\nCopyright (c) 2006-2010 Kirill Simonov", []string{"2006-2010 Kirill Simonov"}},
		{"duplicates once", "Copyright 2020 A\nCopyright 2020 A\n© 2021 B", []string{"2020 A", "2021 B"}},
		{"authors without a year", "Copyright The Foo Authors", []string{"The Foo Authors"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := copyrightLines(tc.text); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("copyrightLines = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEscapePath(t *testing.T) {
	got, err := escapePath("github.com/BurntSushi/toml")
	if err != nil || got != "github.com/!burnt!sushi/toml" {
		t.Errorf("escapePath = %q, %v", got, err)
	}
	if _, err := escapePath("example.com/a!b"); err == nil {
		t.Error("a '!' in a module path was accepted")
	}
}

// cache lays out a module cache with the given modules' LICENSE (and NOTICE) files.
func cache(t *testing.T, mods map[string][2]string) string {
	t.Helper()
	dir := t.TempDir()
	for key, files := range mods {
		path, version, _ := strings.Cut(key, "@")
		escaped, err := escapePath(path)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(dir, escaped+"@"+version)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if files[0] != "" {
			if err := os.WriteFile(filepath.Join(d, "LICENSE"), []byte(files[0]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if files[1] != "" {
			if err := os.WriteFile(filepath.Join(d, "NOTICE"), []byte(files[1]), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

func infos(deps map[string][]*debug.Module) func(string) (*debug.BuildInfo, error) {
	return func(bin string) (*debug.BuildInfo, error) {
		d, ok := deps[filepath.Base(bin)]
		if !ok {
			return nil, errors.New("not a Go binary")
		}
		return &debug.BuildInfo{GoVersion: "go1.26.8", Deps: d}, nil
	}
}

func goRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "LICENSE"), []byte(bsd3Text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func options(t *testing.T, mc string, read func(string) (*debug.BuildInfo, error)) Options {
	return Options{UpstreamName: "monky-deployd", UpstreamContact: "Team <t@example.com>", Source: "https://example.com",
		Copyright: "2026 Tikali", License: "proprietary", LicenseText: "All rights reserved.",
		Binaries: []Binary{{"/build/monky-deployd", "/usr/bin/monky-deployd"}, {"/build/fleetctl", "/usr/bin/fleetctl"}}, ModCache: mc, GoRoot: goRoot(t), ReadBuildInfo: read}
}

func TestRender(t *testing.T) {
	mc := cache(t, map[string][2]string{
		"github.com/Foo/mit@v1.0.0":       {mitText, ""},
		"example.com/apache@v0.1.0":       {apacheText, "Example NOTICE\n\nsecond paragraph"},
		"example.com/both@v2.0.0":         {apacheText + "\n----\n" + bsd3Text, ""},
		"example.com/replaced@v1.1.0":     {bsd2Text, ""},
		"example.com/deployd-only@v0.0.1": {mitText, ""},
	})
	read := infos(map[string][]*debug.Module{
		"monky-deployd": {
			{Path: "github.com/Foo/mit", Version: "v1.0.0"},
			{Path: "example.com/apache", Version: "v0.1.0"},
			{Path: "example.com/both", Version: "v2.0.0"},
			{Path: "example.com/original", Version: "v1.0.0", Replace: &debug.Module{Path: "example.com/replaced", Version: "v1.1.0"}},
			{Path: "example.com/deployd-only", Version: "v0.0.1"},
		},
		"fleetctl": {{Path: "github.com/Foo/mit", Version: "v1.0.0"}},
	})
	out, err := Render(options(t, mc, read))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{
		"Format: " + FormatURL + "\n",
		"Files: *\nCopyright: 2026 Tikali\nLicense: proprietary\n All rights reserved.\n",
		"Files: vendor/github.com/Foo/mit/*\nCopyright: 2019 Jane Doe\nComment: github.com/Foo/mit v1.0.0, compiled into monky-deployd and fleetctl.\nLicense: MIT\n MIT License\n .\n Copyright (c) 2019 Jane Doe\n",
		// Apache alone: a reference, the NOTICE carried.
		"Files: vendor/example.com/apache/*\nCopyright: the authors of example.com/apache\nComment: example.com/apache v0.1.0, compiled into monky-deployd.\n Its NOTICE file reads:\n Example NOTICE\n .\n second paragraph\nLicense: Apache-2.0\n",
		// Both: BSD's words kept, Apache's replaced by the pointer.
		"License: Apache-2.0 and BSD-3-Clause\n [The Apache License, Version 2.0: /usr/share/common-licenses/Apache-2.0]\n",
		// A replaced module is listed as what was compiled in.
		"Files: vendor/example.com/replaced/*\nCopyright: 2012 Some One\n",
		"Files: go/src/*\nCopyright: 2009 The Go Authors. All rights reserved.\nComment: The Go standard library and runtime (go1.26.8), linked into every\n binary.\nLicense: BSD-3-Clause\n",
		"\nLicense: Apache-2.0\n On Debian systems, the full text of the Apache-2.0 license can be found in\n /usr/share/common-licenses/Apache-2.0.\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("copyright lacks:\n%s\n--- in:\n%s", want, s)
		}
	}
	for _, banned := range []string{"TERMS AND CONDITIONS", "example.com/original", "\nLicense: MPL-2.0"} {
		if strings.Contains(s, banned) {
			t.Errorf("copyright holds %q:\n%s", banned, s)
		}
	}
	// Every paragraph's continuation line starts with a space; paragraphs are separated by one
	// empty line.
	for i, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, " ") && !strings.Contains(l, ": ") && !strings.HasSuffix(l, ":") {
			t.Errorf("line %d is neither a field nor a continuation: %q", i+1, l)
		}
	}
	if strings.Contains(s, "\n\n\n") {
		t.Error("two empty lines in a row")
	}
}

func TestRenderRefuses(t *testing.T) {
	good := map[string][]*debug.Module{"monky-deployd": {{Path: "example.com/x", Version: "v1.0.0"}}, "fleetctl": nil}
	for _, tc := range []struct {
		name string
		mods map[string][2]string
		deps map[string][]*debug.Module
		want string
	}{
		{"no license file", map[string][2]string{"example.com/x@v1.0.0": {"", ""}}, good, "has no LICENSE file"},
		{"unknown license", map[string][2]string{"example.com/x@v1.0.0": {"Ask us first.", ""}}, good, "is no license this tool knows"},
		{"not in the cache", nil, good, "module cache"},
		{"local replace", nil, map[string][]*debug.Module{"monky-deployd": {{Path: "example.com/x", Version: "v1.0.0", Replace: &debug.Module{Path: "../x"}}}}, "local directory"},
		{"not a Go binary", nil, map[string][]*debug.Module{}, "not a Go binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(options(t, cache(t, tc.mods), infos(tc.deps)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Render: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// FuzzBody: whatever a license file holds, it becomes continuation lines (a space first, an
// empty line as " ."), so it cannot start a field or a paragraph of its own.
func FuzzBody(f *testing.F) {
	for _, s := range []string{mitText, apacheText, "a\n\n\nb", "\r\n\tx\n", "Files: *\nLicense: x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, l := range strings.Split(strings.TrimSuffix(body(text), "\n"), "\n") {
			if l == "" && strings.TrimSpace(text) == "" {
				continue
			}
			if !strings.HasPrefix(l, " ") || strings.Contains(l, "\r") || strings.Contains(l, "\t") {
				t.Fatalf("body line %q of %q", l, text)
			}
		}
		_ = Classify(text)
		for _, c := range copyrightLines(text) {
			if strings.Contains(c, "\n") || c == "" {
				t.Fatalf("copyright line %q of %q", c, text)
			}
		}
	})
}

// A module replaced by a patched copy in the source tree (third_party/) is listed under the
// module it copies, its license read from the copy, and the comment says it is a copy.
func TestRenderReadsALocalReplace(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "third_party", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "third_party", "x", "LICENSE"), []byte(mitText), 0o644); err != nil {
		t.Fatal(err)
	}
	deps := map[string][]*debug.Module{"monky-deployd": {{Path: "example.com/x", Version: "v6.0.1", Replace: &debug.Module{Path: "./third_party/x", Version: "(devel)"}}}, "fleetctl": nil}
	o := options(t, cache(t, nil), infos(deps))
	o.SourceRoot = src
	out, err := Render(o)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{"example.com/x v6.0.1 (a patched copy, third_party/x in the", "License: MIT"} {
		if !strings.Contains(strings.ReplaceAll(s, "\n ", " "), want) {
			t.Errorf("copyright lacks %q:\n%s", want, s)
		}
	}
	// A copy without its license file is refused, as one in the module cache is.
	if err := os.Remove(filepath.Join(src, "third_party", "x", "LICENSE")); err != nil {
		t.Fatal(err)
	}
	if _, err := Render(o); err == nil || !strings.Contains(err.Error(), "has no LICENSE file") {
		t.Errorf("a copy without a license: %v", err)
	}
}
