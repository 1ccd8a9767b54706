package bundle

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
)

// The privilege policy is an allow-list over compose-go's model: harmless, judged below, or (all
// unknown settings) privileged. docs/PROTOCOL.md carries the same table.

// rule judges one service setting; nil means the setting is harmless whatever it holds.
type rule func(j *judge, svc string, s *types.ServiceConfig)

// serviceRules is keyed by the setting's compose key (its yaml tag in types.ServiceConfig).
var serviceRules = map[string]rule{
	// harmless: the container's own processes, resources, names and wiring
	"name": nil, "profiles": nil, "annotations": nil, "attach": nil, "blkio_config": nil,
	"cap_drop": nil, "cpu_count": nil, "cpu_percent": nil, "cpu_period": nil, "cpu_quota": nil,
	"cpu_rt_period": nil, "cpu_rt_runtime": nil, "cpus": nil, "cpuset": nil, "cpu_shares": nil,
	"command": nil, "container_name": nil, "depends_on": nil, "develop": nil, "dns": nil,
	"dns_opt": nil, "dns_search": nil, "domainname": nil, "entrypoint": nil, "environment": nil,
	"expose": nil, "external_links": nil, "extra_hosts": nil, "group_add": nil, "hostname": nil,
	"healthcheck": nil, "image": nil, "init": nil, "labels": nil, "links": nil, "mem_limit": nil, "mem_reservation": nil,
	"memswap_limit": nil, "mem_swappiness": nil, "mac_address": nil, "pids_limit": nil, "platform": nil, "ports": nil, "read_only": nil,
	"restart": nil, "scale": nil, "shm_size": nil, "stdin_open": nil, "stop_grace_period": nil,
	"stop_signal": nil, "tmpfs": nil, "tty": nil, "ulimits": nil, "user": nil, "working_dir": nil,
	// ulimits and shm_size act within the container's own memory cgroup; secrets and configs are
	// judged where defined (top level)
	"secrets": nil, "configs": nil,

	// never allowed: the box builds nothing, and reads no file the agent did not judge
	"build": func(j *judge, svc string, s *types.ServiceConfig) {
		j.invalid(svc, "build", "the box builds nothing; images come from the registry", "")
	},
	"dockerfile": func(j *judge, svc string, s *types.ServiceConfig) {
		j.invalid(svc, "dockerfile", "the box builds nothing", "")
	},
	"pull_policy": judgePullPolicy,
	"extends":     judgeExtends,
	"env_file":    judgeEnvFiles,
	"label_file":  judgeLabelFiles,

	// judged
	"volumes":      judgeVolumes,
	"volumes_from": judgeVolumesFrom,
	"network_mode": func(j *judge, svc string, s *types.ServiceConfig) {
		j.mode(svc, "network_mode", s.NetworkMode, "none", "bridge")
	},
	"net": func(j *judge, svc string, s *types.ServiceConfig) { j.mode(svc, "net", s.Net, "none", "bridge") },
	"pid": func(j *judge, svc string, s *types.ServiceConfig) { j.mode(svc, "pid", s.Pid) },
	"ipc": func(j *judge, svc string, s *types.ServiceConfig) {
		j.mode(svc, "ipc", s.Ipc, "private", "shareable", "none")
	},
	"uts":                 func(j *judge, svc string, s *types.ServiceConfig) { j.onlyEmpty(svc, "uts", s.Uts) },
	"userns_mode":         func(j *judge, svc string, s *types.ServiceConfig) { j.onlyEmpty(svc, "userns_mode", s.UserNSMode) },
	"cgroup":              func(j *judge, svc string, s *types.ServiceConfig) { j.oneOf(svc, "cgroup", s.Cgroup, "private") },
	"cgroup_parent":       func(j *judge, svc string, s *types.ServiceConfig) { j.onlyEmpty(svc, "cgroup_parent", s.CgroupParent) },
	"runtime":             func(j *judge, svc string, s *types.ServiceConfig) { j.oneOf(svc, "runtime", s.Runtime, "runc") },
	"isolation":           func(j *judge, svc string, s *types.ServiceConfig) { j.oneOf(svc, "isolation", s.Isolation, "default") },
	"volume_driver":       func(j *judge, svc string, s *types.ServiceConfig) { j.onlyEmpty(svc, "volume_driver", s.VolumeDriver) },
	"privileged":          judgePrivileged,
	"cap_add":             judgeCapAdd,
	"security_opt":        judgeSecurityOpt,
	"sysctls":             judgeSysctls,
	"storage_opt":         judgeStorageOpt,
	"networks":            judgeServiceNetworks,
	"deploy":              judgeDeploy,
	"post_start":          func(j *judge, svc string, s *types.ServiceConfig) { j.hooks(svc, "post_start", s.PostStart) },
	"pre_stop":            func(j *judge, svc string, s *types.ServiceConfig) { j.hooks(svc, "pre_stop", s.PreStop) },
	"devices":             func(j *judge, svc string, s *types.ServiceConfig) { j.set(svc, "devices", "host devices") },
	"device_cgroup_rules": func(j *judge, svc string, s *types.ServiceConfig) { j.set(svc, "device_cgroup_rules", "host devices") },
	"gpus":                func(j *judge, svc string, s *types.ServiceConfig) { j.set(svc, "gpus", "host devices") },
	"use_api_socket": func(j *judge, svc string, s *types.ServiceConfig) {
		j.set(svc, "use_api_socket", "the docker engine's API")
	},
	"provider": func(j *judge, svc string, s *types.ServiceConfig) {
		j.set(svc, "provider", "a program run on the host")
	},
	"models":  func(j *judge, svc string, s *types.ServiceConfig) { j.set(svc, "models", "the host's model runner") },
	"logging": judgeLogging,
	// compose's schema refuses the legacy keys today; judged anyway, should a loader fill them
	"log_driver": func(j *judge, svc string, s *types.ServiceConfig) { j.logging(svc, "log_driver", s.LogDriver, "", nil) },
	"log_opt":    func(j *judge, svc string, s *types.ServiceConfig) { j.logging(svc, "", "", "log_opt.", s.LogOpt) },
	"oom_score_adj": func(j *judge, svc string, s *types.ServiceConfig) {
		if s.OomScoreAdj < 0 {
			j.priv(svc, "oom_score_adj", "below 0 the host's OOM killer kills the host's own processes first", fmt.Sprint(s.OomScoreAdj))
		}
	},
	"oom_kill_disable": func(j *judge, svc string, s *types.ServiceConfig) {
		if s.OomKillDisable {
			j.priv(svc, "oom_kill_disable", "the host's OOM killer would kill the host's own processes instead", "true")
		}
	},
	"credential_spec": func(j *judge, svc string, s *types.ServiceConfig) { j.set(svc, "credential_spec", "host credentials") },
}

