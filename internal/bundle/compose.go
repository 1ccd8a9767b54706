package bundle

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
)

// ScanCompose reads a compose file and returns what the agent must judge before running it, each
// finding as "service: what":
//
//   - privileged: settings that give a container the host (privileged, cap_add ALL/SYS_ADMIN,
//     pid/network_mode/ipc host, devices, security_opt …unconfined, and bind mounts of /, the
//     docker socket, /etc, /root, /proc, /sys or anything under the last four). A bundle runs
//     them only with bundle.json agent.allow_privileged.
//   - invalid: never allowed, whatever the flags — `build:` (the box builds nothing), a bind
//     source, env_file, or file-backed secret/config that resolves outside releaseDir, a `~`
//     path, a path taken from a ${VARIABLE} (the agent checks before rendering, so it cannot
//     know where it points), and `include`/`extends.file` (another file the scan would not see).
//
// Relative paths resolve against releaseDir, the directory docker compose is run in. Variables
// are never interpolated. err reports a file compose itself could not load (bad YAML, a section
// of the wrong shape), naming where, e.g. `services.api.volumes[1]: want a string or a mapping`.
func ScanCompose(compose []byte, releaseDir string) (privileged []string, invalid []string, err error) {
	return scanCompose(compose, releaseDir, releaseDir)
}

// Check applies the compose checks to the bundle's compose file as it will be staged in
// releaseDir: BUNDLE_INVALID for anything never allowed (or a compose file that does not load),
// then PRIVILEGED_REFUSED unless Meta.Agent.AllowPrivileged. Each detail lists every finding,
// so one refusal tells the author everything to fix.
func (b *Bundle) Check(releaseDir string) error {
	if !path.IsAbs(releaseDir) {
		// the caller's mistake, not the bundle's: not a refusal
		return fmt.Errorf("bundle: check: release directory %q is not an absolute path", releaseDir)
	}
	name := b.Meta.ComposeFile
	base := path.Join(releaseDir, path.Dir(name))
	priv, inv, err := scanCompose([]byte(b.Files[name]), base, releaseDir)
	if err != nil {
		return invalid("%s: %v", name, err)
	}
	if len(inv) > 0 {
		return invalid("%s: %s", name, strings.Join(inv, ", "))
	}
	if len(priv) > 0 && !b.Meta.Agent.AllowPrivileged {
		return protocol.Refuse(protocol.CodePrivileged, "%s (bundle.json agent.allow_privileged is not set)",
			strings.Join(priv, ", "))
	}
	return nil
}

// sensitiveMounts are host paths whose bind mount hands a container the host: the root, the
// docker socket (root on the host by another name), and trees under which the kernel and the
// host's configuration and root's home live.
var (
	sensitiveExact = []string{"/", "/var/run/docker.sock", "/run/docker.sock"}
	sensitiveTrees = []string{"/etc", "/root", "/proc", "/sys"}
)

