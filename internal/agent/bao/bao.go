// Package bao is the agent's OpenBao client (JWT login, token lookup/renew/revoke, KV v2) over
// openbao/api/v2, with the environment kept out and TLS verification always on.
package bao

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openbao/openbao/api/v2"
	"golang.org/x/sync/errgroup"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/neterr"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// Sentinels for errors.Is. Errors name their subject (mount, path, version), never a secret.
var (
	// ErrForbidden is OpenBao's 403: the token may not do this (policy), or is revoked or expired.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound is a KV path, version or key that does not exist (or a deleted version).
	ErrNotFound = errors.New("not found")
	// ErrTemporary is a 5xx, a 429 quota, a timeout or a network failure: the next tick retries.
	ErrTemporary = errors.New("temporary failure")
	// ErrLoginRefused is a 400 on login: bad signature, expired grant, wrong audience or role.
	ErrLoginRefused = errors.New("login refused")
	// ErrTLS: the server certificate fails the configured CA; a config fault, retrying cannot fix it.
	ErrTLS = errors.New("TLS verification failed")
)

// DefaultTimeout bounds each OpenBao request when Options.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// DefaultReadLimit is how many KV reads ReadMany runs at once when its limit is not positive.
const DefaultReadLimit = 8

// Options configure a Client. Nothing is read from BAO_* or VAULT_* variables.
type Options struct {
	// Addr is OpenBao's base URL, e.g. https://bao.cbs.tikali.net:8200.
	Addr string
	// HTTPClient carries the requests; its Transport must be nil or an *http.Transport (cloned,
	// never modified). Nil means a fresh client.
	HTTPClient *http.Client
	// CAFile, when it exists, is the only trusted roots; otherwise the transport's roots apply.
	CAFile string
	// ServerName overrides the name the server certificate is checked against.
	ServerName string
	// Timeout bounds each request (DefaultTimeout when zero).
	Timeout time.Duration
}

// Client talks to one OpenBao; holding no token, it serves any token concurrently.
type Client struct {
	base *api.Client
}

// Token is a token OpenBao issued or renewed.
type Token struct {
	Value     secret.Value
	Accessor  string
	TTL       time.Duration
	Renewable bool
}

// TokenInfo is what lookup-self says about a token.
type TokenInfo struct {
	TTL       time.Duration
	Renewable bool
	Meta      map[string]string
}

// KVRequest: data.data[Key] of Path at Version (0 = latest); Name, unique per call, labels it.
type KVRequest struct {
	Name    string
	Path    string
	Version int
	Key     string
}

// New builds a Client. The api library reads BAO_*/VAULT_* variables an operator may have
// exported; every one is overridden or cleared here.
func New(opts Options) (*Client, error) {
	u, err := url.Parse(opts.Addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bao: address %q: want http(s)://host:port", opts.Addr)
	}
	hc, err := httpClient(opts)
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	cfg := &api.Config{
		Address:    opts.Addr,
		HttpClient: hc,
		Timeout:    timeout,
		// The timer is the retry loop; retries inside a tick only stretch a failing tick.
		MaxRetries:       0,
		DisableRedirects: true,
	}
	c, err := api.NewClient(cfg)
	if err != nil {
		// NewClient builds a DefaultConfig anyway, so a malformed BAO_*/VAULT_* variable fails here
		// though overridden; say so.
		return nil, fmt.Errorf("bao: client: the OpenBao library refused a BAO_*/VAULT_* environment variable "+
			"(the agent takes its OpenBao settings from config only; unset it): %w", err)
	}
	c.ClearToken()
	c.ClearNamespace()
	// DefaultWrappingLookupFunc honours BAO_WRAP_TTL, which would wrap every answer.
	c.SetWrappingLookupFunc(func(string, string) string { return "" })
	return &Client{base: c}, nil
}

