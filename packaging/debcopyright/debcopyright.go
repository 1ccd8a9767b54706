// Package debcopyright writes a package's machine-readable debian/copyright (DEP-5): the
// project's own paragraph, then one paragraph per Go module compiled into its static binaries —
// read from the binaries' own build information, so the file names exactly what ships — with the
// license found in the module's source. MIT, BSD and ISC notices must travel with a binary, so
// their texts are carried in full; Apache-2.0 and MPL-2.0 refer to /usr/share/common-licenses,
// and Apache NOTICE files are carried as the license asks.
package debcopyright

import (
	"debug/buildinfo"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"unicode"
)

// FormatURL is the DEP-5 format line's value.
const FormatURL = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"

// Options describe one package's copyright file.
type Options struct {
	UpstreamName, UpstreamContact, Source string
	// Copyright and License head the project's own paragraph ("Files: *"); LicenseText is the
	// license's text (one or more paragraphs).
	Copyright, License, LicenseText string
	// Binaries are the static Go binaries the package ships; their modules are listed.
	Binaries []Binary
	// ModCache is the Go module cache (go env GOMODCACHE) holding the modules' sources.
	ModCache string
	// SourceRoot is the main module's root: a module replaced by a local directory (a patched
	// copy under third_party/) is read from there, relative to it.
	SourceRoot string
	// GoRoot is the Go tree the binaries were built with (go env GOROOT): its LICENSE covers the
	// standard library and runtime linked into every binary.
	GoRoot string
	// ReadBuildInfo reads a binary's build information; nil means debug/buildinfo.ReadFile.
	ReadBuildInfo func(path string) (*debug.BuildInfo, error)
}

// Binary is a static Go binary: where the build left it and where the package installs it.
type Binary struct {
	Path      string // e.g. dist/bin/monky-deployd
	Installed string // e.g. /usr/bin/monky-deployd
}

// Module is one module compiled into a binary: where its source is and under what license.
type Module struct {
	Path, Version string
	// Dir is the module's source in the module cache.
	Dir string
	// Licenses are the SPDX names its license file grants, e.g. ["Apache-2.0"], ["Apache-2.0", "MIT"].
	Licenses []string
	// Copyright are its license file's copyright lines (empty: none stated there).
	Copyright []string
	// Text is the license file's text; Notice an Apache NOTICE file's text.
	Text, Notice string
	// Local is the directory of a local replace (e.g. ./third_party/jsonschema), "" for one from
	// the module cache.
	Local string
	// Binaries are the installed binaries it is compiled into, by name (monky-deployd).
	Binaries []string
}

