// Package bundle parses and checks a release bundle from tenancy and renders its .env, refusing
// (with a *protocol.Refusal) anything the agent must not stage or run before any secret is read.
package bundle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
)

// Limits on a bundle (PROTOCOL: at most 256 files and 8 MiB in all).
const (
	MaxFiles      = 256
	MaxTotalBytes = 8 << 20
)

// Well-known file names inside a bundle.
const (
	MetaFile           = "bundle.json"
	ManifestFile       = "manifest.json"
	EnvTemplateFile    = ".env.template"
	EnvFile            = ".env"
	DefaultComposeFile = "docker-compose.yml"
)

// Pull policies of bundle.json `pull`.
const (
	PullAlways  = "always"
	PullMissing = "missing"
)

// Manifest entry uses.
const (
	UseEnv          = "env"
	UseRegistryAuth = "registry-auth"
)

// DefaultKey is the KV key a manifest entry reads when it names none.
const DefaultKey = "value"

// Bundle is a parsed, validated bundle; Files holds every file as received (the sha covers all).
type Bundle struct {
	Sha         string
	Files       map[string]string
	Meta        Meta
	Entries     []Entry
	EnvTemplate string
}

// Meta is bundle.json with its defaults applied.
type Meta struct {
	// Address, Renderer, ImagesPolicy and SecretsProvider are informational: a non-string is kept as
	// compact JSON, not refused, so tenancy may grow them without breaking old agents.
	Address         string
	Pull            string // PullAlways (default) or PullMissing
	Renderer        string
	ImagesPolicy    string
	SecretsProvider string
	ComposeFile     string // default DefaultComposeFile; always a file of the bundle
	Agent           Agent
	Files           []string // as declared; not checked against Bundle.Files
}

// Agent is bundle.json's `agent` profile. HealthyTimeoutS 0 means "not set": use the config's.
type Agent struct {
	AllowPrivileged bool
	AllowRollback   bool
	DiskNeedBytes   int64
	HealthyTimeoutS int
	// AutoRevert, when set, overrides the config's auto_revert (false: a one-way migration).
	AutoRevert *bool
	// DriftCorrection, when set, overrides the config's drift_correction (issue 22).
	DriftCorrection *bool
}

// Entry is one manifest.json entry with its defaults applied. Version 0 means the latest.
type Entry struct {
	Var     string
	Path    string
	Version int
	Key     string
	Use     string
}

// EnvEntries returns the entries that become .env variables, in manifest order.
func (b *Bundle) EnvEntries() []Entry {
	var out []Entry
	for _, e := range b.Entries {
		if e.Use == UseEnv {
			out = append(out, e)
		}
	}
	return out
}

// RegistryEntry returns the registry credential entry, never an env var (.env reaches containers).
func (b *Bundle) RegistryEntry() (Entry, bool) {
	for _, e := range b.Entries {
		if e.Use == UseRegistryAuth {
			return e, true
		}
	}
	return Entry{}, false
}