// serviceKeyJudged: anything not known harmless (x- extensions hold nothing compose runs).
func serviceKeyJudged(key string) bool {
	if strings.HasPrefix(key, "x-") {
		return false
	}
	r, known := serviceRules[key]
	return !known || r != nil
}

// AllowedCaps may be added without allow_privileged: docker's defaults and those acting only in
// the container's namespaces. Everything else (ALL, SYS_ADMIN, SYS_PTRACE, …) reaches the host.
var AllowedCaps = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "IPC_LOCK", "KILL", "MKNOD",
	"NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP",
	"SETUID", "SYS_CHROOT",
}

// AllowedLogDrivers write under docker's data-root; any other has dockerd (root) connect to an
// address the bundle names, or load a plugin.
var AllowedLogDrivers = []string{"json-file", "local", "none"}

// AllowedLogOptions: size, rotation, delivery mode and per-line metadata.
var AllowedLogOptions = []string{
	"max-size", "max-file", "compress", "mode", "max-buffer-size",
	"labels", "labels-regex", "env", "env-regex", "tag",
}

// Finding is one thing the judgement found, reported as `subject: key: what`.
type Finding struct {
	Subject string // a service name, or "volume NAME", "network NAME", "secret NAME", "(file)"
	Key     string // the compose key, e.g. volumes[1], cap_add
	What    string
	// Value is the offending text; left out after a secret render (keys only).
	Value   string
	Invalid bool // BUNDLE_INVALID whatever allow_privileged says; else privileged
}

