// Package tenancy is the agent's client of monky-tenancy (check-in, bundle, lease, report),
// bearing the agent's OpenBao token.
package tenancy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/window"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/neterr"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/noredirect"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/strictjson"
)

// Sentinels matched with errors.Is; each is one line of PROTOCOL's Authentication rules.
var (
	// ErrUnauthenticated is tenancy's own 401 AGENT_UNAUTHENTICATED: put the token aside, bootstrap
	// again. A 401 without that code (ingress, auth proxy) is ErrTemporary.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrEnvMismatch is 403 AGENT_ENV_MISMATCH: the token belongs to another env. Never retried.
	ErrEnvMismatch = errors.New("env mismatch")
	// ErrRateLimited is any 429 (LEASE_RATE_LIMITED: 5 leases per hour per backend).
	ErrRateLimited = errors.New("rate limited")
	// ErrTemporary: 5xx, timeout, refused/reset connection, DNS failure, or ErrNotTenancy.
	ErrTemporary = errors.New("temporary failure")
	// ErrNotTenancy is a 401/403 without tenancy's code (an ingress or proxy answered); it also
	// matches ErrTemporary and the token is kept.
	ErrNotTenancy = errors.New("refused by something that is not tenancy")
	// ErrProtocol is an unusable 2xx answer; not temporary, tenancy will answer the same next tick.
	ErrProtocol = errors.New("protocol error")
)

// Read limits: a bundle is ≤ 8 MiB of content (PROTOCOL); its JSON gets twice that.
const (
	DefaultMaxBundleBytes int64 = 16 << 20
	maxJSONBytes          int64 = 1 << 20
	maxErrorBytes         int64 = 64 << 10
)

// Cuts of a server's words in an error: its message, and the first line of a body without one.
// Only the bearer token is masked before the cut; the tick's redactor masks any other secret
// the words held, a part cut at the edge too (secret.Redactor).
const (
	MaxMessage   = 300
	MaxFirstLine = 120
)

// APIError is a call without a usable answer: an HTTP error status with the body's Code and
// Message, or a transport failure (Status 0). Never contains the bearer token.
type APIError struct {
	Op         string // checkin, bundle, lease, report
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	Err        error
	// FirstLine names whatever answered instead of tenancy: the body's first line, cut and masked.
	FirstLine string

	temporary bool
}