// Sha is the bundle's content address: hex SHA-256 over, per file in path byte order, path +
// "\n" + decimal length + "\n" + content (the length keeps the framing unambiguous).
func Sha(files map[string]string) string {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, p := range paths {
		c := files[p]
		h.Write([]byte(p))
		h.Write([]byte{'\n'})
		h.Write([]byte(strconv.Itoa(len(c))))
		h.Write([]byte{'\n'})
		h.Write([]byte(c))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func invalid(format string, args ...any) *protocol.Refusal {
	return protocol.Refuse(protocol.CodeBundleInvalid, format, args...)
}

// Parse validates files against the desired sha and decodes them; every failure is a
// *protocol.Refusal (BUNDLE_INVALID naming path or field, or BUNDLE_SHA_MISMATCH). It writes nothing.
func Parse(files map[string]string, desiredSha string) (*Bundle, error) {
	if err := checkPaths(files); err != nil {
		return nil, err
	}
	sha := Sha(files)
	if !strings.EqualFold(sha, desiredSha) {
		return nil, protocol.Refuse(protocol.CodeBundleShaMismatch,
			"content sha %s does not match desired sha %s", protocol.ShortSha(sha), protocol.ShortSha(desiredSha))
	}
	meta, err := parseMeta(files)
	if err != nil {
		return nil, err
	}
	entries, err := parseManifest(files)
	if err != nil {
		return nil, err
	}
	return &Bundle{
		Sha:         sha,
		Files:       files,
		Meta:        meta,
		Entries:     entries,
		EnvTemplate: files[EnvTemplateFile],
	}, nil
}

// checkPaths enforces path and size rules first: no path may climb out of the release directory.
func checkPaths(files map[string]string) error {
	if len(files) > MaxFiles {
		return invalid("%d files, at most %d allowed", len(files), MaxFiles)
	}
	paths := make([]string, 0, len(files))
	total := 0
	for p, c := range files {
		total += len(c)
		paths = append(paths, p)
	}
	if total > MaxTotalBytes {
		return invalid("%d bytes in all, at most %d allowed", total, MaxTotalBytes)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if why := badPath(p); why != "" {
			return invalid("path %q: %s", p, why)
		}
	}
	if _, ok := files[EnvFile]; ok {
		// The agent writes .env from .env.template; a shipped one could be what compose reads.
		return invalid("path %q: written by the agent from %s, a bundle may not ship it", EnvFile, EnvTemplateFile)
	}
	// A path that is both a file and a directory cannot be staged.
	for _, p := range paths {
		for i := 0; i < len(p); i++ {
			if p[i] == '/' {
				if _, ok := files[p[:i]]; ok {
					return invalid("path %q: %q is a file, not a directory", p, p[:i])
				}
			}
		}
	}
	return nil
}

// badPath says what is wrong with a bundle path, or "" when it is acceptable.
func badPath(p string) string {
	switch {
	case p == "":
		return "empty path"
	case strings.HasPrefix(p, "/"):
		return "absolute path"
	case strings.ContainsRune(p, '\\'):
		return `contains "\"`
	case strings.ContainsRune(p, 0):
		return "contains NUL"
	}
	for i := 0; i < len(p); i++ {
		// Control characters make log lines and the sha framing ambiguous to a reader.
		if p[i] < 0x20 || p[i] == 0x7f {
			return "contains a control character"
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return "empty path segment"
		case ".":
			return `"." segment`
		case "..":
			return `".." segment`
		}
	}
	return ""
}

// metaWire is bundle.json: informational fields raw (any JSON type), acted-on fields typed.
type metaWire struct {
	Address         json.RawMessage `json:"address"`
	Pull            string          `json:"pull"`
	Renderer        json.RawMessage `json:"renderer"`
	ImagesPolicy    json.RawMessage `json:"images_policy"`
	SecretsProvider json.RawMessage `json:"secrets_provider"`
	ComposeFile     string          `json:"compose_file"`
	Agent           struct {
		AllowPrivileged bool  `json:"allow_privileged"`
		AllowRollback   bool  `json:"allow_rollback"`
		DiskNeedBytes   int64 `json:"disk_need_bytes"`
		HealthyTimeoutS int   `json:"healthy_timeout_s"`
		AutoRevert      *bool `json:"auto_revert"`
		DriftCorrection *bool `json:"drift_correction"`
	} `json:"agent"`
	Files []string `json:"files"`
}

// metaWant names the expected JSON type of each typed bundle.json field, for error messages.
var metaWant = map[string]string{
	"":                        "an object",
	"pull":                    "a string",
	"compose_file":            "a string",
	"agent":                   "an object",
	"agent.allow_privileged":  "true or false",
	"agent.allow_rollback":    "true or false",
	"agent.disk_need_bytes":   "an integer",
	"agent.healthy_timeout_s": "an integer",
	"agent.auto_revert":       "true or false",
	"agent.drift_correction":  "true or false",
	"files":                   "a list of strings",
}

func parseMeta(files map[string]string) (Meta, error) {
	raw, ok := files[MetaFile]
	if !ok {
		return Meta{}, invalid("%s: missing", MetaFile)
	}
	var w metaWire
	if err := strictjson.Unmarshal([]byte(raw), &w); err != nil {
		return Meta{}, invalid("%s: %s", MetaFile, jsonProblem(err, metaWant))
	}
	m := Meta{
		Address:         looseString(w.Address),
		Pull:            w.Pull,
		Renderer:        looseString(w.Renderer),
		ImagesPolicy:    looseString(w.ImagesPolicy),
		SecretsProvider: looseString(w.SecretsProvider),
		ComposeFile:     w.ComposeFile,
		Agent: Agent{
			AllowPrivileged: w.Agent.AllowPrivileged,
			AllowRollback:   w.Agent.AllowRollback,
			DiskNeedBytes:   w.Agent.DiskNeedBytes,
			HealthyTimeoutS: w.Agent.HealthyTimeoutS,
			AutoRevert:      w.Agent.AutoRevert,
			DriftCorrection: w.Agent.DriftCorrection,
		},
		Files: w.Files,
	}
	switch m.Pull {
	case "":
		m.Pull = PullAlways
	case PullAlways, PullMissing:
	default:
		return Meta{}, invalid("%s: pull: want %q or %q, got %q", MetaFile, PullAlways, PullMissing, m.Pull)
	}
	if m.Agent.DiskNeedBytes < 0 {
		return Meta{}, invalid("%s: agent.disk_need_bytes: must not be negative", MetaFile)
	}
	if m.Agent.HealthyTimeoutS < 0 {
		return Meta{}, invalid("%s: agent.healthy_timeout_s: must not be negative", MetaFile)
	}
	if m.Agent.HealthyTimeoutS > protocol.MaxHealthyTimeoutS {
		return Meta{}, invalid("%s: agent.healthy_timeout_s: at most %d seconds, got %d", MetaFile, protocol.MaxHealthyTimeoutS, m.Agent.HealthyTimeoutS)
	}
	if m.ComposeFile == "" {
		m.ComposeFile = DefaultComposeFile
	}
	if _, ok := files[m.ComposeFile]; !ok {
		return Meta{}, invalid("%s: compose_file: %q is not a file of the bundle", MetaFile, m.ComposeFile)
	}
	return m, nil
}

// looseString is a JSON string's value, "" for absent or null, else compact JSON text.
func looseString(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		return buf.String()
	}
	return string(raw)
}

// jsonProblem renders strictjson errors: "field: want TYPE", "field: given twice", "not valid JSON: …".
func jsonProblem(err error, want map[string]string) string {
	var se *strictjson.Error
	switch {
	case !errors.As(err, &se):
		return "not valid JSON"
	case se.Duplicate:
		return fmt.Sprintf("%s: given twice", se.Path())
	case se.Got != "":
		w, ok := want[se.Field]
		if !ok {
			w = "another type"
		}
		if se.Field == "" {
			return fmt.Sprintf("want %s, got %s", w, se.Got)
		}
		return fmt.Sprintf("%s: want %s, got %s", se.Field, w, se.Got)
	}
	return "not valid JSON: " + se.Error()
}

// envName is what a POSIX shell and docker compose accept as a variable name.
// Compiled on first use (a bundle judgement), not at init: every process linked it.
var envName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

// entryWire is a manifest entry; Version stays raw so 3.0, "3" and 0 are told apart by name.
type entryWire struct {
	Var     *string         `json:"var"`
	Path    *string         `json:"path"`
	Version json.RawMessage `json:"version"`
	Key     *string         `json:"key"`
	Use     *string         `json:"use"`
}

var entryWant = map[string]string{
	"":     "an object",
	"var":  "a string",
	"path": "a string",
	"key":  "a string",
	"use":  "a string",
}

func parseManifest(files map[string]string) ([]Entry, error) {
	raw, ok := files[ManifestFile]
	if !ok {
		return nil, nil
	}
	var doc struct {
		Entries []json.RawMessage `json:"entries"`
	}
	if err := strictjson.Unmarshal([]byte(raw), &doc); err != nil {
		return nil, invalid("%s: %s", ManifestFile, jsonProblem(err, map[string]string{
			"": "an object", "entries": "a list of objects",
		}))
	}
	out := make([]Entry, 0, len(doc.Entries))
	seen := map[string]int{}
	registry := -1
	for i, rawEntry := range doc.Entries {
		at := fmt.Sprintf("%s: entries[%d]", ManifestFile, i)
		var w entryWire
		if err := strictjson.Unmarshal(rawEntry, &w); err != nil {
			return nil, invalid("%s%s", at, prefixed(jsonProblem(err, entryWant)))
		}
		e := Entry{Use: UseEnv, Key: DefaultKey}
		if w.Use != nil && *w.Use != "" {
			e.Use = *w.Use
		}
		switch e.Use {
		case UseEnv:
		case UseRegistryAuth:
			if registry >= 0 {
				return nil, invalid("%s.use: a second %q entry (entries[%d] is one already)", at, UseRegistryAuth, registry)
			}
			registry = i
		default:
			return nil, invalid("%s.use: want %q or %q, got %q", at, UseEnv, UseRegistryAuth, e.Use)
		}
		if w.Var != nil {
			e.Var = *w.Var
		}
		switch {
		case e.Var == "" && e.Use == UseRegistryAuth:
			// the pull credential is never an env var, so it needs no name
		case e.Var == "":
			return nil, invalid("%s.var: missing", at)
		case !envName().MatchString(e.Var):
			return nil, invalid("%s.var: %q is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)", at, e.Var)
		}
		if e.Var != "" {
			if j, dup := seen[e.Var]; dup {
				return nil, invalid("%s.var: %q already declared by entries[%d]", at, e.Var, j)
			}
			seen[e.Var] = i
		}
		if w.Path == nil {
			return nil, invalid("%s.path: missing", at)
		}
		// The path's content is judged by ResolvePath (MANIFEST_PATH), against the prefix.
		e.Path = *w.Path
		if w.Key != nil && *w.Key != "" {
			e.Key = *w.Key
		}
		v, err := parseVersion(w.Version)
		if err != nil {
			return nil, invalid("%s.version: %v", at, err)
		}
		e.Version = v
		out = append(out, e)
	}
	return out, nil
}

func prefixed(s string) string {
	if strings.HasPrefix(s, "want ") || strings.HasPrefix(s, "not valid") {
		return ": " + s
	}
	return "." + s
}

func parseVersion(raw json.RawMessage) (int, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return 0, nil
	}
	if t[0] != '-' && (t[0] < '0' || t[0] > '9') {
		return 0, fmt.Errorf("want an integer ≥ 1, got %s", describeJSON(t))
	}
	// ParseInt refuses 3.0 and 3e0 as well as what does not fit: a version is a plain integer.
	v, err := strconv.ParseInt(string(t), 10, 32)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("want an integer ≥ 1, got %s", t)
	}
	return int(v), nil
}

func describeJSON(raw json.RawMessage) string {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "nothing"
	case t[0] == '"':
		return "a string"
	case t[0] == '{':
		return "an object"
	case t[0] == '[':
		return "a list"
	case t[0] == 't' || t[0] == 'f':
		return "a boolean"
	default:
		return string(t)
	}
}