// String renders f, with its value when withValue.
func (f Finding) String(withValue bool) string {
	s := f.Subject + ": " + f.Key + ": " + f.What
	if withValue && f.Value != "" {
		s += " (" + f.Value + ")"
	}
	return s
}

// Host is what the judgement knows of the box it judges for.
type Host struct {
	// InterceptRange is the tunneller's intercept range (config intercept_range); the zero
	// Prefix is DefaultInterceptRange.
	InterceptRange netip.Prefix
	// IsFile reports whether a host path is a regular file (symlinks followed), as the engine
	// would find it; nil judges as if every one is (a judgement away from the box).
	IsFile func(path string) bool
}

// DefaultInterceptRange is ziti-edge-tunnel's default --dns-ip-range (config's default too).
var DefaultInterceptRange = netip.MustParsePrefix("100.64.0.0/10")

// localRanges are addresses a host route must never leave the host for: loopback (the proxy
// transport's plain HTTP) and link-local (cloud metadata), IPv4 and IPv6.
var localRanges = []struct {
	what   string
	prefix netip.Prefix
}{
	{"loopback", netip.MustParsePrefix("127.0.0.0/8")},
	{"link-local", netip.MustParsePrefix("169.254.0.0/16")},
	{"loopback", netip.MustParsePrefix("::1/128")},
	{"link-local", netip.MustParsePrefix("fe80::/10")},
}

type judge struct {
	host     Host
	release  string // cleaned absolute release directory
	project  string
	services map[string]bool
	p        *types.Project
	findings []Finding
}

func (j *judge) invalid(subject, key, what, value string) {
	j.findings = append(j.findings, Finding{Subject: subject, Key: key, What: what, Value: value, Invalid: true})
}

func (j *judge) priv(subject, key, what, value string) {
	j.findings = append(j.findings, Finding{Subject: subject, Key: key, What: what, Value: value})
}

// set: any value of the key is privileged (the rule runs only when the key is set).
func (j *judge) set(svc, key, reaches string) {
	j.priv(svc, key, "reaches "+reaches, "")
}

func (j *judge) onlyEmpty(svc, key, v string) {
	if v != "" {
		j.priv(svc, key, "only the default is allowed", v)
	}
}

func (j *judge) oneOf(svc, key, v string, allowed ...string) {
	if v != "" && !slices.Contains(allowed, v) {
		j.priv(svc, key, "not on the allow-list ("+strings.Join(allowed, ", ")+")", v)
	}
}

// mode judges network_mode, pid, ipc: `host` and `container:` reach outside the project.
func (j *judge) mode(svc, key, v string, allowed ...string) {
	if v == "" || slices.Contains(allowed, v) {
		return
	}
	if other, ok := strings.CutPrefix(v, "service:"); ok && j.services[other] {
		return
	}
	j.priv(svc, key, "only service: of this project is allowed", v)
}

// inside: the release holds no symlink when judged, so the lexical check is the real one.
func (j *judge) inside(p string) bool {
	if !filepath.IsAbs(p) {
		return false
	}
	c := filepath.Clean(p)
	return c == j.release || strings.HasPrefix(c, j.release+string(filepath.Separator))
}

