package bundle

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// MaxFindingsDetail caps one refusal's list: the first findings that fit and a count of the rest.
const MaxFindingsDetail = 4 << 10

// MaxLoadError bounds the loader's own words in a refusal: they may quote a whole value.
const MaxLoadError = 1 << 10

// Check is the pre-lease judgement of the compose file as staged in releaseDir under `project`:
// BUNDLE_INVALID for the never-allowed or unloadable, then PRIVILEGED_REFUSED for host reach
// unless agent.allow_privileged. Loaded as docker compose loads it, with the secret-free env.
func (b *Bundle) Check(releaseDir, project string, host Host) error {
	if !filepath.IsAbs(releaseDir) {
		// the caller's mistake, not the bundle's: not a refusal
		return fmt.Errorf("bundle: check: release directory %q is not an absolute path", releaseDir)
	}
	known, err := b.KnownEnv()
	if err != nil {
		return invalid("%s: %v", EnvTemplateFile, err)
	}
	j := Judgement{
		Compose:    []byte(b.Files[b.Meta.ComposeFile]),
		File:       b.Meta.ComposeFile,
		ReleaseDir: releaseDir,
		Project:    project,
		Env:        known,
		WithValues: true,
		Staged:     sortedNames(b.Files),
		Host:       host,
	}
	return j.Verdict(b.Meta.Agent.AllowPrivileged)
}

// JudgeRendered judges `docker compose config --format json` of the rendered release by Check's
// policy; details name keys, never values, prefixed `rendered:`. The loader's own words may quote
// a rendered value: red, holding every secret read, masks them before they are cut.
func JudgeRendered(config []byte, composeFile, releaseDir, project string, allowPrivileged bool, host Host, red *secret.Redactor) error {
	if red == nil {
		return errors.New("bundle: judge rendered: no redactor: the rendered file holds secrets")
	}
	j := Judgement{Compose: config, File: composeFile, ReleaseDir: releaseDir, Project: project, Stage: "rendered: ", rendered: true, Redact: red, Host: host}
	return j.Verdict(allowPrivileged)
}

// secretStandIn stands in for a secret-fed variable before the read; it parses in any setting and
// never decides a verdict (judged settings may hold no variable).
const secretStandIn = "0"

// KnownEnv is the release .env as known before any secret is read (secret-fed variables get a
// stand-in), read with compose's own dotenv reader.
func (b *Bundle) KnownEnv() (map[string]string, error) {
	const marker = "MONKYSECRETSTANDIN"
	stand := map[string]secret.Value{}
	for _, e := range b.EnvEntries() {
		stand[e.Var] = secret.New(marker)
	}
	text, err := RenderEnv(b.EnvTemplate, stand)
	if err != nil {
		// ENV_INCOMPLETE is judged later by its own check; the compose judgement knows no template value.
		return map[string]string{}, nil
	}
	env, err := dotenv.ParseWithLookup(strings.NewReader(text), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("compose cannot read it: %v", err)
	}
	for k, v := range env {
		if strings.Contains(v, marker) {
			env[k] = secretStandIn
		}
	}
	return env, nil
}

// Judgement is one judgement of a compose file.
type Judgement struct {
	Compose    []byte // the file's content (YAML, or `docker compose config --format json`)
	File       string // its path relative to ReleaseDir
	ReleaseDir string // absolute; compose's project directory
	Project    string // the compose project name the agent runs it as
	Env        map[string]string
	// WithValues puts offending values in the detail; false after a secret render (keys only).
	WithValues bool
	// Stage prefixes the detail ("rendered: ") so a refusal says which judgement made it.
	Stage string
	// Staged are the '/'-separated release paths the agent writes; a container must not rewrite them
	// since a revert runs them again. File, .env and bundle.json always count.
	Staged []string
	// rendered: Compose is compose's own JSON, defaults spelled out; caps scale by renderedScale.
	rendered bool
	// Redact masks the secrets a rendered file holds in the loader's words before they are cut
	// (nil: a file judged before any secret was read).
	Redact *secret.Redactor
	// Host is the box judged for: its intercept range, its time zone files.
	Host Host
}

// renderedScale is how much larger `docker compose config` may make a file by writing defaults.
const renderedScale = 4