func httpClient(opts Options) (*http.Client, error) {
	var hc http.Client
	var tr *http.Transport
	if opts.HTTPClient != nil {
		hc = *opts.HTTPClient
		switch t := opts.HTTPClient.Transport.(type) {
		case nil:
		case *http.Transport:
			tr = t.Clone()
		default:
			return nil, fmt.Errorf("bao: HTTP transport is %T; the OpenBao client needs an *http.Transport", t)
		}
	}
	if tr == nil {
		// Not http.DefaultTransport: it would honour HTTPS_PROXY from the environment.
		tr = &http.Transport{
			TLSHandshakeTimeout:   10 * time.Second,
			MaxIdleConnsPerHost:   DefaultReadLimit,
			IdleConnTimeout:       90 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	tc := &tls.Config{}
	if tr.TLSClientConfig != nil {
		tc = tr.TLSClientConfig.Clone()
	}
	// Verification is never switched off, whatever the caller's transport says.
	tc.InsecureSkipVerify = false
	if tc.MinVersion < tls.VersionTLS12 {
		tc.MinVersion = tls.VersionTLS12
	}
	if opts.ServerName != "" {
		tc.ServerName = opts.ServerName
	}
	if opts.CAFile != "" {
		pool, err := loadCA(opts.CAFile)
		if err != nil {
			return nil, err
		}
		if pool != nil {
			tc.RootCAs = pool
		}
	}
	tr.TLSClientConfig = tc
	hc.Transport = tr
	// The library would resend the token to any redirect target, and a standby's redirect cannot be
	// told from a hostile one: a redirect is an error naming its target.
	hc.CheckRedirect = noredirect.Refuse
	return &hc, nil
}

// maxCAFile bounds what is read of the CA file: a bundle of a few hundred certificates.
const maxCAFile = 4 << 20

// ReadCAFile reads the CA file: only a regular file (capread.File: a FIFO in its place cannot
// hang a tick) of at most 4 MiB.
func ReadCAFile(path string) ([]byte, error) {
	return capread.File(path, maxCAFile, nil)
}

// loadCA returns the CA file's pool, nil when it does not exist (optional: system roots apply).
func loadCA(path string) (*x509.CertPool, error) {
	b, err := ReadCAFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bao: CA file %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("bao: CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// as returns a shallow copy of the base client acting as token, so concurrent reads never race
// on SetToken of a shared client.
func (c *Client) as(token secret.Value) *api.Client {
	cl := c.base.WithRequestCallbacks()
	cl.SetToken(token.Reveal())
	return cl
}

// Login exchanges a deploy grant for a token: POST /v1/auth/{mount}/login {"role", "jwt"}.
func (c *Client) Login(ctx context.Context, mount, role string, jwt secret.Value) (Token, error) {
	subject := fmt.Sprintf("bao: login to auth/%s as role %q", mount, role)
	if err := checkMount(mount); err != nil {
		return Token{}, fmt.Errorf("%s: %w", subject, err)
	}
	if jwt.Empty() {
		return Token{}, fmt.Errorf("%s: no grant", subject)
	}
	s, err := c.as(secret.Value{}).Logical().WriteWithContext(ctx, "auth/"+mount+"/login",
		map[string]any{"role": role, "jwt": jwt.Reveal()})
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && re.StatusCode == http.StatusBadRequest {
			return Token{}, fmt.Errorf("%s: %w: %s", subject, ErrLoginRefused, serverMessage(re, jwt.Reveal()))
		}
		return Token{}, classify(ctx, subject, err, jwt.Reveal())
	}
	return authToken(subject, s, true)
}

// LookupSelf reports the token's TTL, renewability and metadata; the echoed token `id` is dropped.
func (c *Client) LookupSelf(ctx context.Context, token secret.Value) (TokenInfo, error) {
	const subject = "bao: lookup-self"
	s, err := c.as(token).Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		return TokenInfo{}, classify(ctx, subject, err, token.Reveal())
	}
	if s == nil || s.Data == nil {
		return TokenInfo{}, fmt.Errorf("%s: answer has no data", subject)
	}
	ttl, err := s.TokenTTL()
	if err != nil {
		return TokenInfo{}, fmt.Errorf("%s: field ttl: not a duration", subject)
	}
	ren, err := s.TokenIsRenewable()
	if err != nil {
		return TokenInfo{}, fmt.Errorf("%s: field renewable: not a boolean", subject)
	}
	meta, err := tokenMeta(s.Data["meta"])
	if err != nil {
		return TokenInfo{}, fmt.Errorf("%s: %w", subject, err)
	}
	return TokenInfo{TTL: ttl, Renewable: ren, Meta: meta}, nil
}

func tokenMeta(v any) (map[string]string, error) {
	if v == nil {
		return map[string]string{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("field meta: not an object")
	}
	out := make(map[string]string, len(m))
	for k, x := range m {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("field meta.%s: not a string", k)
		}
		out[k] = s
	}
	return out, nil
}

// RenewSelf extends the token by its role's default increment.
func (c *Client) RenewSelf(ctx context.Context, token secret.Value) (Token, error) {
	const subject = "bao: renew-self"
	s, err := c.as(token).Auth().Token().RenewSelfWithContext(ctx, 0)
	if err != nil {
		return Token{}, classify(ctx, subject, err, token.Reveal())
	}
	t, err := authToken(subject, s, false)
	if err != nil {
		return Token{}, err
	}
	if t.Value.Empty() {
		t.Value = token
	}
	return t, nil
}

// RevokeSelf revokes the token; one already gone answers 403 (ErrForbidden), ignorable.
func (c *Client) RevokeSelf(ctx context.Context, token secret.Value) error {
	if err := c.as(token).Auth().Token().RevokeSelfWithContext(ctx, ""); err != nil {
		return classify(ctx, "bao: revoke-self", err, token.Reveal())
	}
	return nil
}

// ReadKV reads data.data[key] of KV v2 secret path (full, prefix included) at version (0 = latest).
func (c *Client) ReadKV(ctx context.Context, token secret.Value, mount, path string, version int, key string) (secret.Value, error) {
	if key == "" {
		return secret.Value{}, fmt.Errorf("%s: empty key", subjectOf(path, version))
	}
	data, err := c.readData(ctx, token, mount, path, version)
	if err != nil {
		return secret.Value{}, err
	}
	return pick(data, path, version, key)
}

func subjectOf(path string, version int) string {
	if version == 0 {
		return fmt.Sprintf("bao: read %q (latest)", path)
	}
	return fmt.Sprintf("bao: read %q version %d", path, version)
}

func (c *Client) readData(ctx context.Context, token secret.Value, mount, path string, version int) (map[string]any, error) {
	subject := subjectOf(path, version)
	if err := checkMount(mount); err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if err := checkPath(path); err != nil {
		return nil, fmt.Errorf("%s: %w", subject, err)
	}
	if version < 0 {
		return nil, fmt.Errorf("%s: negative version", subject)
	}
	var q map[string][]string
	if version > 0 {
		q = map[string][]string{"version": {strconv.Itoa(version)}}
	}
	s, err := c.as(token).Logical().ReadWithDataWithContext(ctx, mount+"/data/"+path, q)
	if err != nil {
		return nil, classify(ctx, subject, err, token.Reveal())
	}
	if s == nil {
		return nil, fmt.Errorf("%s: %w", subject, ErrNotFound)
	}
	inner, ok := s.Data["data"]
	if !ok {
		return nil, fmt.Errorf("%s: answer has no data.data", subject)
	}
	if inner == nil {
		// KV v2 keeps the metadata of a deleted or destroyed version and nulls its data.
		return nil, fmt.Errorf("%s: %w (version deleted)", subject, ErrNotFound)
	}
	m, ok := inner.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: data.data is not an object", subject)
	}
	return m, nil
}

func pick(data map[string]any, path string, version int, key string) (secret.Value, error) {
	if key == "" {
		// The manifest's default key (`value`) is the bundle package's to apply.
		return secret.Value{}, fmt.Errorf("%s: empty key", subjectOf(path, version))
	}
	v, ok := data[key]
	if !ok {
		return secret.Value{}, fmt.Errorf("%s: key %q: %w", subjectOf(path, version), key, ErrNotFound)
	}
	s, ok := v.(string)
	if !ok {
		// Name the JSON kind only: a number or object here may still be a secret.
		return secret.Value{}, fmt.Errorf("%s: key %q: value is a %s, not a string", subjectOf(path, version), key, jsonKind(v))
	}
	return secret.New(s), nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	default:
		return "number"
	}
}