// judgeProject judges every service (all profiles) and every top-level definition.
func judgeProject(p *types.Project, host Host, releaseDir, project string, staged []string) []Finding {
	if !host.InterceptRange.IsValid() {
		host.InterceptRange = DefaultInterceptRange
	}
	j := &judge{host: host, release: filepath.Clean(releaseDir), project: project, services: map[string]bool{}, p: p}
	all := map[string]types.ServiceConfig{}
	for n, s := range p.Services {
		all[n] = s
	}
	for n, s := range p.DisabledServices {
		all[n] = s
	}
	for n := range all {
		j.services[n] = true
	}
	for _, name := range sortedNames(all) {
		s := all[name]
		j.service(name, &s)
	}
	j.topLevel()
	j.plantedSymlinks(all)
	j.releaseRewrites(all, staged)
	return j.findings
}

// releaseRewrites refuses writable binds of staged files or their directories: rewriting them
// changes what a revert runs after the judgement. Read-only binds stay allowed.
func (j *judge) releaseRewrites(all map[string]types.ServiceConfig, staged []string) {
	// every staged file and each directory on its way up to the release, as host paths
	holds := map[string]string{j.release: ""}
	for _, rel := range staged {
		p := filepath.Join(j.release, filepath.FromSlash(rel))
		if !j.inside(p) {
			continue
		}
		for d := p; ; d = filepath.Dir(d) {
			if _, seen := holds[d]; seen {
				break // the release, or a directory an earlier file already marked
			}
			holds[d] = rel
		}
	}
	for _, name := range sortedNames(all) {
		for i, v := range all[name].Volumes {
			if v.Type != types.VolumeTypeBind || v.ReadOnly || !j.inside(v.Source) {
				continue
			}
			rel, ok := holds[filepath.Clean(v.Source)]
			if !ok {
				continue
			}
			what := "writable bind of the release directory: a container could rewrite the files a revert runs again; mount it read-only"
			if rel != "" {
				what = "writable bind holding the release's own " + rel + ": a container could rewrite what a revert runs again; mount it read-only"
			}
			j.priv(name, fmt.Sprintf("volumes[%d]", i), what, v.Source)
		}
	}
}

// hostPath is a host path compose or the engine resolves when a container starts.
type hostPath struct {
	subject, key, path string
	writable           bool // a bind a container can write to
}

// plantedSymlinks refuses host paths strictly inside a writable bind: a container can plant
// ./shared/x -> / for another service's bind of ./shared/x. Likewise files compose reads.
func (j *judge) plantedSymlinks(all map[string]types.ServiceConfig) {
	var paths []hostPath
	for _, name := range sortedNames(all) {
		s := all[name]
		for i, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind && j.inside(v.Source) {
				paths = append(paths, hostPath{name, fmt.Sprintf("volumes[%d]", i), filepath.Clean(v.Source), !v.ReadOnly})
			}
		}
		for i, e := range s.EnvFiles {
			paths = append(paths, hostPath{name, fmt.Sprintf("env_file[%d]", i), filepath.Clean(e.Path), false})
		}
		for i, l := range s.LabelFiles {
			paths = append(paths, hostPath{name, fmt.Sprintf("label_file[%d]", i), filepath.Clean(l), false})
		}
	}
	for _, n := range sortedNames(j.p.Secrets) {
		if f := j.p.Secrets[n].File; f != "" {
			paths = append(paths, hostPath{"secret " + n, "file", filepath.Clean(f), false})
		}
	}
	for _, n := range sortedNames(j.p.Configs) {
		if f := j.p.Configs[n].File; f != "" {
			paths = append(paths, hostPath{"config " + n, "file", filepath.Clean(f), false})
		}
	}
	// Sorted by path, what lies strictly inside W follows W: one pass per writable bind.
	sorted := slices.Clone(paths)
	slices.SortStableFunc(sorted, func(a, b hostPath) int { return strings.Compare(a.path, b.path) })
	flagged := map[hostPath]bool{}
	for _, w := range sorted {
		if !w.writable {
			continue
		}
		prefix := w.path + string(filepath.Separator)
		if w.path == string(filepath.Separator) {
			prefix = w.path
		}
		start, _ := slices.BinarySearchFunc(sorted, prefix, func(h hostPath, t string) int { return strings.Compare(h.path, t) })
		for _, p := range sorted[start:] {
			if !strings.HasPrefix(p.path, prefix) {
				break
			}
			if !flagged[p] {
				flagged[p] = true
				j.priv(p.subject, p.key, "inside a writable bind of "+w.subject+" ("+w.key+"): a container could replace it with a symlink to the host", "")
			}
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// service walks s by reflection, so a field this table does not know is seen (privileged).
func (j *judge) service(name string, s *types.ServiceConfig) {
	v := reflect.ValueOf(s).Elem()
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" || strings.HasPrefix(key, "#") || v.Field(i).IsZero() {
			continue
		}
		r, known := serviceRules[key]
		switch {
		case !known:
			j.priv(name, key, "not on the agent's allow-list", "")
		case r != nil:
			r(j, name, s)
		}
	}
}