// sensitive reports whether a cleaned absolute host path is privileged to bind. An ancestor of
// the docker socket (/run, /var/run, /var) carries the socket with it, so it counts too.
func sensitive(p string) bool {
	for _, s := range sensitiveExact {
		if p == s || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	for _, t := range sensitiveTrees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}

type scan struct {
	base, boundary string
	priv, inv      []string
	// named volumes / secrets / configs backed by a host path (top-level sections).
	hostVolumes map[string]string // volume name → device
	fileSecrets map[string]string // secret name → file
	fileConfigs map[string]string // config name → file
}

type shapeError struct {
	at, msg string
}

func (e *shapeError) Error() string { return e.at + ": " + e.msg }

func shapeErr(at, format string, args ...any) error {
	return &shapeError{at: at, msg: fmt.Sprintf(format, args...)}
}

func scanCompose(compose []byte, base, boundary string) (priv, inv []string, err error) {
	if !path.IsAbs(base) || !path.IsAbs(boundary) {
		// a relative release directory would make "stays inside" meaningless
		return nil, nil, fmt.Errorf("release directory %q is not an absolute path", boundary)
	}
	var doc any
	// yaml.v3 resolves anchors, aliases and `<<` merges while decoding, so a setting hidden in
	// an x- extension block and merged into a service is seen like any other.
	if err := yaml.Unmarshal(compose, &doc); err != nil {
		return nil, nil, fmt.Errorf("not valid YAML: %v", err)
	}
	if doc == nil {
		return nil, nil, fmt.Errorf("empty compose file")
	}
	top, ok := asMap(doc)
	if !ok {
		return nil, nil, shapeErr("(top level)", "want a mapping")
	}
	s := &scan{
		base: path.Clean(base), boundary: path.Clean(boundary),
		hostVolumes: map[string]string{}, fileSecrets: map[string]string{}, fileConfigs: map[string]string{},
	}
	if _, ok := top["include"]; ok {
		s.inv = append(s.inv, "include: other compose files are not allowed (the agent checks one file)")
	}
	if err := s.topLevel(top); err != nil {
		return nil, nil, err
	}
	servicesRaw := top["services"]
	if servicesRaw == nil {
		return nil, s.inv, nil
	}
	services, ok := asMap(servicesRaw)
	if !ok {
		return nil, nil, shapeErr("services", "want a mapping")
	}
	for _, name := range sortedKeys(services) {
		if err := s.service(name, services[name]); err != nil {
			return nil, nil, err
		}
	}
	return s.priv, s.inv, nil
}

// topLevel records named volumes bound to a host directory and file-backed secrets and
// configs: each is a bind mount in disguise, judged where a service uses it.
func (s *scan) topLevel(top map[string]any) error {
	if raw := top["volumes"]; raw != nil {
		vols, ok := asMap(raw)
		if !ok {
			return shapeErr("volumes", "want a mapping")
		}
		for _, name := range sortedKeys(vols) {
			if vols[name] == nil {
				continue
			}
			v, ok := asMap(vols[name])
			if !ok {
				return shapeErr("volumes."+name, "want a mapping")
			}
			if v["driver_opts"] == nil {
				continue
			}
			opts, ok := asMap(v["driver_opts"])
			if !ok {
				return shapeErr("volumes."+name+".driver_opts", "want a mapping")
			}
			o := strings.ToLower(scalar(opts["o"]))
			dev := scalar(opts["device"])
			if dev != "" && strings.Contains(o, "bind") { // bind and rbind
				s.hostVolumes[name] = dev
			}
		}
	}
	for _, sec := range []struct {
		key string
		dst map[string]string
	}{{"secrets", s.fileSecrets}, {"configs", s.fileConfigs}} {
		raw := top[sec.key]
		if raw == nil {
			continue
		}
		m, ok := asMap(raw)
		if !ok {
			return shapeErr(sec.key, "want a mapping")
		}
		for _, name := range sortedKeys(m) {
			if m[name] == nil {
				continue
			}
			e, ok := asMap(m[name])
			if !ok {
				return shapeErr(sec.key+"."+name, "want a mapping")
			}
			if f := e["file"]; f != nil {
				fs, ok := f.(string)
				if !ok {
					return shapeErr(sec.key+"."+name+".file", "want a string")
				}
				sec.dst[name] = fs
			}
		}
	}
	return nil
}

func (s *scan) addPriv(svc, format string, args ...any) {
	s.priv = append(s.priv, svc+": "+fmt.Sprintf(format, args...))
}

func (s *scan) addInv(svc, format string, args ...any) {
	s.inv = append(s.inv, svc+": "+fmt.Sprintf(format, args...))
}

func (s *scan) service(name string, raw any) error {
	at := "services." + name
	svc, ok := asMap(raw)
	if !ok {
		return shapeErr(at, "want a mapping")
	}
	if _, ok := svc["build"]; ok {
		s.addInv(name, "build (the box builds nothing; images come from the registry)")
	}
	if ext, ok := svc["extends"]; ok && ext != nil {
		if m, ok := asMap(ext); ok && m["file"] != nil {
			s.addInv(name, "extends.file (another compose file the agent does not check)")
		}
	}
	if v, ok := svc["privileged"]; ok && truthy(v) {
		s.addPriv(name, "privileged: %s", scalar(v))
	}
	if err := s.capAdd(name, at, svc["cap_add"]); err != nil {
		return err
	}
	for _, key := range []string{"pid", "network_mode", "ipc"} {
		v, ok := svc[key]
		if !ok || v == nil {
			continue
		}
		str, ok := v.(string)
		if !ok {
			return shapeErr(at+"."+key, "want a string")
		}
		switch {
		case strings.EqualFold(strings.TrimSpace(str), "host"):
			s.addPriv(name, "%s: host", key)
		case strings.Contains(str, "$"):
			s.addPriv(name, "%s: %s (set from a variable, cannot be checked)", key, str)
		}
	}
	if err := s.devices(name, at, svc["devices"]); err != nil {
		return err
	}
	if err := s.securityOpt(name, at, svc["security_opt"]); err != nil {
		return err
	}
	if err := s.volumes(name, at, svc["volumes"]); err != nil {
		return err
	}
	if err := s.envFile(name, at, svc["env_file"]); err != nil {
		return err
	}
	for _, key := range []string{"secrets", "configs"} {
		if err := s.fileRefs(name, at, key, svc[key]); err != nil {
			return err
		}
	}
	return nil
}

// truthy follows compose: YAML booleans, and the strings compose converts to true. Anything
// else that is not plainly false (a ${VARIABLE}, say) counts, because it may become true.
func truthy(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case bool:
		return t
	case string:
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "false", "no", "n", "off", "0", "":
			return false
		}
		return true
	case int:
		return t != 0
	default:
		return true
	}
}

