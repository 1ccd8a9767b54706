package config

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/window"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/yamldoc"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Error is a config the agent will not run with (exit 78); Key is the dotted key, Line if known.
type Error struct {
	File string
	Key  string
	Msg  string
	Line int
	// Err is the underlying error of a file that could not be read.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config ")
	b.WriteString(e.File)
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		fmt.Fprintf(&b, " (line %d)", e.Line)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// maxSize bounds what is read: a config is a few hundred bytes.
const maxSize = 1 << 20

// Load parses the file at path; every failure is a *Error (fs.ErrNotExist still matches). Only
// a regular file is read (capread.Open: a FIFO in its place cannot hang a tick).
func Load(path string) (*Config, error) {
	f, _, err := capread.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read: " + errText(err), Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read: " + errText(err), Err: err}
	}
	return Parse(data, path)
}

// errText drops the path an *fs.PathError repeats (Error() already names the file).
func errText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// Parse decodes data, applies defaults, derives values and validates; every error is a *Error.
func Parse(data []byte, file string) (cfg *Config, err error) {
	// A panic in the third-party YAML parser must still be exit 78, not a timer crash loop.
	defer func() {
		if r := recover(); r != nil {
			cfg, err = nil, &Error{File: file, Msg: fmt.Sprintf("invalid YAML (parser failed: %v)", r)}
		}
	}()
	if len(data) > maxSize {
		return nil, &Error{File: file, Msg: fmt.Sprintf("file is larger than %d bytes", maxSize)}
	}
	root, err := parseDocument(data, file)
	if err != nil {
		return nil, err
	}
	c := defaults()
	c.Path = file
	d := &decoder{file: file, set: map[string]bool{}, lines: map[string]int{}}
	if root != nil {
		if err := d.mapping(root, reflect.ValueOf(&c).Elem(), ""); err != nil {
			return nil, err
		}
	}
	if err := d.finish(&c); err != nil {
		return nil, err
	}
	return &c, nil
}

func parseDocument(data []byte, file string) (*yaml.Node, error) {
	root, err := yamldoc.Root(data)
	var de *yamldoc.Error
	switch {
	case errors.As(err, &de):
		return nil, &Error{File: file, Line: de.Line, Msg: de.Msg}
	case root != nil && root.Kind != yaml.MappingNode:
		return nil, &Error{File: file, Line: root.Line, Msg: "want a mapping of keys at the top level, got " + describe(root)}
	}
	return root, nil
}

// decoder fills a Config by yaml tags, remembering which keys the file set (not defaults).
type decoder struct {
	file  string
	set   map[string]bool
	lines map[string]int
}