func judgePrivileged(j *judge, svc string, s *types.ServiceConfig) {
	if s.Privileged {
		j.priv(svc, "privileged", "the whole host", "true")
	}
}

func judgeLogging(j *judge, svc string, s *types.ServiceConfig) {
	if s.Logging != nil {
		j.logging(svc, "logging.driver", s.Logging.Driver, "logging.options.", s.Logging.Options)
	}
}

// logging judges a logging driver ("" is the engine's default) and its options.
func (j *judge) logging(svc, driverKey, driver, optKey string, opts map[string]string) {
	if driver != "" && !slices.Contains(AllowedLogDrivers, driver) {
		j.priv(svc, driverKey, "not on the allow-list ("+strings.Join(AllowedLogDrivers, ", ")+"): dockerd would send logs where the bundle says", driver)
	}
	for _, o := range sortedNames(opts) {
		if !slices.Contains(AllowedLogOptions, o) {
			j.priv(svc, optKey+o, "not on the allow-list ("+strings.Join(AllowedLogOptions, ", ")+")", "")
		}
	}
}

func judgePullPolicy(j *judge, svc string, s *types.ServiceConfig) {
	if strings.EqualFold(s.PullPolicy, types.PullPolicyBuild) {
		j.invalid(svc, "pull_policy", "the box builds nothing", s.PullPolicy)
	}
}

func judgeExtends(j *judge, svc string, s *types.ServiceConfig) {
	if s.Extends != nil && s.Extends.File != "" {
		j.invalid(svc, "extends.file", "another compose file the agent does not judge", s.Extends.File)
	}
}

func judgeEnvFiles(j *judge, svc string, s *types.ServiceConfig) {
	for i, e := range s.EnvFiles {
		if !j.inside(e.Path) {
			j.invalid(svc, fmt.Sprintf("env_file[%d]", i), "outside the release directory", e.Path)
		}
	}
}

func judgeLabelFiles(j *judge, svc string, s *types.ServiceConfig) {
	for i, p := range s.LabelFiles {
		if !j.inside(p) {
			j.invalid(svc, fmt.Sprintf("label_file[%d]", i), "outside the release directory", p)
		}
	}
}