// Verdict is the judgement as an error: nil, BUNDLE_INVALID or PRIVILEGED_REFUSED.
func (j Judgement) Verdict(allowPrivileged bool) error {
	findings, err := j.Findings()
	if err != nil {
		// Every part of a secret of MinFragment bytes or more is masked, wherever the loader
		// quoted it from, then the text is cut. Only its start is read for the parts: past twice
		// what is kept, a long message full of them cost seconds (a cut there leaves a part
		// RedactFragments still finds, or one shorter than MinFragment).
		msg := clip.Head(strings.ToValidUTF8(err.Error(), "?"), 2*MaxLoadError)
		msg = j.Redact.TruncateHead(j.Redact.RedactFragments(msg), MaxLoadError)
		return invalid("%s%s %s", j.Stage, j.File, msg)
	}
	var inv, priv []Finding
	for _, f := range findings {
		if f.Invalid {
			inv = append(inv, f)
		} else {
			priv = append(priv, f)
		}
	}
	switch {
	case len(inv) > 0:
		return invalid("%s%s", j.Stage, j.detail(inv, ""))
	case len(priv) > 0 && !allowPrivileged:
		return protocol.Refuse(protocol.CodePrivileged, "%s%s", j.Stage,
			j.detail(priv, " (bundle.json agent.allow_privileged is not set)"))
	}
	return nil
}

// detail lists `N finding(s)`, as many findings as fit MaxFindingsDetail, then the rest's count.
func (j Judgement) detail(fs []Finding, suffix string) string {
	head := fmt.Sprintf("%s: %d finding(s)%s: ", j.File, len(fs), suffix)
	var b strings.Builder
	b.WriteString(head)
	for i, f := range fs {
		s := f.String(j.WithValues)
		if i > 0 {
			s = "; " + s
		}
		rest := len(fs) - i
		tail := fmt.Sprintf("; … %d more", rest)
		if b.Len()+len(s)+len(tail) > MaxFindingsDetail-len(j.Stage)-len("PRIVILEGED_REFUSED: ") {
			b.WriteString(tail)
			break
		}
		b.WriteString(s)
	}
	return b.String()
}

// Findings loads and judges the file; err is a file compose would not load (or past caps).
func (j Judgement) Findings() ([]Finding, error) {
	scale := 1
	if j.rendered {
		scale = renderedScale
	}
	docs, err := parseRaw(j.Compose, scale)
	if err != nil {
		return nil, err
	}
	raw, err := walkRaw(docs)
	if err != nil {
		return nil, err
	}
	for _, f := range raw {
		if f.Key == "include" || f.Key == "extends.file" {
			// loading would read another file from disk: judge no further
			return raw, nil
		}
	}
	p, err := j.load()
	if err != nil {
		return nil, err
	}
	return append(raw, judgeProject(p, j.Host, j.ReleaseDir, j.Project, j.staged())...), nil
}

// staged is every release-relative path the agent writes into the release.
func (j Judgement) staged() []string {
	return append([]string{j.File, EnvFile, MetaFile}, j.Staged...)
}

// load runs compose-go's loader (merges, extends, Env-only interpolation, paths from ReleaseDir,
// all profiles); nothing is read from disk, include and extends.file were refused before.
func (j Judgement) load() (*types.Project, error) {
	if j.Project == "" {
		return nil, fmt.Errorf("cannot be judged without a compose project name")
	}
	env := types.Mapping{}
	for k, v := range j.Env {
		env[k] = v
	}
	details := types.ConfigDetails{
		WorkingDir:  j.ReleaseDir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(j.ReleaseDir, j.File), Content: j.Compose}},
		Environment: env,
	}
	dict, err := loader.LoadModelWithContext(context.Background(), details, func(o *loader.Options) {
		o.SetProjectName(j.Project, true)
		o.SkipInclude = true
		o.SkipResolveEnvironment = true
	})
	if err != nil {
		return nil, fmt.Errorf("does not load as compose loads it: %v", err)
	}
	var p types.Project
	if err := loader.Transform(dict, &p); err != nil {
		return nil, fmt.Errorf("does not load as compose loads it: %v", err)
	}
	p.Name = j.Project
	return &p, nil
}