// Modules reads the modules compiled into the binaries with read (nil: debug/buildinfo.ReadFile).
// A module replaced by a local directory is read from that directory under srcRoot.
func Modules(binaries []Binary, modCache, srcRoot string, read func(string) (*debug.BuildInfo, error)) ([]Module, error) {
	if modCache == "" {
		return nil, errors.New("debcopyright: no module cache")
	}
	if read == nil {
		read = buildinfo.ReadFile
	}
	byKey := map[string]*Module{}
	for _, b := range binaries {
		bin := b.Path
		info, err := read(bin)
		if err != nil {
			return nil, fmt.Errorf("debcopyright: %s: %w", bin, err)
		}
		for _, d := range info.Deps {
			path, version, local := d.Path, d.Version, ""
			if d.Replace != nil {
				path, version = d.Replace.Path, d.Replace.Version
				if (version == "" || version == "(devel)") && isLocalPath(path) {
					// A patched copy: listed under the module it copies, read from its directory.
					if srcRoot == "" {
						return nil, fmt.Errorf("debcopyright: %s: module %s is built from the local directory %s, and no source root was given to read its license from", bin, d.Path, path)
					}
					path, version, local = d.Path, d.Version, path
				}
			}
			if version == "" || version == "(devel)" {
				return nil, fmt.Errorf("debcopyright: %s: module %s is built from a local directory (a replace) with no version; its license cannot be read", bin, path)
			}
			key := path + "@" + version + "@" + local
			m := byKey[key]
			if m == nil {
				escaped, err := escapePath(path)
				if err != nil {
					return nil, fmt.Errorf("debcopyright: %s: %w", bin, err)
				}
				m = &Module{Path: path, Version: version, Dir: filepath.Join(modCache, escaped+"@"+version)}
				if local != "" {
					m.Local = local
					m.Dir = local
					if !filepath.IsAbs(local) {
						m.Dir = filepath.Join(srcRoot, local)
					}
				}
				if err := m.read(); err != nil {
					return nil, err
				}
				byKey[key] = m
			}
			m.Binaries = appendOnce(m.Binaries, filepath.Base(b.Installed))
		}
	}
	out := make([]Module, 0, len(byKey))
	for _, m := range byKey {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// isLocalPath reports whether a replace names a directory rather than a module (go.mod's rule).
func isLocalPath(p string) bool {
	return filepath.IsAbs(p) || p == "." || p == ".." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../")
}

func appendOnce(list []string, s string) []string {
	for _, v := range list {
		if v == s {
			return list
		}
	}
	return append(list, s)
}

// escapePath is the module cache's case encoding: an upper-case letter becomes '!' and its
// lower case (github.com/BurntSushi → github.com/!burnt!sushi).
func escapePath(p string) (string, error) {
	var b strings.Builder
	for _, r := range p {
		switch {
		case r == '!' || r >= unicode.MaxASCII:
			return "", fmt.Errorf("module path %q has a character the module cache cannot hold", p)
		case 'A' <= r && r <= 'Z':
			b.WriteByte('!')
			b.WriteRune(unicode.ToLower(r))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}

var licenseNames = regexp.MustCompile(`(?i)^(licen[cs]e|copying)(\.md|\.txt)?$`)
var noticeNames = regexp.MustCompile(`(?i)^notice(\.md|\.txt)?$`)

func (m *Module) read() error {
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		return fmt.Errorf("debcopyright: module %s@%s: %w (is it in the module cache? go mod download)", m.Path, m.Version, err)
	}
	var licenseFile, noticeFile string
	for _, e := range entries {
		switch {
		case licenseFile == "" && licenseNames.MatchString(e.Name()):
			licenseFile = e.Name()
		case noticeFile == "" && noticeNames.MatchString(e.Name()):
			noticeFile = e.Name()
		}
	}
	if licenseFile == "" {
		return fmt.Errorf("debcopyright: module %s@%s has no LICENSE file in %s: its terms must be looked up by hand before it ships", m.Path, m.Version, m.Dir)
	}
	text, err := os.ReadFile(filepath.Join(m.Dir, licenseFile))
	if err != nil {
		return fmt.Errorf("debcopyright: %w", err)
	}
	m.Text = string(text)
	if m.Licenses = Classify(m.Text); len(m.Licenses) == 0 {
		return fmt.Errorf("debcopyright: module %s@%s: %s is no license this tool knows (Apache-2.0, MPL-2.0, MIT, BSD-2/3-Clause, ISC, Unlicense): look at it and teach Classify", m.Path, m.Version, licenseFile)
	}
	m.Copyright = copyrightLines(m.Text)
	if noticeFile != "" {
		n, err := os.ReadFile(filepath.Join(m.Dir, noticeFile))
		if err != nil {
			return fmt.Errorf("debcopyright: %w", err)
		}
		m.Notice = string(n)
	}
	return nil
}

// Classify names the licenses a license file's text grants, by their defining sentences
// (whitespace and case do not matter). Empty when none is recognised.
func Classify(text string) []string {
	t := strings.ToLower(strings.Join(strings.Fields(text), " "))
	var out []string
	has := func(s string) bool { return strings.Contains(t, s) }
	if has("apache license") && has("version 2.0") {
		out = append(out, "Apache-2.0")
	}
	if has("mozilla public license") && (has("version 2.0") || has("v. 2.0")) {
		out = append(out, "MPL-2.0")
	}
	if has("permission is hereby granted, free of charge") {
		out = append(out, "MIT")
	}
	if has("redistribution and use in source and binary forms") {
		if has("neither the name") || has("names of its contributors") || has("name of the copyright holder") {
			out = append(out, "BSD-3-Clause")
		} else {
			out = append(out, "BSD-2-Clause")
		}
	}
	if has("permission to use, copy, modify, and/or distribute this software for any purpose") ||
		has("permission to use, copy, modify, and distribute this software for any purpose") {
		out = append(out, "ISC")
	}
	if has("this is free and unencumbered software released into the public domain") {
		out = append(out, "Unlicense")
	}
	return out
}

var (
	// copyrightLine is a statement, not prose: "Copyright" (or (c), ©) first, then a year or the
	// authors. The Apache text's "(c) You must retain…" and the yaml port's "copyright staring in
	// 2011…" are not.
	copyrightLine = regexp.MustCompile(`^(?:(?:Copyright|COPYRIGHT)\b|\([cC]\)|©).*(?:\d{4}|[Aa]uthors|AUTHORS)`)
	// copyrightWord is the statement's own lead, which the Copyright field leaves out.
	copyrightWord = regexp.MustCompile(`^(?:(?:Copyright|COPYRIGHT)\s*(?:\([cC]\)|©)?|\([cC]\)|©)\s*`)
)

// copyrightLines are the license text's copyright statements without their lead word
// ("Copyright (c) 2013 Blake Mizerany" → "2013 Blake Mizerany"), leaving out the template lines
// of license texts ("Copyright [yyyy] [name of copyright owner]") and the Apache terms.
func copyrightLines(text string) []string {
	var out []string
	seen := map[string]bool{}
	for _, l := range strings.Split(withoutCommonTexts(text), "\n") {
		l = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "#*-/ "))
		if !copyrightLine.MatchString(l) || strings.ContainsAny(l, "[]{}<>") || len(l) > 200 {
			continue
		}
		l = copyrightWord.ReplaceAllString(l, "")
		if l != "" && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	return out
}

// common are the licenses Debian ships in /usr/share/common-licenses and that need no full text.
var common = map[string]bool{"Apache-2.0": true, "MPL-2.0": true}

// Render writes the copyright file.
func Render(o Options) ([]byte, error) {
	if o.UpstreamName == "" || o.Copyright == "" || o.License == "" || o.LicenseText == "" {
		return nil, errors.New("debcopyright: UpstreamName, Copyright, License and LicenseText are required")
	}
	if len(o.Binaries) == 0 {
		return nil, errors.New("debcopyright: no binaries")
	}
	read := o.ReadBuildInfo
	if read == nil {
		read = buildinfo.ReadFile
	}
	mods, err := Modules(o.Binaries, o.ModCache, o.SourceRoot, read)
	if err != nil {
		return nil, err
	}
	goLicense, err := os.ReadFile(filepath.Join(o.GoRoot, "LICENSE"))
	if err != nil {
		return nil, fmt.Errorf("debcopyright: the Go tree's license: %w", err)
	}
	goVersion := ""
	if info, err := read(o.Binaries[0].Path); err == nil {
		goVersion = info.GoVersion
	}
	var names []string
	for _, b := range o.Binaries {
		names = append(names, b.Installed)
	}

	var b strings.Builder
	field := func(name, value string) { b.WriteString(name + ": " + value + "\n") }
	field("Format", FormatURL)
	field("Upstream-Name", o.UpstreamName)
	if o.UpstreamContact != "" {
		field("Upstream-Contact", o.UpstreamContact)
	}
	if o.Source != "" {
		field("Source", o.Source)
	}
	field("Comment", wrap(len("Comment: "), "The binaries ("+strings.Join(names, ", ")+") are statically linked Go programs. After the first, "+
		"each Files paragraph covers one Go module compiled into them, as `go version -m` lists them, under the path "+
		"`go mod vendor` would give its source; the Go standard library and runtime come last."))
	b.WriteString("\n")

	field("Files", "*")
	field("Copyright", o.Copyright)
	b.WriteString("License: " + o.License + "\n" + body(o.LicenseText))

	needStandalone := map[string]bool{}
	for _, m := range mods {
		b.WriteString("\n")
		field("Files", "vendor/"+m.Path+"/*")
		field("Copyright", strings.Join(orDefault(m.Copyright, "the authors of "+m.Path), "\n "))
		what := m.Path + " " + m.Version
		if m.Local != "" {
			what += " (a patched copy, " + strings.TrimPrefix(m.Local, "./") + " in the source)"
		}
		comment := wrap(len("Comment: "), what+", compiled into "+strings.Join(m.Binaries, " and ")+".")
		if m.Notice != "" {
			comment += "\n Its NOTICE file reads:\n" + body(m.Notice)
		}
		field("Comment", strings.TrimRight(comment, "\n"))
		license := strings.Join(m.Licenses, " and ")
		inline := false
		for _, l := range m.Licenses {
			if !common[l] {
				inline = true
			} else {
				needStandalone[l] = true
			}
		}
		if inline {
			b.WriteString("License: " + license + "\n" + body(withoutCommonTexts(m.Text)))
		} else {
			field("License", license)
		}
	}
	b.WriteString("\n")
	field("Files", "go/src/*")
	field("Copyright", strings.Join(orDefault(copyrightLines(string(goLicense)), "The Go Authors"), "\n "))
	field("Comment", wrap(len("Comment: "), "The Go standard library and runtime ("+goVersion+"), linked into every binary."))
	b.WriteString("License: BSD-3-Clause\n" + body(string(goLicense)))

	for _, l := range []string{"Apache-2.0", "MPL-2.0"} {
		if !needStandalone[l] {
			continue
		}
		b.WriteString("\nLicense: " + l + "\n " + wrap(1, "On Debian systems, the full text of the "+l+" license can be found in "+
			"/usr/share/common-licenses/"+l+".") + "\n")
	}
	return []byte(b.String()), nil
}

func orDefault(list []string, def string) []string {
	if len(list) == 0 {
		return []string{def}
	}
	return list
}

var (
	// apacheWithAppendix and apacheTerms are a full Apache-2.0 text, with or without its
	// "How to apply" appendix.
	apacheWithAppendix = regexp.MustCompile(`(?s)[ \t]*Apache License\s+Version 2\.0, January 2004.*?END OF TERMS AND CONDITIONS\s+APPENDIX: How to apply.*?limitations under the License\.`)
	apacheTerms        = regexp.MustCompile(`(?s)[ \t]*Apache License\s+Version 2\.0, January 2004.*?END OF TERMS AND CONDITIONS`)
)

// withoutCommonTexts replaces a full Apache-2.0 text inside a license file that also grants
// another license with a pointer to Debian's copy (lintian refuses the full text in a copyright
// file; the other license's own words stay).
func withoutCommonTexts(text string) string {
	const pointer = "[The Apache License, Version 2.0: /usr/share/common-licenses/Apache-2.0]"
	text = apacheWithAppendix.ReplaceAllString(text, pointer)
	return apacheTerms.ReplaceAllString(text, pointer)
}

// body is a multi-line field's continuation: every line indented by one space, an empty line
// written as " .", tabs expanded, and at most one empty line in a row.
func body(text string) string {
	var b strings.Builder
	blank := false
	for _, l := range strings.Split(strings.Trim(strings.ReplaceAll(text, "\r", ""), "\n"), "\n") {
		l = strings.TrimRight(strings.ReplaceAll(l, "\t", "    "), " ")
		if l == "" {
			if !blank {
				b.WriteString(" .\n")
			}
			blank = true
			continue
		}
		blank = false
		b.WriteString(" " + l + "\n")
	}
	return b.String()
}

// wrap folds a one-paragraph value into continuation lines of at most 79 columns; the first
// line starts at column lead (after its field name).
func wrap(lead int, s string) string {
	words := strings.Fields(s)
	var b strings.Builder
	line := lead
	for i, w := range words {
		if i > 0 {
			if line+1+len(w) > 78 {
				b.WriteString("\n ")
				line = 1
			} else {
				b.WriteString(" ")
				line++
			}
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}