func (d *decoder) errf(key string, n *yaml.Node, format string, args ...any) *Error {
	line := 0
	if n != nil {
		line = n.Line
	} else if l, ok := d.lines[key]; ok {
		line = l
	}
	return &Error{File: d.file, Key: key, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) mapping(n *yaml.Node, v reflect.Value, prefix string) error {
	fields := yamlFields(v.Type())
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if kn.Kind != yaml.ScalarNode {
			return d.errf(strings.TrimSuffix(prefix, "."), kn, "a key must be a plain name, got %s", describe(kn))
		}
		key := prefix + kn.Value
		if seen[kn.Value] {
			return d.errf(key, kn, "key given twice")
		}
		seen[kn.Value] = true
		if key == "bao.approle" {
			return d.errf(key, kn, "AppRole is gone: the agent logs in to OpenBao with the JWT deploy grant "+
				"(bootstrap_file, bao.auth_mount, bao.role) that replaced it; delete this key")
		}
		idx, ok := fields[kn.Value]
		if !ok {
			return d.errf(key, kn, "unknown key%s", suggest(kn.Value, fields, prefix))
		}
		if err := d.value(vn, v.Field(idx), key); err != nil {
			return err
		}
	}
	return nil
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, key string) error {
	if n.Kind == yaml.AliasNode {
		return d.errf(key, n, "YAML aliases are not supported; write the value out")
	}
	switch n.ShortTag() {
	case "!!null":
		return nil // as if absent: the default stays
	case "!!str", "!!int", "!!float", "!!bool", "!!timestamp", "!!map":
	default:
		if n.Kind == yaml.ScalarNode {
			return d.errf(key, n, "unsupported YAML tag %s", n.Tag)
		}
	}
	if v.Kind() == reflect.Slice {
		return d.list(n, v, key)
	}
	if v.Kind() == reflect.Struct {
		if n.Kind != yaml.MappingNode {
			return d.errf(key, n, "want a mapping, got %s", describe(n))
		}
		return d.mapping(n, v, key+".")
	}
	if n.Kind != yaml.ScalarNode {
		return d.errf(key, n, "want %s, got %s", want(v.Type()), describe(n))
	}
	s := n.Value
	if v.Kind() != reflect.String && (n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 || n.Style&yaml.TaggedStyle != 0 && n.ShortTag() == "!!str") {
		// A quoted "300" or "false" is a string: taking it for a number hides a template that
		// quoted what it should not, and a wrong type must stop the agent (README).
		return d.errf(key, n, "want %s, got the string %s: write the value without quotes", want(v.Type()), describe(n))
	}
	switch v.Kind() {
	case reflect.String:
		if s == "" {
			return nil // an empty value means the default, as it did for the Python agent
		}
		if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
			return d.errf(key, n, "contains a control character or invalid UTF-8")
		}
		v.SetString(s)
	case reflect.Int, reflect.Int64:
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return d.errf(key, n, "want an integer, got %s", describe(n))
		}
		v.SetInt(i)
	case reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return d.errf(key, n, "want a number, got %s", describe(n))
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, ok := parseBool(s)
		if !ok {
			return d.errf(key, n, "want true or false, got %s", describe(n))
		}
		v.SetBool(b)
	case reflect.Pointer: // *bool
		b, ok := parseBool(s)
		if !ok {
			return d.errf(key, n, "want true or false, got %s", describe(n))
		}
		v.Set(reflect.ValueOf(&b))
	default:
		panic("config: unsupported field kind " + v.Kind().String())
	}
	d.set[key] = true
	d.lines[key] = n.Line
	return nil
}

// list decodes a YAML sequence of strings (apply_windows), each item checked as a string key is.
func (d *decoder) list(n *yaml.Node, v reflect.Value, key string) error {
	if n.Kind != yaml.SequenceNode {
		return d.errf(key, n, "want a list, got %s", describe(n))
	}
	out := reflect.MakeSlice(v.Type(), 0, len(n.Content))
	for i, item := range n.Content {
		if item.Kind != yaml.ScalarNode || item.ShortTag() == "!!null" {
			return d.errf(key, item, "entry %d: want a string, got %s", i+1, describe(item))
		}
		if !utf8.ValidString(item.Value) || strings.IndexFunc(item.Value, unicode.IsControl) >= 0 {
			return d.errf(key, item, "entry %d: contains a control character or invalid UTF-8", i+1)
		}
		out = reflect.Append(out, reflect.ValueOf(item.Value))
	}
	v.Set(out)
	d.set[key] = true
	d.lines[key] = n.Line
	return nil
}

func parseBool(s string) (bool, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "true", "yes", "on":
		return true, true
	case "false", "no", "off":
		return false, true
	}
	return false, false
}

func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool, reflect.Pointer:
		return "true or false"
	case reflect.Slice:
		return "a list"
	}
	return "a string"
}

// describe names a node for "want X, got Y"; scalars quoted and cut (a config holds no secrets).
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		s := n.Value
		if utf8.RuneCountInString(s) > 40 {
			s = string([]rune(s)[:40]) + "…"
		}
		return strconv.Quote(s)
	}
	return "nothing"
}

// yamlFields maps a struct's yaml keys to field indexes.
func yamlFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name != "" && name != "-" {
			m[name] = i
		}
	}
	return m
}