// ReadMany reads reqs concurrently, at most limit at a time (≤0: DefaultReadLimit), each (path,
// version) once. The first failure cancels the rest. The result is keyed by Name.
func (c *Client) ReadMany(ctx context.Context, token secret.Value, mount string, reqs []KVRequest, limit int) (map[string]secret.Value, error) {
	if limit <= 0 {
		limit = DefaultReadLimit
	}
	type pv struct {
		path    string
		version int
	}
	groups := map[pv][]KVRequest{}
	var order []pv
	seen := map[string]bool{}
	for _, r := range reqs {
		if r.Name == "" {
			return nil, fmt.Errorf("bao: read %q: request without a name", r.Path)
		}
		if r.Key == "" {
			return nil, fmt.Errorf("%s: empty key for %q", subjectOf(r.Path, r.Version), r.Name)
		}
		if seen[r.Name] {
			return nil, fmt.Errorf("bao: read: name %q requested twice", r.Name)
		}
		seen[r.Name] = true
		k := pv{r.Path, r.Version}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make(map[string]secret.Value, len(reqs))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	for _, k := range order {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			data, err := c.readData(gctx, token, mount, k.path, k.version)
			if err != nil {
				return err
			}
			for _, r := range groups[k] {
				v, err := pick(data, k.path, k.version, r.Key)
				if err != nil {
					return err
				}
				mu.Lock()
				out[r.Name] = v
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("bao: read: %w", err)
	}
	return out, nil
}

// authToken reads a login or renew `auth` block; renew-self may omit the token (needValue false).
func authToken(subject string, s *api.Secret, needValue bool) (Token, error) {
	if s == nil || s.Auth == nil {
		return Token{}, fmt.Errorf("%s: answer has no auth", subject)
	}
	if s.Auth.ClientToken == "" && needValue {
		return Token{}, fmt.Errorf("%s: answer has no auth.client_token", subject)
	}
	return Token{
		Value:     secret.New(s.Auth.ClientToken),
		Accessor:  s.Auth.Accessor,
		TTL:       time.Duration(s.Auth.LeaseDuration) * time.Second,
		Renewable: s.Auth.Renewable,
	}, nil
}

func checkMount(m string) error {
	if m == "" || strings.HasPrefix(m, "/") || strings.HasSuffix(m, "/") || hasDotSegment(m) {
		return fmt.Errorf("mount %q is not a clean relative path", m)
	}
	return nil
}

// checkPath: defence in depth behind MANIFEST_PATH; a path must never climb out of the mount.
func checkPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") || strings.Contains(p, "//") ||
		hasDotSegment(p) || strings.ContainsAny(p, "?#\\\x00") {
		return errors.New("path is not a clean relative path")
	}
	return nil
}

func hasDotSegment(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

var occurred = regexp.MustCompile(`^\d+ errors? occurred:\s*`)

// MaxServerMessage cuts OpenBao's words in an error, once the call's own secrets are masked; the
// tick's redactor masks any other secret they held, a part cut at the edge too (secret.Redactor).
const MaxServerMessage = 300

// serverMessage is OpenBao's error text on one line, the given secrets masked.
func serverMessage(re *api.ResponseError, secrets ...string) string {
	msg := strings.Join(strings.Fields(strings.Join(re.Errors, "; ")), " ")
	msg = occurred.ReplaceAllString(msg, "")
	msg = strings.TrimPrefix(msg, "* ")
	msg = strings.ReplaceAll(msg, "; * ", "; ")
	msg = secret.Mask(msg, secrets...)
	if len(msg) > MaxServerMessage {
		msg = msg[:MaxServerMessage] + "…"
	}
	if msg == "" {
		msg = http.StatusText(re.StatusCode)
	}
	return msg
}

// classify maps an api/transport error onto the sentinels, keeping only status and server messages.
func classify(ctx context.Context, subject string, err error, secrets ...string) error {
	var re *api.ResponseError
	if errors.As(err, &re) {
		msg := serverMessage(re, secrets...)
		switch {
		case re.StatusCode == http.StatusForbidden:
			return fmt.Errorf("%s: %w: %s", subject, ErrForbidden, msg)
		case re.StatusCode == http.StatusNotFound:
			return fmt.Errorf("%s: %w: %s", subject, ErrNotFound, msg)
		case re.StatusCode == http.StatusTooManyRequests || re.StatusCode >= 500:
			return fmt.Errorf("%s: %w: HTTP %d: %s", subject, ErrTemporary, re.StatusCode, msg)
		default:
			return fmt.Errorf("%s: HTTP %d: %s", subject, re.StatusCode, msg)
		}
	}
	if errors.Is(err, api.ErrSecretNotFound) {
		return fmt.Errorf("%s: %w", subject, ErrNotFound)
	}
	switch neterr.Classify(ctx, err) {
	case neterr.Redirect:
		// Only the target's scheme, host and path: the *url.Error around it quotes the whole URL.
		var redirect *noredirect.Error
		errors.As(err, &redirect)
		return fmt.Errorf("%s: %w", subject, redirect)
	case neterr.TLS:
		return fmt.Errorf("%s: %w: %s", subject, ErrTLS, secret.Mask(err.Error(), secrets...))
	case neterr.Canceled:
		return fmt.Errorf("%s: %w", subject, ctx.Err())
	case neterr.NoRoute:
		return fmt.Errorf("%s: %w", subject, secret.MaskError(err, secrets...))
	case neterr.Network:
		// The chain is kept (the transport's own sentinels decide what the agent does).
		return fmt.Errorf("%s: %w: %w", subject, ErrTemporary, secret.MaskError(err, secrets...))
	}
	// What is left is a 200 whose body did not parse: not temporary, a protocol fault.
	return fmt.Errorf("%s: unreadable answer: %s", subject, secret.Mask(err.Error(), secrets...))
}