func (s *scan) capAdd(name, at string, raw any) error {
	if raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return shapeErr(at+".cap_add", "want a list")
	}
	for i, c := range list {
		cs, ok := c.(string)
		if !ok {
			return shapeErr(fmt.Sprintf("%s.cap_add[%d]", at, i), "want a string")
		}
		norm := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(cs)), "CAP_")
		switch {
		case norm == "ALL" || norm == "SYS_ADMIN":
			s.addPriv(name, "cap_add %s", cs)
		case strings.Contains(cs, "$"):
			s.addPriv(name, "cap_add %s (set from a variable, cannot be checked)", cs)
		}
	}
	return nil
}

func (s *scan) devices(name, at string, raw any) error {
	if raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return shapeErr(at+".devices", "want a list")
	}
	for i, d := range list {
		switch t := d.(type) {
		case string:
			s.addPriv(name, "devices %s", t)
		default:
			m, ok := asMap(d)
			if !ok {
				return shapeErr(fmt.Sprintf("%s.devices[%d]", at, i), "want a string or a mapping")
			}
			s.addPriv(name, "devices %s", scalar(m["source"]))
		}
	}
	return nil
}

func (s *scan) securityOpt(name, at string, raw any) error {
	if raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return shapeErr(at+".security_opt", "want a list")
	}
	for i, o := range list {
		opt, ok := o.(string)
		if !ok {
			return shapeErr(fmt.Sprintf("%s.security_opt[%d]", at, i), "want a string")
		}
		switch {
		case strings.Contains(strings.ToLower(opt), "unconfined"):
			s.addPriv(name, "security_opt %s", opt)
		case strings.Contains(opt, "$"):
			s.addPriv(name, "security_opt %s (set from a variable, cannot be checked)", opt)
		}
	}
	return nil
}

func (s *scan) volumes(name, at string, raw any) error {
	if raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return shapeErr(at+".volumes", "want a list")
	}
	for i, v := range list {
		where := fmt.Sprintf("%s.volumes[%d]", at, i)
		switch t := v.(type) {
		case string:
			src, ok := shortVolumeSource(t)
			if !ok {
				continue // an anonymous volume: only a target
			}
			if isHostPath(src) {
				s.bind(name, src)
			} else {
				s.namedVolume(name, src)
			}
		default:
			m, ok := asMap(v)
			if !ok {
				return shapeErr(where, "want a string or a mapping")
			}
			typ, src := scalar(m["type"]), scalar(m["source"])
			if m["source"] != nil {
				if _, ok := m["source"].(string); !ok {
					return shapeErr(where+".source", "want a string")
				}
			}
			switch {
			case typ == "bind":
				s.bind(name, src)
			case typ == "volume" && src != "":
				s.namedVolume(name, src)
			case typ == "" && isHostPath(src):
				// compose requires a type; without one, judge a path as the bind it looks like
				s.bind(name, src)
			}
		}
	}
	return nil
}