// suggest offers the nearest key at the same level, or a misplaced key's section.
func suggest(key string, siblings map[string]int, prefix string) string {
	best, bestDist := "", 3
	for k := range siblings {
		if dist := editDistance(key, k); dist < bestDist || (dist == bestDist && k < best) {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
	}
	if prefix == "" {
		var where []string
		for _, sec := range []struct {
			name string
			t    reflect.Type
		}{{"tenancy", reflect.TypeFor[Tenancy]()}, {"bao", reflect.TypeFor[Bao]()}, {"disk", reflect.TypeFor[Disk]()}} {
			if _, ok := yamlFields(sec.t)[key]; ok {
				where = append(where, sec.name+"."+key)
			}
		}
		if len(where) > 0 {
			return " (did you mean " + strings.Join(where, " or ") + "?)"
		}
		if sec, leaf, ok := strings.Cut(key, "."); ok {
			return fmt.Sprintf(" (keys are nested, not dotted: write %q on its own line and %q indented under it)", sec+":", leaf+": …")
		}
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// finish derives and validates in documented key order, reporting the first fault.
func (d *decoder) finish(c *Config) error {
	e := func(key, format string, args ...any) error { return d.errf(key, nil, format, args...) }

	switch {
	case c.EnvID == "":
		return e("env_id", "required (the environment this box runs, e.g. env-qa-02)")
	case !isSafeName(c.EnvID):
		return e("env_id", "want lowercase letters, digits and '-' (not at either end, at most 63), got %q", c.EnvID)
	}
	if strings.IndexFunc(c.Site, unicode.IsSpace) >= 0 {
		return e("site", "must not contain whitespace, got %q", c.Site)
	}
	switch c.Transport {
	case TransportSDK, TransportProxy, TransportSystem:
	default:
		return e("transport", "want sdk, proxy or system, got %q", c.Transport)
	}
	if !d.set["identity"] {
		c.Identity = DefaultIdentity(c.EnvID)
	}
	if err := absPath(e, "identity", c.Identity); err != nil {
		return err
	}

	if err := d.tenancy(c, e); err != nil {
		return err
	}
	if err := d.bao(c, e); err != nil {
		return err
	}

	if c.IntervalS <= 0 {
		return e("interval_s", "must be a positive number of seconds, got %d", c.IntervalS)
	}
	if err := absPath(e, "state_dir", c.StateDir); err != nil {
		return err
	}
	if err := absPath(e, "bootstrap_file", c.BootstrapFile); err != nil {
		return err
	}
	if c.Disk.Factor < 1 {
		return e("disk.factor", "must be at least 1, got %v", c.Disk.Factor)
	}
	if c.Disk.HeadroomBytes < 0 {
		return e("disk.headroom_bytes", "must not be negative, got %d", c.Disk.HeadroomBytes)
	}
	if c.HealthyTimeoutS <= 0 {
		return e("healthy_timeout_s", "must be a positive number of seconds, got %d", c.HealthyTimeoutS)
	}
	if c.HealthyTimeoutS > protocol.MaxHealthyTimeoutS {
		return e("healthy_timeout_s", "at most %d seconds (the unit's TimeoutStartSec must outlast two waits), got %d", protocol.MaxHealthyTimeoutS, c.HealthyTimeoutS)
	}
	switch c.VolumesOnAbsent {
	case VolumesKeep, VolumesPurge:
	default:
		return e("volumes_on_absent", "want keep or purge, got %q", c.VolumesOnAbsent)
	}
	if !d.set["compose_project"] {
		c.ComposeProject = "monky-" + c.EnvID
	}
	if !isProjectName(c.ComposeProject) {
		return e("compose_project", "want lowercase letters, digits, '-' and '_', starting with a letter or digit, got %q", c.ComposeProject)
	}
	if strings.IndexFunc(c.DockerBin, unicode.IsSpace) >= 0 {
		return e("docker_bin", "want a command name or path without whitespace, got %q", c.DockerBin)
	}
	if strings.IndexFunc(c.RegistryHost, unicode.IsSpace) >= 0 || strings.Contains(c.RegistryHost, "://") {
		return e("registry_host", "want a registry host[:port] without a scheme, got %q", c.RegistryHost)
	}
	if err := absPath(e, "containerd_root", c.ContainerdRoot); err != nil {
		return err
	}
	switch up := strings.ToUpper(c.LogLevel); up {
	case "DEBUG", "INFO", "WARN", "WARNING", "ERROR":
		c.LogLevel = up
	default:
		return e("log_level", "want DEBUG, INFO, WARN, WARNING or ERROR, got %q", c.LogLevel)
	}
	if err := absPath(e, "textfile_dir", c.TextfileDir); err != nil {
		return err
	}
	if c.IdentityRenewBelowS < 0 || c.IdentityRenewBelowS > MaxIdentityRenewBelowS {
		return e("identity_renew_below_s", "want 0 (renewal off) to %d seconds, got %d", MaxIdentityRenewBelowS, c.IdentityRenewBelowS)
	}
	sched, err := window.NewSchedule(c.ApplyWindows, c.ApplyWindowsTZ)
	if err != nil {
		var we *window.Error
		if errors.As(err, &we) && we.Index < 0 {
			return e("apply_windows_tz", "%s", strings.TrimPrefix(we.Msg, "zone: "))
		}
		return e("apply_windows", "%v", err)
	}
	c.Windows = sched
	if c.Prod == nil {
		p := deriveProd(c.Site, c.EnvID)
		c.Prod = &p
	}
	return d.hostKeys(c, e)
}

// ValidAccountName reports whether name is an account name (useradd's rule): never an option,
// a number or a path a later command could misread.
func ValidAccountName(name string) bool { return isAccountName(name) }

// hostKeys checks agent_user and intercept_range.
func (d *decoder) hostKeys(c *Config, e errFunc) error {
	c.agentUserSet = d.set["agent_user"]
	if !ValidAccountName(c.AgentUser) {
		return e("agent_user", "want an account name (lowercase letters, digits, '_' and '-', starting with a letter or '_'), got %q", c.AgentUser)
	}
	p, err := netip.ParsePrefix(c.InterceptRange)
	if err != nil {
		return e("intercept_range", "want an address range such as %s, got %q", DefaultInterceptRange, c.InterceptRange)
	}
	if p.Bits() == 0 || p != p.Masked() {
		return e("intercept_range", "want a range written by its first address, such as %s (not all addresses), got %q", DefaultInterceptRange, c.InterceptRange)
	}
	c.InterceptPrefix = p
	return nil
}

type errFunc func(key, format string, args ...any) error

func absPath(e errFunc, key, p string) error {
	if !filepath.IsAbs(p) {
		return e(key, "want an absolute path, got %q", p)
	}
	return nil
}

func (d *decoder) tenancy(c *Config, e errFunc) error {
	t := &c.Tenancy
	if strings.IndexFunc(t.Service, unicode.IsSpace) >= 0 {
		return e("tenancy.service", "must not contain whitespace, got %q", t.Service)
	}
	if t.BaseURL != "" {
		scheme, host, port, err := splitURL(t.BaseURL)
		if err != nil {
			return e("tenancy.base_url", "%v", err)
		}
		for _, part := range []struct {
			key, fromURL, explicit string
		}{
			{"tenancy.scheme", scheme, t.Scheme},
			{"tenancy.host", host, t.Host},
			{"tenancy.port", strconv.Itoa(port), strconv.Itoa(t.Port)},
		} {
			if d.set[part.key] && part.explicit != part.fromURL {
				return e("tenancy.base_url", "%q sets %s to %s, but %s is %s in the same file; keep one of them",
					t.BaseURL, part.key, part.fromURL, part.key, part.explicit)
			}
		}
		t.Scheme, t.Host, t.Port = scheme, host, port
	}
	if !d.set["tenancy.host"] && t.BaseURL == "" {
		t.Host = t.Service
	}
	switch t.Scheme {
	case "http", "https":
	default:
		return e("tenancy.scheme", "want http or https, got %q", t.Scheme)
	}
	if err := checkHost(t.Host); err != nil {
		return e("tenancy.host", "%v", err)
	}
	if t.Port < 1 || t.Port > 65535 {
		return e("tenancy.port", "want a port from 1 to 65535, got %d", t.Port)
	}
	if err := checkHostPort(t.ProxyAddr); err != nil {
		return e("tenancy.proxy_addr", "%v", err)
	}
	if t.TimeoutS <= 0 {
		return e("tenancy.timeout_s", "must be a positive number of seconds, got %d", t.TimeoutS)
	}
	return nil
}

func (d *decoder) bao(c *Config, e errFunc) error {
	b := &c.Bao
	if strings.IndexFunc(b.Service, unicode.IsSpace) >= 0 {
		return e("bao.service", "must not contain whitespace, got %q", b.Service)
	}
	if _, _, _, err := splitURL(b.Addr); err != nil {
		return e("bao.addr", "%v", err)
	}
	for _, m := range []struct{ key, val string }{
		{"bao.auth_mount", b.AuthMount}, {"bao.kv_mount", b.KVMount},
	} {
		if !isMountPath(m.val) || strings.Contains("/"+m.val+"/", "/../") || strings.Contains("/"+m.val+"/", "/./") {
			return e(m.key, "want a mount path like jwt-tenancy (letters, digits, '-', '_', '.', '/' between segments), got %q", m.val)
		}
	}
	if strings.IndexFunc(b.Role, func(r rune) bool { return unicode.IsSpace(r) || r == '/' }) >= 0 {
		return e("bao.role", "want a role name without whitespace or '/', got %q", b.Role)
	}
	if err := absPath(e, "bao.ca_file", b.CAFile); err != nil {
		return err
	}
	if err := checkHostPort(b.ProxyAddr); err != nil {
		return e("bao.proxy_addr", "%v", err)
	}
	if b.RenewBelowS <= 0 {
		return e("bao.renew_below_s", "must be a positive number of seconds, got %d", b.RenewBelowS)
	}
	if b.TimeoutS <= 0 {
		return e("bao.timeout_s", "must be a positive number of seconds, got %d", b.TimeoutS)
	}
	return nil
}

// splitURL takes an http(s) base URL apart (default port by scheme); path, query, fragment or
// user would be dropped silently by the clients, so they are refused.
func splitURL(raw string) (scheme, host string, port int, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", 0, fmt.Errorf("not a URL: %q", raw)
	}
	switch u.Scheme {
	case "http":
		port = 80
	case "https":
		port = 443
	default:
		return "", "", 0, fmt.Errorf("want an http:// or https:// URL, got %q", raw)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery || (u.Path != "" && u.Path != "/") || u.Opaque != "" {
		return "", "", 0, fmt.Errorf("want scheme://host[:port] only (no path, query or user), got %q", raw)
	}
	host = u.Hostname()
	if err := checkHost(host); err != nil {
		return "", "", 0, fmt.Errorf("%v in %q", err, raw)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", "", 0, fmt.Errorf("want a port from 1 to 65535 in %q", raw)
		}
		port = n
	} else if strings.HasSuffix(u.Host, ":") {
		return "", "", 0, fmt.Errorf("empty port in %q", raw)
	}
	return u.Scheme, host, port, nil
}

// checkHost accepts a DNS-ish name or an IP literal.
func checkHost(h string) error {
	if h == "" {
		return errors.New("empty host")
	}
	if net.ParseIP(h) != nil {
		return nil
	}
	for _, r := range h {
		if !(r == '.' || r == '-' || r == '_' || r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r))) {
			return fmt.Errorf("want a host name or IP address, got %q", h)
		}
	}
	return nil
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("want host:port, got %q", hp)
	}
	if err := checkHost(host); err != nil {
		return fmt.Errorf("want host:port, got %q", hp)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("want a port from 1 to 65535 in %q", hp)
	}
	return nil
}
