package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Defaults for a by-hand run outside CI.
const (
	defaultGitLabAPI  = "https://scm.tikali.ai/api/v4"
	defaultGitLabProj = "tikali/applications/monky/monky-deployd"
	defaultGiteaURL   = "https://gitea.cbs.tikali.net"
	defaultGiteaRepo  = "tikali/monky-deployd"
	packageName       = "monky-deployd"
	// fleetPackage is the operator's package, published beside the agent's under packageName.
	fleetPackage = "monky-fleetctl"
)

// asset is one file of a release, checked against SHA256SUMS before anything is sent.
type asset struct {
	name, path string
	size       int64
	sha256     string
}

// options is everything one run needs; env is read once, in main.
type options struct {
	target  string
	version string
	dist    string
	dryRun  bool
	tag     string

	gitlabAPI, gitlabProject string
	gitlabToken              secret.Value
	gitlabTokenHeader        string // JOB-TOKEN in CI, PRIVATE-TOKEN with a personal/project token

	giteaURL, giteaRepo string
	giteaToken          secret.Value
}

// ErrUsage marks bad flags or environment (exit 2).
var ErrUsage = errors.New("usage")

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

func parseOptions(args []string, getenv func(string) string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("packaging-upload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.target, "target", "", "gitlab (the generic package registry + a release) or gitea (the mirror's release)")
	fs.StringVar(&o.version, "version", "", "release version (default: the VERSION file)")
	fs.StringVar(&o.dist, "dist", "dist", "directory holding the .deb, install.sh and SHA256SUMS (make deb)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "check the files and print every request, send nothing")
	versionFile := fs.String("version-file", "VERSION", "file holding the release version")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() != 0 {
		return o, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if o.target != "gitlab" && o.target != "gitea" {
		return o, fmt.Errorf("%w: --target must be gitlab or gitea, not %q", ErrUsage, o.target)
	}
	if o.version == "" {
		b, err := os.ReadFile(*versionFile)
		if err != nil {
			return o, fmt.Errorf("%w: version: %v", ErrUsage, err)
		}
		o.version = strings.TrimSpace(string(b))
	}
	if !versionRE.MatchString(o.version) {
		return o, fmt.Errorf("%w: version %q is not MAJOR.MINOR.PATCH[-PRERELEASE]", ErrUsage, o.version)
	}
	// A tag pipeline publishes exactly the version it was tagged for: a VERSION file that was not
	// bumped would otherwise overwrite the previous release's files.
	o.tag = "v" + o.version
	if t := getenv("CI_COMMIT_TAG"); t != "" && t != o.tag {
		return o, fmt.Errorf("%w: tag %q does not match VERSION %s (want %s)", ErrUsage, t, o.version, o.tag)
	}
	o.gitlabAPI = strings.TrimRight(or(getenv("CI_API_V4_URL"), defaultGitLabAPI), "/")
	o.gitlabProject = or(getenv("CI_PROJECT_ID"), defaultGitLabProj)
	if t := getenv("CI_JOB_TOKEN"); t != "" {
		o.gitlabToken, o.gitlabTokenHeader = secret.New(t), "JOB-TOKEN"
	} else if t := getenv("GITLAB_TOKEN"); t != "" {
		o.gitlabToken, o.gitlabTokenHeader = secret.New(t), "PRIVATE-TOKEN"
	}
	o.giteaURL = strings.TrimRight(or(getenv("GITEA_URL"), defaultGiteaURL), "/")
	o.giteaRepo = or(getenv("GITEA_REPO"), defaultGiteaRepo)
	o.giteaToken = secret.New(getenv("GITEA_TOKEN"))
	if !o.dryRun {
		if o.target == "gitlab" && o.gitlabToken.Empty() {
			return o, fmt.Errorf("%w: gitlab: set CI_JOB_TOKEN (CI) or GITLAB_TOKEN (api scope) to upload", ErrUsage)
		}
		if o.target == "gitea" && o.giteaToken.Empty() {
			return o, fmt.Errorf("%w: gitea: set GITEA_TOKEN (write:repository) to upload", ErrUsage)
		}
	}
	return o, nil
}

func or(v, def string) string {
	if v != "" {
		return v
	}
	return def
}

// assets returns the release files in upload order, each verified against SHA256SUMS.
func assets(o options) ([]asset, error) {
	sumsPath := filepath.Join(o.dist, "SHA256SUMS")
	raw, err := os.ReadFile(sumsPath)
	if err != nil {
		return nil, fmt.Errorf("assets: %w (run make deb first)", err)
	}
	sums, err := parseSums(raw)
	if err != nil {
		return nil, fmt.Errorf("assets: %s: %w", sumsPath, err)
	}
	// The .deb files carry Debian's form of a pre-release (0.3.0-rc1 → 0.3.0~rc1), as nfpm names them.
	debVersion := strings.Replace(o.version, "-", "~", 1)
	names := []string{fmt.Sprintf("%s_%s_amd64.deb", packageName, debVersion), fmt.Sprintf("%s_%s_amd64.deb", fleetPackage, debVersion), "install.sh"}
	var out []asset
	for _, n := range names {
		a, err := hashFile(o.dist, n)
		if err != nil {
			return nil, err
		}
		want, ok := sums[n]
		if !ok {
			return nil, fmt.Errorf("assets: %s is not listed in SHA256SUMS", n)
		}
		if want != a.sha256 {
			return nil, fmt.Errorf("assets: %s does not match SHA256SUMS (rebuild with make deb)", n)
		}
		out = append(out, a)
	}
	sumsAsset, err := hashFile(o.dist, "SHA256SUMS")
	if err != nil {
		return nil, err
	}
	if len(sums) != len(names) {
		return nil, fmt.Errorf("assets: SHA256SUMS lists %d files, want exactly %s", len(sums), strings.Join(names, ", "))
	}
	return append(out, sumsAsset), nil
}

var sumLine = regexp.MustCompile(`^([0-9a-f]{64}) [ *]([A-Za-z0-9][A-Za-z0-9._+~-]*)$`)

// parseSums reads a sha256sum(1) listing. Names are plain file names: a path or anything else
// would let the listing point outside the release.
func parseSums(raw []byte) (map[string]string, error) {
	sums := map[string]string{}
	for i, line := range strings.Split(strings.TrimRight(string(raw), "\n"), "\n") {
		m := sumLine.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: not `<sha256>  <file name>`", i+1)
		}
		if _, dup := sums[m[2]]; dup {
			return nil, fmt.Errorf("line %d: %s listed twice", i+1, m[2])
		}
		sums[m[2]] = m[1]
	}
	return sums, nil
}

func hashFile(dir, name string) (asset, error) {
	p := filepath.Join(dir, name)
	f, err := os.Open(p)
	if err != nil {
		return asset{}, fmt.Errorf("assets: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return asset{}, fmt.Errorf("assets: read %s: %w", p, err)
	}
	return asset{name: name, path: p, size: n, sha256: hex.EncodeToString(h.Sum(nil))}, nil
}

// client sends the requests of one run, or only prints them on a dry run. Every error and every
// printed line goes through the redactor, so a server that echoes a token cannot leak it.
type client struct {
	http   *http.Client
	dryRun bool
	out    io.Writer
	red    *secret.Redactor
	header string
	token  secret.Value
}

type request struct {
	method, url string
	body        func() (io.Reader, string, error) // body and its content type; nil = none
	note        string                            // what a dry run prints about the body
	want        []int                             // accepted status codes
}

// do sends r and returns the status and body. On a dry run it prints r and returns 0.
func (c *client) do(ctx context.Context, r request) (int, []byte, error) {
	fmt.Fprintf(c.out, "%s %s%s\n", r.method, c.red.Redact(r.url), r.note)
	if c.dryRun {
		return 0, nil, nil
	}
	var body io.Reader
	ctype := ""
	if r.body != nil {
		var err error
		if body, ctype, err = r.body(); err != nil {
			return 0, nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url, body)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", r.method, c.red.Redact(r.url), err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if !c.token.Empty() {
		v := c.token.Reveal()
		if c.header == "Authorization" {
			v = "token " + v
		}
		req.Header.Set(c.header, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, errors.New(c.red.Redact(fmt.Sprintf("%s %s: %v", r.method, r.url, err)))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: read response: %w", r.method, c.red.Redact(r.url), err)
	}
	for _, w := range r.want {
		if resp.StatusCode == w {
			return resp.StatusCode, data, nil
		}
	}
	return resp.StatusCode, data, fmt.Errorf("%s %s: HTTP %d: %s", r.method, c.red.Redact(r.url), resp.StatusCode,
		c.red.Truncate(strings.TrimSpace(string(data)), 300))
}

func fileBody(a asset) func() (io.Reader, string, error) {
	return func() (io.Reader, string, error) {
		f, err := os.ReadFile(a.path)
		if err != nil {
			return nil, "", fmt.Errorf("read %s: %w", a.path, err)
		}
		return bytes.NewReader(f), "application/octet-stream", nil
	}
}

func jsonBody(v any) func() (io.Reader, string, error) {
	return func() (io.Reader, string, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, "", err
		}
		return bytes.NewReader(b), "application/json", nil
	}
}

func describe(a asset) string {
	return fmt.Sprintf("  (%s, %d bytes, sha256 %s)", a.name, a.size, a.sha256)
}

// publishGitLab uploads the assets to the generic package registry — the primary download that
// install.sh and the ansible role use — and creates the release that links them.
func publishGitLab(ctx context.Context, c *client, o options, files []asset) error {
	proj := url.PathEscape(o.gitlabProject)
	base := fmt.Sprintf("%s/projects/%s/packages/generic/%s/%s", o.gitlabAPI, proj, packageName, url.PathEscape(o.version))
	type link struct {
		Name     string `json:"name"`
		URL      string `json:"url"`
		LinkType string `json:"link_type"`
	}
	var links []link
	for _, a := range files {
		u := base + "/" + url.PathEscape(a.name)
		if _, _, err := c.do(ctx, request{method: http.MethodPut, url: u, body: fileBody(a), note: describe(a), want: []int{200, 201}}); err != nil {
			return fmt.Errorf("gitlab: upload %s: %w", a.name, err)
		}
		links = append(links, link{Name: a.name, URL: u, LinkType: "package"})
	}
	rel := map[string]any{
		"name":        fmt.Sprintf("%s %s", packageName, o.version),
		"tag_name":    o.tag,
		"description": fmt.Sprintf("monky-deployd %s. Boxes: install.sh (see its header) installs monky-deployd; the operator's host: monky-fleetctl (fleetctl, its exporter, the alert rules). Both .debs are in the generic package registry.", o.version),
		"assets":      map[string]any{"links": links},
	}
	code, _, err := c.do(ctx, request{method: http.MethodPost, url: fmt.Sprintf("%s/projects/%s/releases", o.gitlabAPI, proj),
		body: jsonBody(rel), note: "  (release " + o.tag + ")", want: []int{201, 409}})
	if err != nil {
		return fmt.Errorf("gitlab: release %s: %w", o.tag, err)
	}
	if code == http.StatusConflict {
		fmt.Fprintf(c.out, "gitlab: release %s already exists; its package files were uploaded again\n", o.tag)
	}
	return nil
}

// publishGitea creates (or reuses) the mirror's release for the tag and replaces its assets, so
// `install.sh --source gitea` finds them at /releases/download/<tag>/<file>.
func publishGitea(ctx context.Context, c *client, o options, files []asset) error {
	api := fmt.Sprintf("%s/api/v1/repos/%s/releases", o.giteaURL, o.giteaRepo)
	var rel struct {
		ID int64 `json:"id"`
	}
	code, body, err := c.do(ctx, request{method: http.MethodGet, url: api + "/tags/" + url.PathEscape(o.tag), want: []int{200, 404}})
	if err != nil {
		return fmt.Errorf("gitea: %w", err)
	}
	id := "{release-id}"
	if c.dryRun {
		fmt.Fprintf(c.out, "POST %s  (create release %s when the GET above answers 404)\n", api, o.tag)
	} else if code == http.StatusOK {
		if err := json.Unmarshal(body, &rel); err != nil || rel.ID <= 0 {
			return fmt.Errorf("gitea: release %s: response has no release id", o.tag)
		}
	} else {
		_, body, err := c.do(ctx, request{method: http.MethodPost, url: api, note: "  (create release " + o.tag + ")", want: []int{201},
			body: jsonBody(map[string]any{"tag_name": o.tag, "name": fmt.Sprintf("%s %s", packageName, o.version),
				"body": fmt.Sprintf("monky-deployd %s (mirror of the GitLab release).", o.version)})})
		if err != nil {
			return fmt.Errorf("gitea: create release %s: %w", o.tag, err)
		}
		if err := json.Unmarshal(body, &rel); err != nil || rel.ID <= 0 {
			return fmt.Errorf("gitea: create release %s: response has no release id", o.tag)
		}
	}
	if !c.dryRun {
		id = fmt.Sprint(rel.ID)
	}
	assetsURL := fmt.Sprintf("%s/%s/assets", api, id)
	var existing []struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	_, body, err = c.do(ctx, request{method: http.MethodGet, url: assetsURL, want: []int{200}})
	if err != nil {
		return fmt.Errorf("gitea: list assets: %w", err)
	}
	if !c.dryRun {
		if err := json.Unmarshal(body, &existing); err != nil {
			return fmt.Errorf("gitea: list assets of %s: %w", o.tag, err)
		}
	}
	for _, a := range files {
		// Gitea keeps two assets of one name side by side; the download URL would then serve either.
		for _, e := range existing {
			if e.Name == a.name {
				if _, _, err := c.do(ctx, request{method: http.MethodDelete, url: fmt.Sprintf("%s/%d", assetsURL, e.ID),
					note: "  (replace " + a.name + ")", want: []int{204}}); err != nil {
					return fmt.Errorf("gitea: delete old %s: %w", a.name, err)
				}
			}
		}
		multi := func() (io.Reader, string, error) {
			data, err := os.ReadFile(a.path)
			if err != nil {
				return nil, "", fmt.Errorf("read %s: %w", a.path, err)
			}
			var buf bytes.Buffer
			w := multipart.NewWriter(&buf)
			part, err := w.CreateFormFile("attachment", a.name)
			if err != nil {
				return nil, "", err
			}
			if _, err := part.Write(data); err != nil {
				return nil, "", err
			}
			if err := w.Close(); err != nil {
				return nil, "", err
			}
			return &buf, w.FormDataContentType(), nil
		}
		if _, _, err := c.do(ctx, request{method: http.MethodPost, url: assetsURL + "?name=" + url.QueryEscape(a.name),
			body: multi, note: describe(a), want: []int{201}}); err != nil {
			return fmt.Errorf("gitea: upload %s: %w", a.name, err)
		}
	}
	return nil
}

// run is the whole command: parse, verify the files, publish. Exit codes: 0 done, 1 a request or
// file failed, 2 usage.
func run(ctx context.Context, args []string, getenv func(string) string, hc *http.Client, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, getenv, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "packaging-upload: %v\n", err)
		return 2
	}
	files, err := assets(o)
	if err != nil {
		fmt.Fprintf(stderr, "packaging-upload: %v\n", err)
		return 1
	}
	red := &secret.Redactor{}
	red.Add(o.gitlabToken.Reveal(), o.giteaToken.Reveal())
	c := &client{http: hc, dryRun: o.dryRun, out: stdout, red: red}
	if o.dryRun {
		fmt.Fprintf(stdout, "dry run: %s %s (%s), nothing is sent\n", o.target, o.version, o.tag)
	}
	switch o.target {
	case "gitlab":
		c.header, c.token = o.gitlabTokenHeader, o.gitlabToken
		if o.dryRun {
			fmt.Fprintf(stdout, "auth: %s\n", authNote(o.gitlabTokenHeader, o.gitlabToken))
		}
		err = publishGitLab(ctx, c, o, files)
	case "gitea":
		c.header, c.token = "Authorization", o.giteaToken
		if o.dryRun {
			fmt.Fprintf(stdout, "auth: %s\n", authNote("Authorization", o.giteaToken))
		}
		err = publishGitea(ctx, c, o, files)
	}
	if err != nil {
		fmt.Fprintf(stderr, "packaging-upload: %s\n", red.Redact(err.Error()))
		return 1
	}
	if !o.dryRun {
		fmt.Fprintf(stdout, "published %s %s to %s\n", packageName, o.version, o.target)
	}
	return 0
}

func authNote(header string, tok secret.Value) string {
	if tok.Empty() || header == "" {
		return "no token set (a real run needs one)"
	}
	return header + " header, token set (not shown)"
}