func (e *APIError) Error() string {
	if e.Status == 0 {
		kind := "request failed"
		if e.temporary {
			kind = "temporary network failure"
		}
		return fmt.Sprintf("tenancy: %s: %s: %v", e.Op, kind, e.Err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tenancy: %s: HTTP %d", e.Op, e.Status)
	if e.Code != "" {
		b.WriteString(" " + e.Code)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.notTenancy() {
		b.WriteString(" from something that is not tenancy (no " + e.expectedCode() + " code)")
		if e.FirstLine != "" {
			b.WriteString("; the body begins: " + strconv.Quote(e.FirstLine))
		}
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

func (e *APIError) Unwrap() error { return e.Err }

// Is matches the package sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrUnauthenticated:
		// Only tenancy's code means "superseded": an nginx 401 page must not cost the box its token.
		return e.Status == http.StatusUnauthorized && e.Code == protocol.CodeUnauthenticated
	case ErrEnvMismatch:
		// Only the code means "env mismatch": a bare 403 from a proxy must not cause exit 78.
		return e.Status == http.StatusForbidden && e.Code == protocol.CodeEnvMismatch
	case ErrRateLimited:
		return e.Status == http.StatusTooManyRequests
	case ErrNotTenancy:
		return e.notTenancy()
	case ErrTemporary:
		return e.Status >= 500 || (e.Status == 0 && e.temporary) || e.notTenancy()
	}
	return false
}

// notTenancy: a 401 or 403 without the code tenancy sends with it.
func (e *APIError) notTenancy() bool {
	return (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden) && e.Code != e.expectedCode()
}

func (e *APIError) expectedCode() string {
	if e.Status == http.StatusForbidden {
		return protocol.CodeEnvMismatch
	}
	return protocol.CodeUnauthenticated
}

// ProtocolError is a 2xx answer breaking the protocol; Field names the JSON field ("" for the
// body). Possibly secret values are never quoted.
type ProtocolError struct {
	Op      string
	Field   string
	Problem string
}

func (e *ProtocolError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("tenancy: %s: bad answer: %s", e.Op, e.Problem)
	}
	return fmt.Sprintf("tenancy: %s: bad answer: field %q: %s", e.Op, e.Field, e.Problem)
}

func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

// Client calls one tenancy, concurrency-safe; set fields before the first call.
type Client struct {
	// UserAgent, when set, is sent on every request.
	UserAgent string
	// MaxBundleBytes caps a bundle body (DefaultMaxBundleBytes when zero).
	MaxBundleBytes int64
	// Clock turns an HTTP-date Retry-After into a duration (wall clock when nil).
	Clock func() time.Time

	base    *url.URL
	baseErr error
	hc      *http.Client
}

// New returns a client of the tenancy at baseURL; hc nil means a default client. A bad baseURL
// is reported by every call.
func New(baseURL string, hc *http.Client) *Client {
	if hc == nil {
		// Not http.DefaultClient: its transport honours HTTP_PROXY from the environment.
		hc = &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	}
	// Every call carries the agent's token; tenancy redirects none of them.
	c := &Client{hc: noredirect.Client(hc)}
	u, err := url.Parse(baseURL)
	switch {
	case err != nil:
		c.baseErr = fmt.Errorf("tenancy: base URL %q: %w", baseURL, err)
	case (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		c.baseErr = fmt.Errorf("tenancy: base URL %q: want http(s)://host[:port]", baseURL)
	default:
		u.RawQuery, u.Fragment = "", ""
		c.base = u
	}
	return c
}

// Checkin posts the agent's state and returns the checked answer (action, a 64-hex desired_sha
// that becomes a directory name, bundle_url, env_id).
func (c *Client) Checkin(ctx context.Context, token secret.Value, req protocol.CheckinRequest) (*protocol.CheckinResponse, error) {
	body, _, err := c.do(ctx, "checkin", http.MethodPost, "/v1/agent/checkin", token, req, maxJSONBytes)
	if err != nil {
		return nil, err
	}
	return decodeCheckin(body, req.EnvID)
}

// Bundle fetches bundleURL's path and query only (the bearer never goes to another host) and
// returns files and the lowercased X-Bundle-Sha; too large or undecodable is BUNDLE_INVALID.
func (c *Client) Bundle(ctx context.Context, token secret.Value, bundleURL string) (files map[string]string, headerSha string, err error) {
	limit := c.MaxBundleBytes
	if limit <= 0 {
		limit = DefaultMaxBundleBytes
	}
	ref, err := url.Parse(bundleURL)
	if err != nil || ref.Path == "" {
		return nil, "", &ProtocolError{Op: "bundle", Field: "bundle_url", Problem: "not a URL path"}
	}
	body, hdr, err := c.do(ctx, "bundle", http.MethodGet, ref.EscapedPath()+queryOf(ref), token, nil, limit)
	if err != nil {
		return nil, "", err
	}
	files, err = decodeBundle(body)
	if err != nil {
		return nil, "", err
	}
	sha := hdr.Get("X-Bundle-Sha")
	if sha == "" {
		sha = hdr.Get("X-Bundle-Sha256")
	}
	return files, strings.ToLower(strings.TrimSpace(sha)), nil
}

func queryOf(u *url.URL) string {
	if u.RawQuery == "" {
		return ""
	}
	return "?" + u.RawQuery
}

// Lease asks for a login grant; an AppRole-era body or one without login_jwt is a LEASE_SHAPE
// refusal. Addr falls back to legacy vault.addr; empty Mount and Role mean the configured ones.
func (c *Client) Lease(ctx context.Context, token secret.Value, envID, reason string) (*protocol.LeaseResponse, error) {
	body, _, err := c.do(ctx, "lease", http.MethodPost, "/v1/agent/lease", token,
		protocol.LeaseRequest{EnvID: envID, Reason: reason}, maxJSONBytes)
	if err != nil {
		return nil, err
	}
	return decodeLease(body, envID)
}

// Report posts a tick's outcome; Detail and LogTail must already be redacted and cut.
func (c *Client) Report(ctx context.Context, token secret.Value, r protocol.Report) error {
	_, _, err := c.do(ctx, "report", http.MethodPost, "/v1/agent/report", token, r, maxJSONBytes)
	return err
}

// do sends one request and returns the 2xx body (at most limit bytes).
func (c *Client) do(ctx context.Context, op, method, path string, token secret.Value, in any, limit int64) ([]byte, http.Header, error) {
	if c.baseErr != nil {
		return nil, nil, c.baseErr
	}
	if token.Empty() {
		return nil, nil, fmt.Errorf("tenancy: %s: no bearer token", op)
	}
	ref, err := url.Parse(path)
	if err != nil {
		return nil, nil, fmt.Errorf("tenancy: %s: path: %w", op, err)
	}
	u := c.base.JoinPath(ref.EscapedPath())
	u.RawQuery = ref.RawQuery

	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, nil, fmt.Errorf("tenancy: %s: encode request: %w", op, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, nil, fmt.Errorf("tenancy: %s: %w", op, err)
	}
	req.Header.Set("Authorization", "Bearer "+token.Reveal())
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}

	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, c.transportError(ctx, op, err, token)
	}
	defer resp.Body.Close()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
		return nil, nil, c.statusError(op, resp, b, token)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, nil, c.transportError(ctx, op, err, token)
	}
	if int64(len(b)) > limit {
		if op == "bundle" {
			return nil, nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body exceeds %d MiB", limit>>20)
		}
		return nil, nil, &ProtocolError{Op: op, Problem: fmt.Sprintf("body exceeds %d bytes", limit)}
	}
	return b, resp.Header, nil
}