func judgeVolumes(j *judge, svc string, s *types.ServiceConfig) {
	for i, v := range s.Volumes {
		key := fmt.Sprintf("volumes[%d]", i)
		switch v.Type {
		case types.VolumeTypeBind:
			switch {
			case j.inside(v.Source):
			case slices.Contains(TimezoneFiles, filepath.Clean(v.Source)):
				j.timezoneBind(svc, key, v)
			default:
				j.priv(svc, key, "bind source outside the release directory", v.Source)
			}
			if v.Bind != nil && !slices.Contains([]string{"", types.PropagationPrivate, types.PropagationRPrivate}, v.Bind.Propagation) {
				j.priv(svc, key+".bind.propagation", "mounts would propagate to the host", v.Bind.Propagation)
			}
		case types.VolumeTypeVolume:
			if v.Source == "" {
				continue // anonymous: a fresh local volume
			}
			if _, ok := j.p.Volumes[v.Source]; !ok {
				j.invalid(svc, key, "names a volume not declared under the top-level volumes", v.Source)
			}
		case types.VolumeTypeTmpfs, types.VolumeTypeImage:
		default:
			j.priv(svc, key, "volume type not on the allow-list (bind, volume, tmpfs, image)", v.Type)
		}
	}
}

// TimezoneFiles are the host paths a service may bind, read-only: they tell a container the
// host's time zone, which any clock it reads gives away anyway. Nothing else outside the release.
var TimezoneFiles = []string{"/etc/localtime", "/etc/timezone"}

// timezoneBind judges a bind of a TimezoneFiles path: `:ro` and nothing more. A SELinux label
// (z, Z) relabels the host's file; a missing one docker creates, as a directory, in the host's
// /etc (compose's short syntax asks it to).
func (j *judge) timezoneBind(svc, key string, v types.ServiceVolumeConfig) {
	src := filepath.Clean(v.Source)
	switch {
	case !v.ReadOnly:
		j.priv(svc, key, "the host's time zone may only be bound read-only (:ro)", v.Source)
	case v.Bind != nil && v.Bind.SELinux != "":
		j.priv(svc, key+".bind.selinux", "a SELinux label relabels the host's "+src+"; only :ro is allowed", v.Bind.SELinux)
	case v.Bind != nil && v.Bind.Recursive != "":
		j.priv(svc, key+".bind.recursive", "only :ro is allowed for the host's "+src, v.Bind.Recursive)
	case j.host.IsFile != nil && !j.host.IsFile(src):
		j.priv(svc, key, "not a file on this host: docker would create a directory in the host's /etc for it; drop the bind", v.Source)
	}
}

func judgeVolumesFrom(j *judge, svc string, s *types.ServiceConfig) {
	for i, v := range s.VolumesFrom {
		ref, _, _ := strings.Cut(v, ":")
		switch ref {
		case "service":
			ref, _, _ = strings.Cut(strings.TrimPrefix(v, "service:"), ":")
		case "container":
			// docker reads `container:` as a prefix even when a service has that name
			ref = ""
		}
		if !j.services[ref] {
			j.priv(svc, fmt.Sprintf("volumes_from[%d]", i), "only services of this project are allowed", v)
		}
	}
}

// normCap canonicalises a capability (any case, CAP_ prefix optional).
func normCap(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	return strings.TrimPrefix(c, "CAP_")
}

func judgeCapAdd(j *judge, svc string, s *types.ServiceConfig) {
	for _, c := range s.CapAdd {
		if !slices.Contains(AllowedCaps, normCap(c)) {
			j.priv(svc, "cap_add", "capability not on the allow-list", c)
		}
	}
}

// judgeSecurityOpt allows no-new-privileges, named AppArmor profiles and builtin seccomp; other
// seccomp values are files (an allow-all can ship); label/systempaths lift confinement.
func judgeSecurityOpt(j *judge, svc string, s *types.ServiceConfig) {
	for _, o := range s.SecurityOpt {
		key, val, _ := strings.Cut(o, "=")
		if strings.Contains(key, ":") {
			key, val, _ = strings.Cut(o, ":")
		}
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.TrimSpace(val)
		ok := false
		switch key {
		case "no-new-privileges":
			ok = true
		case "apparmor":
			ok = val != "" && !strings.EqualFold(val, "unconfined")
		case "seccomp":
			ok = val == "builtin"
		}
		if !ok {
			j.priv(svc, "security_opt", "not on the allow-list (no-new-privileges, apparmor=NAME, seccomp=builtin)", o)
		}
	}
}

