package bundle

import (
	"encoding/json"
	"errors"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/compose-spec/compose-go/v2/types"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle/bundletest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// FuzzParse feeds Parse a bundle's files as a JSON object {"path": "content", …}.
func FuzzParse(f *testing.F) {
	seed := func(files map[string]string) {
		b, err := json.Marshal(files)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(goodFiles())
	seed(map[string]string{"bundle.json": "{}", "docker-compose.yml": ""})
	seed(with(goodFiles(), "../x", ""))
	seed(with(goodFiles(), "manifest.json", `{"entries":[{"var":"A","path":"a","version":2,"use":"registry-auth"},{"var":"A"}]}`))
	seed(with(goodFiles(), "bundle.json", `{"pull":"missing","compose_file":"c/d.yml","agent":{"disk_need_bytes":1e3}}`, "c/d.yml", "x"))
	f.Add([]byte(`{"a/b": "1", "a": "2"}`))

	f.Fuzz(func(t *testing.T, data []byte) {
		var files map[string]string
		if json.Unmarshal(data, &files) != nil || files == nil {
			return
		}
		sha := Sha(files)
		b, err := Parse(files, sha)
		if err != nil {
			var r *protocol.Refusal
			if !errors.As(err, &r) || r.Code != protocol.CodeBundleInvalid || b != nil {
				t.Fatalf("Parse with the right sha: %v (%T), bundle %v", err, err, b != nil)
			}
		} else {
			if b.Sha != sha || len(b.Files) != len(files) {
				t.Fatal("sha or files not carried over")
			}
			if _, ok := b.Files[b.Meta.ComposeFile]; !ok {
				t.Fatalf("compose file %q not in the bundle", b.Meta.ComposeFile)
			}
			if b.Meta.Pull != PullAlways && b.Meta.Pull != PullMissing {
				t.Fatalf("pull %q", b.Meta.Pull)
			}
			for p := range b.Files {
				if badPath(p) != "" {
					t.Fatalf("bad path %q accepted", p)
				}
			}
			seen, registry := map[string]bool{}, 0
			for _, e := range b.Entries {
				switch e.Use {
				case UseEnv:
					if !envName().MatchString(e.Var) {
						t.Fatalf("env entry with var %q", e.Var)
					}
				case UseRegistryAuth:
					registry++
				default:
					t.Fatalf("use %q", e.Use)
				}
				if e.Var != "" && seen[e.Var] {
					t.Fatalf("duplicate var %q", e.Var)
				}
				seen[e.Var] = true
				if e.Version < 0 || e.Key == "" {
					t.Fatalf("entry %+v", e)
				}
			}
			if registry > 1 {
				t.Fatal("two registry entries")
			}
		}
		// a wrong sha never yields a bundle
		if b, err := Parse(files, "0"+sha[1:]+"x"); b != nil || err == nil {
			t.Fatal("wrong sha accepted")
		}
	})
}

// FuzzResolvePath: whatever the manifest says, a resolved path stays strictly under the prefix.
func FuzzResolvePath(f *testing.F) {
	for _, s := range [][2]string{
		{"env-qa-02/see", "gemini_api_key"}, {"env-qa-02/see", "../x"}, {"env-qa-02/see", "a/./../b"},
		{"env-qa-02/see/", "/abs"}, {"", "."}, {"a/../../b", "c"}, {"p", "a//b/"}, {"p", "..."}, {"p", "a\\..\\b"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, prefix, p string) {
		got, err := ResolvePath(prefix, p)
		if err != nil {
			var r *protocol.Refusal
			if !errors.As(err, &r) || r.Code != protocol.CodeManifestPath || got != "" {
				t.Fatalf("ResolvePath(%q, %q) = %q, %v", prefix, p, got, err)
			}
			return
		}
		base := strings.Trim(path.Clean("/"+prefix), "/")
		if base != "" && !strings.HasPrefix(got, base+"/") {
			t.Fatalf("ResolvePath(%q, %q) = %q, not under %q", prefix, p, got, base)
		}
		rest := strings.TrimPrefix(got, base+"/")
		if base == "" {
			rest = got
		}
		if rest == "" || rest == "." || path.Clean(got) != got || strings.HasPrefix(got, "/") {
			t.Fatalf("ResolvePath(%q, %q) = %q", prefix, p, got)
		}
		for _, seg := range strings.Split(rest, "/") {
			if seg == ".." || seg == "." || seg == "" {
				t.Fatalf("ResolvePath(%q, %q) = %q has segment %q", prefix, p, got, seg)
			}
		}
	})
}

// A refusal's detail is made of variable names and fixed reasons only, so no value can leak.
var (
	incompleteDetail = regexp.MustCompile(`^unresolved: [A-Za-z_][A-Za-z0-9_]*(, [A-Za-z_][A-Za-z0-9_]*)*$`)
	unsafeReason     = `(contains a NUL byte|contains a carriage return|not valid UTF-8|inside a longer value, and not plain|cannot be written so that docker compose reads it back unchanged)`
	unsafeDetail     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]* \(` + unsafeReason + `\)(, [A-Za-z_][A-Za-z0-9_]* \(` + unsafeReason + `\))*$`)
)

// FuzzRenderEnv renders an arbitrary template with two values (never panics, never leaks), and
// the same values through a fixed template whose output must read back to exactly the values.
func FuzzRenderEnv(f *testing.F) {
	f.Add("A=${A}\nB=${B}\n", "plain", "it's a \"mix\" of $ and \\ and\nlines")
	f.Add("# ${NOPE}\nURL=https://${A}/${B}", "host", "")
	f.Add("X=${A} # c\n'${B}'\"${A}\"", " ", "#")
	f.Add("$${A}${C}", "\x00", "\r")
	f.Add("A='${A}'", "\xff", "'\\'")
	f.Fuzz(func(t *testing.T, template, a, b string) {
		values := vals("A", a, "B", b)
		checkRender(t, template, values)

		whole := "# header ${A} ${NOPE}\nA=${A}\nexport D = \"${A}\" # again\nB=${B}\nE: ${B}\nF='${A}'\n"
		readsBack(t, whole, values, map[string]string{"A": a, "D": a, "F": a, "B": b, "E": b})
		readsBack(t, "URL=x-${A}/${B}\n", values, map[string]string{"URL": "x-" + a + "/" + b})
	})
}

// readsBack renders template and, when that succeeds, checks what the reader makes of it.
func readsBack(t *testing.T, template string, values map[string]secret.Value, want map[string]string) {
	t.Helper()
	out, err := checkRender(t, template, values)
	if err != nil {
		return
	}
	read, perr := dotenv.UnmarshalWithLookup(out, nil)
	if perr != nil {
		t.Fatalf("rendered .env %q does not read back: %v", out, perr)
	}
	for k, w := range want {
		if read[k] != w {
			t.Fatalf("%s read back as %q, want %q (from %q)", k, read[k], w, out)
		}
	}
}

func checkRender(t *testing.T, template string, values map[string]secret.Value) (string, error) {
	t.Helper()
	out, err := RenderEnv(template, values)
	if err == nil {
		return out, nil
	}
	var r *protocol.Refusal
	if !errors.As(err, &r) || out != "" {
		t.Fatalf("RenderEnv: %v (%T), output %q", err, err, out)
	}
	switch r.Code {
	case protocol.CodeEnvIncomplete:
		if !incompleteDetail.MatchString(r.Detail) {
			t.Fatalf("ENV_INCOMPLETE detail %q", r.Detail)
		}
	case protocol.CodeEnvUnsafeValue:
		if !unsafeDetail.MatchString(r.Detail) {
			t.Fatalf("ENV_UNSAFE_VALUE detail %q", r.Detail)
		}
	default:
		t.Fatalf("code %s", r.Code)
	}
	return "", err
}

// FuzzJudge is the differential check of the privilege gate: whatever the input, if compose-go
// loads it and the judgement accepts it without allow_privileged, then no service of the
// loaded model has a setting that reaches the host. hostReaching is that invariant, written
// once and independently of the policy's allow-list.
func FuzzJudge(f *testing.F) {
	for _, c := range bundletest.BypassClasses() {
		f.Add([]byte(c.Compose))
	}
	files, _ := filepath.Glob("testdata/compose/*.yml")
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("services: {a: {image: x, volumes: [7]}}"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j := Judgement{Compose: data, File: "dc.yml", ReleaseDir: rel, Project: project, Env: map[string]string{"KNOWN": "/"}, WithValues: true}
		err := j.Verdict(false)
		if err != nil {
			var r *protocol.Refusal
			if !errors.As(err, &r) || (r.Code != protocol.CodeBundleInvalid && r.Code != protocol.CodePrivileged) {
				t.Fatalf("Verdict = %v, want nil or a refusal", err)
			}
			if len(r.Error()) > MaxFindingsDetail+len(j.File)+200 {
				t.Fatalf("detail of %d bytes", len(r.Error()))
			}
			return
		}
		p, err := j.load()
		if err != nil {
			t.Fatalf("accepted, but does not load: %v", err)
		}
		if bad := hostReaching(p, rel, j.File); len(bad) > 0 {
			t.Fatalf("accepted a file that reaches the host: %q\n%s", bad, data)
		}
	})
}

// hostReaching lists what in p reaches outside its containers: the invariant FuzzJudge holds
// the policy to.
func hostReaching(p *types.Project, release, composeFile string) []string {
	var out []string
	add := func(svc, what string) { out = append(out, svc+": "+what) }
	outside := func(path string) bool {
		c := filepath.Clean(path)
		return !filepath.IsAbs(c) || (c != release && !strings.HasPrefix(c, release+"/"))
	}
	hostCaps := map[string]bool{"ALL": true, "SYS_ADMIN": true, "SYS_MODULE": true, "SYS_RAWIO": true, "SYS_PTRACE": true,
		"DAC_READ_SEARCH": true, "SYS_TIME": true, "SYS_BOOT": true, "MAC_ADMIN": true, "MAC_OVERRIDE": true, "BPF": true,
		"PERFMON": true, "SYSLOG": true, "SYS_RESOURCE": true, "AUDIT_CONTROL": true, "LINUX_IMMUTABLE": true, "SYS_NICE": true}
	all := map[string]types.ServiceConfig{}
	maps.Copy(all, p.Services)
	maps.Copy(all, p.DisabledServices)
	for name, s := range all {
		if s.Privileged {
			add(name, "privileged")
		}
		if len(s.Devices)+len(s.DeviceCgroupRules)+len(s.Gpus) > 0 || s.UseAPISocket || s.CgroupParent != "" {
			add(name, "devices, engine or cgroup")
		}
		for _, m := range []string{s.NetworkMode, s.Net, s.Pid, s.Ipc, s.Uts, s.UserNSMode, s.Cgroup} {
			if m == "host" || strings.HasPrefix(m, "container:") {
				add(name, "namespace "+m)
			}
		}
		for _, c := range s.CapAdd {
			if hostCaps[strings.TrimPrefix(strings.ToUpper(c), "CAP_")] {
				add(name, "cap "+c)
			}
		}
		for _, o := range s.SecurityOpt {
			lo := strings.ToLower(o)
			if strings.Contains(lo, "unconfined") || strings.HasPrefix(lo, "label") || (strings.HasPrefix(lo, "seccomp") && !strings.HasSuffix(lo, "builtin")) {
				add(name, "security_opt "+o)
			}
		}
		for k := range s.Sysctls {
			if !strings.HasPrefix(k, "net.") {
				add(name, "sysctl "+k)
			}
		}
		for _, h := range append(slices.Clone(s.PostStart), s.PreStop...) {
			if h.Privileged {
				add(name, "privileged hook")
			}
		}
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeBind:
				// the host's time zone, read-only and nothing more, is what a container may know
				tz := (filepath.Clean(v.Source) == "/etc/localtime" || filepath.Clean(v.Source) == "/etc/timezone") &&
					v.ReadOnly && (v.Bind == nil || v.Bind.SELinux == "" && v.Bind.Recursive == "")
				if outside(v.Source) && !tz {
					add(name, "bind "+v.Source)
				}
			case types.VolumeTypeVolume:
				if v.Source == "" {
					continue
				}
				tv := p.Volumes[v.Source]
				if bool(tv.External) || (tv.Driver != "" && tv.Driver != "local") || tv.DriverOpts["device"] != "" && tv.DriverOpts["device"] != "tmpfs" ||
					strings.Contains(tv.DriverOpts["o"], "bind") {
					add(name, "volume "+v.Source)
				}
			}
		}
		for _, v := range s.Volumes {
			// a writable bind of the release's own files: a revert would run what a container wrote
			if v.Type != types.VolumeTypeBind || v.ReadOnly {
				continue
			}
			for _, f := range []string{composeFile, ".env", "bundle.json"} {
				if f := filepath.Join(release, f); f == filepath.Clean(v.Source) || strings.HasPrefix(f, filepath.Clean(v.Source)+"/") {
					add(name, "writable bind of the release's "+f)
				}
			}
		}
		if s.Logging != nil && s.Logging.Driver != "" && s.Logging.Driver != "json-file" && s.Logging.Driver != "local" && s.Logging.Driver != "none" {
			add(name, "logging driver "+s.Logging.Driver)
		}
		if s.Logging != nil {
			for o := range s.Logging.Options {
				if strings.Contains(o, "address") || strings.Contains(o, "url") || strings.Contains(o, "socket") || strings.Contains(o, "endpoint") {
					add(name, "logging option "+o)
				}
			}
		}
		if s.OomScoreAdj < 0 || s.OomKillDisable {
			add(name, "the host's OOM killer")
		}
		for _, e := range s.EnvFiles {
			if outside(e.Path) {
				add(name, "env_file "+e.Path)
			}
		}
	}
	// a bind strictly inside another, writable bind: a container can plant a symlink there
	var writable, binds []string
	for _, s := range all {
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				binds = append(binds, filepath.Clean(v.Source))
				if !v.ReadOnly {
					writable = append(writable, filepath.Clean(v.Source))
				}
			}
		}
	}
	for _, w := range writable {
		for _, b := range binds {
			if b != w && strings.HasPrefix(b, strings.TrimSuffix(w, "/")+"/") {
				add("bind "+b, "inside writable "+w)
			}
		}
	}
	for n, nw := range p.Networks {
		if bool(nw.External) && (nw.Name == "host" || n == "host" && nw.Name == "") {
			add("network "+n, "host")
		}
		if bool(nw.External) {
			continue
		}
		if nw.Ipam.Driver != "" && nw.Ipam.Driver != "default" {
			add("network "+n, "ipam driver "+nw.Ipam.Driver)
		}
		for _, pool := range nw.Ipam.Config {
			if pool == nil {
				continue
			}
			addrs := []string{pool.Subnet, pool.IPRange, pool.Gateway}
			for _, a := range pool.AuxiliaryAddresses {
				addrs = append(addrs, a)
			}
			for _, a := range addrs {
				if a != "" && hostRoute(a) {
					add("network "+n, "a route over the host's own addresses: "+a)
				}
			}
		}
	}
	for n, s := range p.Secrets {
		if s.File != "" && outside(s.File) {
			add("secret "+n, s.File)
		}
	}
	for n, c := range p.Configs {
		if c.File != "" && outside(c.File) {
			add("config "+n, c.File)
		}
	}
	return out
}

// hostRoute reports whether a subnet or address a network takes (any text compose passes on)
// could put a host route over the intercept range, loopback or link-local, read with package
// net rather than the policy's netip: an address or range that does not parse counts.
func hostRoute(a string) bool {
	_, n, err := net.ParseCIDR(a)
	if err != nil {
		ip := net.ParseIP(a)
		if ip == nil {
			return true
		}
		n = &net.IPNet{IP: ip, Mask: net.CIDRMask(len(ip)*8, len(ip)*8)}
	}
	for _, r := range []string{"100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "::1/128", "fe80::/10", "::ffff:100.64.0.0/106", "::ffff:127.0.0.0/104", "::ffff:169.254.0.0/112"} {
		_, rn, _ := net.ParseCIDR(r)
		if n.Contains(rn.IP) || rn.Contains(n.IP) {
			return true
		}
	}
	return false
}