func (c *Client) transportError(ctx context.Context, op string, err error, token secret.Value) error {
	class := neterr.Classify(ctx, err)
	if class == neterr.Redirect {
		// Not temporary: a redirecting ingress answers the same next minute; exit 1 shows in --failed.
		var redirect *noredirect.Error
		errors.As(err, &redirect)
		return &APIError{Op: op, Err: redirect}
	}
	temp := class == neterr.Network || class == neterr.Other
	// No transport error is known to quote a header, but the guarantee is cheap.
	return &APIError{Op: op, Err: secret.MaskError(err, token.Reveal()), temporary: temp}
}

func (c *Client) statusError(op string, resp *http.Response, body []byte, token secret.Value) error {
	eb := protocol.ParseErrorBody(body)
	code, msg := eb.Code, eb.Message
	msg = strings.Join(strings.Fields(msg), " ")
	msg, code = secret.Mask(msg, token.Reveal()), secret.Mask(code, token.Reveal())
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage] + "…"
	}
	if len(code) > 64 {
		code = code[:64]
	}
	e := &APIError{Op: op, Status: resp.StatusCode, Code: code, Message: msg}
	if code == "" {
		e.FirstLine = firstLine(body, token)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = c.retryAfter(resp.Header.Get("Retry-After"))
	}
	return e
}