func judgeSysctls(j *judge, svc string, s *types.ServiceConfig) {
	for _, k := range sortedNames(s.Sysctls) {
		if !strings.HasPrefix(k, "net.") {
			j.priv(svc, "sysctls", "only the namespaced net.* sysctls are allowed", k)
		}
	}
}

func judgeStorageOpt(j *judge, svc string, s *types.ServiceConfig) {
	for _, k := range sortedNames(s.StorageOpt) {
		if k != "size" {
			j.priv(svc, "storage_opt", "only size is allowed", k)
		}
	}
}

func judgeServiceNetworks(j *judge, svc string, s *types.ServiceConfig) {
	for _, n := range sortedNames(s.Networks) {
		if c := s.Networks[n]; c != nil && len(c.DriverOpts) > 0 {
			j.priv(svc, "networks."+n+".driver_opts", "endpoint driver options are not on the allow-list", "")
		}
	}
}

func judgeDeploy(j *judge, svc string, s *types.ServiceConfig) {
	r := s.Deploy.Resources
	for _, res := range []struct {
		name string
		r    *types.Resource
	}{{"limits", r.Limits}, {"reservations", r.Reservations}} {
		if res.r != nil && len(res.r.Devices) > 0 {
			j.priv(svc, "deploy.resources."+res.name+".devices", "reaches host devices", "")
		}
	}
}

func (j *judge) hooks(svc, key string, hs []types.ServiceHook) {
	for i, h := range hs {
		if h.Privileged {
			j.priv(svc, fmt.Sprintf("%s[%d].privileged", key, i), "the whole host", "true")
		}
	}
}

// tmpfsOpts are a local tmpfs volume's options: sizes and modes, no host storage.
var tmpfsOpts = []string{"size", "mode", "uid", "gid", "nr_inodes", "nr_blocks"}

// networkOpts are the bridge driver options allowed on a project network.
var networkOpts = []string{"com.docker.network.driver.mtu", "com.docker.network.bridge.enable_icc"}

func (j *judge) topLevel() {
	p := j.p
	for _, n := range sortedNames(p.Volumes) {
		v, subj := p.Volumes[n], "volume "+n
		switch {
		case bool(v.External):
			j.priv(subj, "external", "a volume made outside this project", v.Name)
			continue
		case v.Driver != "" && v.Driver != "local":
			j.priv(subj, "driver", "only the local driver is allowed", v.Driver)
		}
		if len(v.DriverOpts) > 0 && !tmpfsVolume(v.DriverOpts) {
			j.priv(subj, "driver_opts", "mounts host storage (only a tmpfs with size/mode options is allowed)", "")
		}
		if v.Name != "" && !strings.HasPrefix(v.Name, j.project+"_") {
			j.priv(subj, "name", "names a volume outside this project", v.Name)
		}
	}
	for _, n := range sortedNames(p.Networks) {
		nw, subj := p.Networks[n], "network "+n
		if nw.External {
			if nw.Name == "host" || (nw.Name == "" && n == "host") {
				j.priv(subj, "external", "the host's network", "host")
			}
			continue
		}
		if nw.Driver != "" && nw.Driver != "bridge" {
			j.priv(subj, "driver", "only the bridge driver is allowed", nw.Driver)
		}
		for _, k := range sortedNames(nw.DriverOpts) {
			if !slices.Contains(networkOpts, k) {
				j.priv(subj, "driver_opts", "option not on the allow-list", k)
			}
		}
		if nw.Name != "" && !strings.HasPrefix(nw.Name, j.project+"_") {
			j.priv(subj, "name", "names a network outside this project", nw.Name)
		}
		j.ipam(subj, nw.Ipam)
	}
	for _, n := range sortedNames(p.Secrets) {
		j.fileObject("secret "+n, types.FileObjectConfig(p.Secrets[n]))
	}
	for _, n := range sortedNames(p.Configs) {
		j.fileObject("config "+n, types.FileObjectConfig(p.Configs[n]))
	}
	if len(p.Models) > 0 {
		j.priv("(file)", "models", "reaches the host's model runner", "")
	}
}