// shortVolumeSource splits `src:dst[:mode]`; ok is false for a bare target (anonymous volume).
func shortVolumeSource(spec string) (string, bool) {
	i := strings.IndexByte(spec, ':')
	if i < 0 {
		if strings.Contains(spec, "$") {
			// wholly a variable: it may expand to src:dst
			return spec, true
		}
		return "", false
	}
	return spec[:i], true
}

// isHostPath is compose's rule for the short syntax: a source that starts with ".", "/" or "~"
// is a host path; anything else names a volume. A source that starts with a variable could be
// either, so it is judged as a path.
func isHostPath(src string) bool {
	return strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~") ||
		strings.HasPrefix(src, "$")
}

// bind judges one host-path source: never allowed when it leaves the release directory by a
// relative path, starts with `~`, or comes from a variable; privileged when sensitive.
func (s *scan) bind(svc, src string) {
	s.hostPath(svc, "bind mount", src, true)
}

func (s *scan) hostPath(svc, what, src string, absAllowed bool) {
	switch {
	case src == "":
		s.addInv(svc, "%s without a source", what)
	case strings.Contains(src, "$"):
		s.addInv(svc, "%s %s comes from a variable; the agent checks paths before rendering, so they must be literal", what, src)
	case strings.HasPrefix(src, "~"):
		s.addInv(svc, "%s %s is in a home directory, outside the release directory", what, src)
	case strings.HasPrefix(src, "/"):
		clean := path.Clean(src)
		if absAllowed {
			if sensitive(clean) {
				s.addPriv(svc, "%s of %s", what, clean)
			}
			return
		}
		if !s.inside(clean) {
			s.addInv(svc, "%s %s is outside the release directory", what, src)
		}
	default:
		if !s.inside(path.Join(s.base, src)) {
			s.addInv(svc, "%s %s resolves outside the release directory", what, src)
		}
	}
}

func (s *scan) inside(p string) bool {
	return p == s.boundary || strings.HasPrefix(p, s.boundary+"/") || s.boundary == "/"
}

func (s *scan) namedVolume(svc, name string) {
	if dev, ok := s.hostVolumes[name]; ok {
		s.hostPath(svc, "bind mount (volume "+name+")", dev, true)
	}
}

func (s *scan) envFile(name, at string, raw any) error {
	if raw == nil {
		return nil
	}
	var list []any
	switch t := raw.(type) {
	case string:
		list = []any{t}
	case []any:
		list = t
	default:
		return shapeErr(at+".env_file", "want a string or a list")
	}
	for i, e := range list {
		switch t := e.(type) {
		case string:
			s.hostPath(name, "env_file", t, false)
		default:
			m, ok := asMap(e)
			if !ok {
				return shapeErr(fmt.Sprintf("%s.env_file[%d]", at, i), "want a string or a mapping")
			}
			p, ok := m["path"].(string)
			if !ok {
				return shapeErr(fmt.Sprintf("%s.env_file[%d].path", at, i), "want a string")
			}
			s.hostPath(name, "env_file", p, false)
		}
	}
	return nil
}

// fileRefs judges the file-backed secrets and configs a service uses: compose bind-mounts
// their file into the container.
func (s *scan) fileRefs(name, at, key string, raw any) error {
	if raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return shapeErr(at+"."+key, "want a list")
	}
	files := s.fileSecrets
	if key == "configs" {
		files = s.fileConfigs
	}
	for i, e := range list {
		var ref string
		switch t := e.(type) {
		case string:
			ref = t
		default:
			m, ok := asMap(e)
			if !ok {
				return shapeErr(fmt.Sprintf("%s.%s[%d]", at, key, i), "want a string or a mapping")
			}
			ref = scalar(m["source"])
		}
		if f, ok := files[ref]; ok {
			// judged exactly like a bind mount, which is what compose makes of it
			s.hostPath(name, key[:len(key)-1]+" "+ref+" file", f, true)
		}
	}
	return nil
}

// asMap accepts both map shapes yaml.v3 produces (string keys, or mixed keys), turning every
// key into its string form.
func asMap(v any) (map[string]any, bool) {
	switch t := v.(type) {
	case map[string]any:
		return t, true
	case map[any]any:
		out := make(map[string]any, len(t))
		for k, val := range t {
			out[fmt.Sprint(k)] = val
		}
		return out, true
	}
	return nil, false
}

func scalar(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case string:
		return t
	default:
		return fmt.Sprint(t)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