// markupOnly is a line of HTML tags and nothing else (`<html>`, `<!DOCTYPE html>`).
// Compiled on first use (an error body), not at init: every process linked it.
var markupOnly = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(\s*<[^<>]*>)+\s*$`) })

// firstLine is body's first non-blank, non-markup-only line, spaces collapsed, token masked, cut
// at 120 bytes on a UTF-8 boundary, unprintables stripped.
func firstLine(body []byte, token secret.Value) string {
	// Unprintables go first: dropped after masking, they could rejoin a token's halves.
	text := strings.Map(func(r rune) rune {
		switch {
		case r == '\n' || r == '\t':
			return r
		case r == utf8.RuneError || !unicode.IsPrint(r):
			return -1
		}
		return r
	}, string(body))
	var line, first string
	for _, l := range strings.Split(text, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l == "" {
			continue
		}
		if first == "" {
			first = l
		}
		if !markupOnly().MatchString(l) {
			line = l
			break
		}
	}
	if line == "" {
		line = first
	}
	if t := token.Reveal(); t != "" {
		// A token that is not valid UTF-8 may match half a rune; what is left of it goes.
		line = strings.ToValidUTF8(secret.Mask(line, t), "")
	}
	if len(line) > MaxFirstLine {
		cut := MaxFirstLine
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + "…"
	}
	return line
}

func (c *Client) retryAfter(h string) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n < 0 || n > 7*24*3600 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		now := time.Now
		if c.Clock != nil {
			now = c.Clock
		}
		if d := t.Sub(now()); d > 0 {
			return d.Round(time.Second)
		}
	}
	return 0
}

// --- decoding --------------------------------------------------------------------------------

// isHexSha: `^[0-9a-f]{64}$`, checked by hand (a regexp compiled at init cost every process).
func isHexSha(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// decodeJSON decodes body strictly (exact keys, no duplicates) into v, errors as a
// *ProtocolError naming the field.
func decodeJSON(op string, body []byte, v any) error {
	err := strictjson.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var se *strictjson.Error
	switch {
	case len(bytes.TrimSpace(body)) == 0:
		return &ProtocolError{Op: op, Problem: "empty body"}
	case !errors.As(err, &se):
		return &ProtocolError{Op: op, Problem: "body is not JSON"}
	case se.Duplicate:
		return &ProtocolError{Op: op, Field: se.Field, Problem: "given twice"}
	case se.Got != "" && se.Field == "":
		return &ProtocolError{Op: op, Problem: fmt.Sprintf("body is a JSON %s, want an object", se.Got)}
	case se.Got != "":
		return &ProtocolError{Op: op, Field: se.Field, Problem: fmt.Sprintf("JSON %s, want %s", se.Got, fieldKind(v, se.Field))}
	case se.Offset >= 0:
		return &ProtocolError{Op: op, Problem: fmt.Sprintf("body is not JSON (offset %d)", se.Offset)}
	default:
		return &ProtocolError{Op: op, Problem: "body is not JSON"}
	}
}

// fieldKind names the JSON kind the Go field at the dotted path of v's type wants.
func fieldKind(v any, path string) string {
	t := reflect.TypeOf(v)
	for _, name := range strings.Split(path, ".") {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := jsonField(t, name)
			if !ok {
				return "another type"
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return "another type"
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return jsonKindOf(t)
}

func jsonField(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == name || (tag == "" && f.Name == name) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func jsonKindOf(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

func short(s string) string {
	if len(s) > 40 {
		return strconv.Quote(s[:40]) + "…"
	}
	return strconv.Quote(s)
}

func checkAddr(op, field, addr string) error {
	if addr == "" {
		return nil
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return &ProtocolError{Op: op, Field: field, Problem: fmt.Sprintf("%s is not an http(s) URL", short(addr))}
	}
	return nil
}

func decodeCheckin(body []byte, envID string) (*protocol.CheckinResponse, error) {
	const op = "checkin"
	var r protocol.CheckinResponse
	if err := decodeJSON(op, body, &r); err != nil {
		return nil, err
	}
	switch r.Action {
	case protocol.ActionApply, protocol.ActionNone, protocol.ActionDown:
	default:
		return nil, &ProtocolError{Op: op, Field: "action", Problem: fmt.Sprintf("%s is not apply, none or down", short(r.Action))}
	}
	if r.EnvID != "" && r.EnvID != envID {
		return nil, &ProtocolError{Op: op, Field: "env_id", Problem: fmt.Sprintf("answer is for %s, not %s", short(r.EnvID), short(envID))}
	}
	if r.DesiredSha != "" && !isHexSha(r.DesiredSha) {
		return nil, &ProtocolError{Op: op, Field: "desired_sha", Problem: fmt.Sprintf("%s is not 64 lowercase hex digits", short(r.DesiredSha))}
	}
	if r.Action == protocol.ActionApply {
		if r.DesiredSha == "" {
			return nil, &ProtocolError{Op: op, Field: "desired_sha", Problem: "missing for action apply"}
		}
		if r.BundleURL == "" {
			return nil, &ProtocolError{Op: op, Field: "bundle_url", Problem: "missing for action apply"}
		}
	}
	if r.CheckinIntervalS < 0 {
		return nil, &ProtocolError{Op: op, Field: "checkin_interval_s", Problem: "negative"}
	}
	if err := checkAddr(op, "vault.addr", r.Vault.Addr); err != nil {
		return nil, err
	}
	if _, err := Windows(&r, nil, ""); err != nil {
		return nil, err
	}
	return &r, nil
}

// Windows is the tick's apply windows: the answer's apply_windows and apply_windows_tz each
// replace the config's (specs, zone) when present. A bad one is a *ProtocolError naming the field.
func Windows(r *protocol.CheckinResponse, specs []string, zone string) (*window.Schedule, error) {
	if r.ApplyWindows != nil {
		specs = *r.ApplyWindows
	}
	if r.ApplyWindowsTZ != nil {
		zone = *r.ApplyWindowsTZ
	}
	s, err := window.NewSchedule(specs, zone)
	var we *window.Error
	switch {
	case err == nil:
		return s, nil
	case errors.As(err, &we) && we.Index < 0 && r.ApplyWindowsTZ != nil:
		return nil, &ProtocolError{Op: "checkin", Field: "apply_windows_tz", Problem: strings.TrimPrefix(we.Msg, "zone: ")}
	case errors.As(err, &we) && we.Index >= 0 && r.ApplyWindows != nil:
		return nil, &ProtocolError{Op: "checkin", Field: fmt.Sprintf("apply_windows[%d]", we.Index), Problem: we.Msg}
	}
	return nil, &ProtocolError{Op: "checkin", Field: "apply_windows", Problem: err.Error()}
}

func decodeLease(body []byte, envID string) (*protocol.LeaseResponse, error) {
	const op = "lease"
	// AppRole-era keys first, whatever their type: their presence says which tenancy answers.
	var keys map[string]json.RawMessage
	if strictjson.Unmarshal(body, &keys) == nil {
		var found []string
		for _, k := range []string{"wrapping_token", "role_id"} {
			if v, ok := keys[k]; ok && string(bytes.TrimSpace(v)) != "null" {
				found = append(found, k)
			}
		}
		if len(found) > 0 {
			return nil, protocol.Refuse(protocol.CodeLeaseShape,
				"tenancy answered the lease with an AppRole-era body (%s); AppRole is gone, the agent logs in with a login_jwt deploy grant — tenancy needs upgrading",
				strings.Join(found, ", "))
		}
	}
	var r protocol.LeaseResponse
	if err := decodeJSON(op, body, &r); err != nil {
		return nil, err
	}
	if r.LoginJWT == "" {
		return nil, protocol.Refuse(protocol.CodeLeaseShape, "lease response carries no login_jwt")
	}
	if r.EnvID != "" && r.EnvID != envID {
		return nil, &ProtocolError{Op: op, Field: "env_id", Problem: fmt.Sprintf("lease is for %s, not %s", short(r.EnvID), short(envID))}
	}
	if r.TTLSec < 0 {
		return nil, &ProtocolError{Op: op, Field: "ttl_s", Problem: "negative"}
	}
	if err := checkAddr(op, "addr", r.Addr); err != nil {
		return nil, err
	}
	// Tenancy's AgentLeaseOut has addr at top level; a pre-0.1 vault{} block is only a fallback.
	if r.Addr == "" && r.Vault != nil {
		if err := checkAddr(op, "vault.addr", r.Vault.Addr); err != nil {
			return nil, err
		}
		r.Addr = r.Vault.Addr
	}
	return &r, nil
}

func decodeBundle(body []byte) (map[string]string, error) {
	var b struct {
		Files map[string]any `json:"files"`
	}
	if err := strictjson.Unmarshal(body, &b); err != nil {
		var se *strictjson.Error
		switch {
		case errors.As(err, &se) && se.Duplicate && strings.HasPrefix(se.Pointer, "/files/"):
			return nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body: files: %s given twice", short(se.Key))
		case errors.As(err, &se) && se.Duplicate:
			return nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body: key %s given twice", short(se.Field))
		case errors.As(err, &se) && se.Got != "" && se.Field != "":
			return nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body: field %q is a JSON %s, want an object", se.Field, se.Got)
		}
		return nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body is not a JSON object")
	}
	if b.Files == nil {
		return nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body has no files")
	}
	files := make(map[string]string, len(b.Files))
	for p, v := range b.Files {
		s, ok := v.(string)
		if !ok {
			return nil, protocol.Refuse(protocol.CodeBundleInvalid, "bundle body: files[%s] is not a string", short(p))
		}
		files[p] = s
	}
	return files, nil
}