func tmpfsVolume(opts map[string]string) bool {
	if opts["type"] != "tmpfs" || opts["device"] != "tmpfs" {
		return false
	}
	for k, v := range opts {
		switch k {
		case "type", "device":
		case "o":
			for _, o := range strings.Split(v, ",") {
				name, _, _ := strings.Cut(o, "=")
				if !slices.Contains(tmpfsOpts, strings.TrimSpace(name)) {
					return false
				}
			}
		default:
			return false
		}
	}
	return true
}

func (j *judge) fileObject(subj string, o types.FileObjectConfig) {
	if o.File != "" && !j.inside(o.File) {
		j.invalid(subj, "file", "outside the release directory", o.File)
	}
	if o.Driver != "" {
		j.priv(subj, "driver", "not on the allow-list", o.Driver)
	}
	if o.TemplateDriver != "" {
		j.priv(subj, "template_driver", "not on the allow-list", o.TemplateDriver)
	}
}

// ipam judges a network's address management: the default driver only (any other names a plugin
// dockerd loads), and no address the host must keep. A network's subnet becomes a host route
// into its bridge: one over the tunneller's intercept range takes the agent's plain-HTTP calls
// to tenancy and OpenBao (the bearer token with them) under `transport: system`; one over
// loopback or link-local takes the host's own.
func (j *judge) ipam(subj string, c types.IPAMConfig) {
	if c.Driver != "" && c.Driver != "default" {
		j.priv(subj, "ipam.driver", "only the default IPAM driver is allowed: another is a plugin dockerd loads", c.Driver)
	}
	for i, pool := range c.Config {
		if pool == nil {
			continue
		}
		key := fmt.Sprintf("ipam.config[%d]", i)
		j.hostRange(subj, key+".subnet", pool.Subnet, true)
		j.hostRange(subj, key+".ip_range", pool.IPRange, true)
		j.hostRange(subj, key+".gateway", pool.Gateway, false)
		for _, name := range sortedNames(pool.AuxiliaryAddresses) {
			j.hostRange(subj, key+".aux_addresses."+name, pool.AuxiliaryAddresses[name], false)
		}
	}
}

// hostRange judges one address (or, when isRange, CIDR range) a network takes on the host.
func (j *judge) hostRange(subj, key, v string, isRange bool) {
	if v == "" {
		return
	}
	var p netip.Prefix
	var err error
	if isRange {
		p, err = netip.ParsePrefix(v)
	} else {
		var a netip.Addr
		if a, err = netip.ParseAddr(v); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		}
	}
	if err != nil {
		what := "not an address"
		if isRange {
			what = "not an address range (CIDR)"
		}
		j.invalid(subj, key, what, v)
		return
	}
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		// ::ffff:a.b.c.d/n is the IPv4 range a.b.c.d/(n-96)
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked()
	}
	reserved := append([]struct {
		what   string
		prefix netip.Prefix
	}{{"the tunneller's intercept range", j.host.InterceptRange}}, localRanges...)
	for _, r := range reserved {
		overlaps := p.Overlaps(r.prefix)
		if r.prefix.Addr().Is4() && p.Addr().Is6() && p.Bits() < 96 {
			// a wider IPv6 range may hold the IPv4-mapped form of r
			overlaps = overlaps || p.Overlaps(netip.PrefixFrom(netip.AddrFrom16(r.prefix.Addr().As16()), r.prefix.Bits()+96))
		}
		if overlaps {
			j.priv(subj, key, fmt.Sprintf("overlaps %s (%s): a host route into this network would take the host's own traffic there", r.what, r.prefix), v)
			return
		}
	}
}
