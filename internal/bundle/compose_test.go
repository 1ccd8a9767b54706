package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
)

const (
	rel     = "/var/lib/monky-deployd/env-qa-02/releases/7a10"
	project = "monky-env-qa-02"
)

// svc wraps service-level YAML (indented by 4) into a compose file with one service "api".
func svc(body string) string {
	return "services:\n  api:\n    image: harbor.tikali.net/monky/api:1\n" + body
}

// composeBundle is the smallest bundle around one compose file.
func composeBundle(file, compose string, allow bool, template string) *Bundle {
	if file == "" {
		file = DefaultComposeFile
	}
	b := &Bundle{
		Files:       map[string]string{file: compose},
		Meta:        Meta{ComposeFile: file, Agent: Agent{AllowPrivileged: allow}},
		EnvTemplate: template,
	}
	if template != "" {
		b.Entries = []Entry{{Var: "SECRET", Path: "s", Key: DefaultKey, Use: UseEnv}}
	}
	return b
}

// BypassClass is one way a hostile bundle author tried to take the host over, as the smallest
// bundle that shows it. The agent's tick test runs the same table through the whole tick.
type BypassClass struct {
	Name     string
	File     string // compose_file; "" = docker-compose.yml
	Compose  string
	Template string // .env.template; SECRET is a secret variable when set
	Code     string
	Want     string // in the detail
}

// BypassClasses lists every class of issue 10; exported to the agent's tests via testdata-free
// code so both tables stay one.
func BypassClasses() []BypassClass {
	bind := func(src string) string { return svc(fmt.Sprintf("    volumes: [%q]\n", src+":/x")) }
	var out []BypassClass
	add := func(name, code, want, compose string) {
		out = append(out, BypassClass{Name: name, Compose: compose, Code: code, Want: want})
	}
	P, I := protocol.CodePrivileged, protocol.CodeBundleInvalid
	add("a second YAML document", P, "api: privileged", svc("")+"---\nservices:\n  api:\n    privileged: true\n")
	out = append(out, BypassClass{Name: "compose file in a subdirectory leaving by ../..", File: "a/b/dc.yml",
		Compose: bind("../.."), Code: P, Want: "api: volumes[0]: bind source outside the release"})
	add("volume type from a variable", I, "api: volumes: holds a variable",
		svc("    volumes:\n      - type: \"${T:-bind}\"\n        source: /\n        target: /host\n"))
	add("driver_opts from a variable", I, "volume v: driver_opts: holds a variable",
		svc("    volumes: [\"v:/v\"]\n")+"volumes:\n  v:\n    driver_opts: {type: none, o: \"${O}\", device: /}\n")
	out = append(out, BypassClass{Name: "bind from a secret variable", Compose: bind("${SECRET}"),
		Template: "SECRET=${SECRET}\n", Code: I, Want: "api: volumes: holds a variable"})
	for _, p := range []string{"/var/lib/docker", "/boot", "/usr", "/lib/modules", "/home", "/var/spool/cron",
		"/run/containerd/containerd.sock", "/run/dbus/system_bus_socket", "/opt/openziti", "/var/lib/monky-deployd",
		"/etc/monky-deployd", "/", "/var/run/docker.sock", "/etc", "/root", "/proc", "/sys", "/tmp", "/srv/app"} {
		add("bind of "+p, P, "bind source outside the release directory ("+p+")", bind(p))
	}
	add("bind of the release's parent", P, "bind source outside", bind(".."))
	add("bind under ~", P, "bind source outside", bind("~/.ssh"))
	add("named volume binding the host", P, "volume root: driver_opts: mounts host storage",
		svc("    volumes: [\"root:/host\"]\n")+"volumes:\n  root:\n    driver: local\n    driver_opts: {type: none, o: bind, device: /}\n")
	add("named volume of another driver", P, "volume v: driver: only the local driver",
		svc("    volumes: [\"v:/v\"]\n")+"volumes:\n  v:\n    driver: rexray\n")
	add("named volume reaching another project's volume", P, "volume v: name: names a volume outside this project",
		svc("    volumes: [\"v:/v\"]\n")+"volumes:\n  v:\n    name: monky-env-prod-01_pgdata\n")
	add("external volume", P, "volume v: external", svc("    volumes: [\"v:/v\"]\n")+"volumes:\n  v:\n    external: true\n")
	add("secret file outside the release", I, "secret s: file: outside the release directory (/etc/shadow)",
		svc("    secrets: [s]\n")+"secrets:\n  s:\n    file: /etc/shadow\n")
	add("config file outside the release", I, "config c: file: outside the release directory",
		svc("    configs: [c]\n")+"configs:\n  c:\n    file: ../../c\n")
	for _, c := range []string{"SYS_MODULE", "SYS_RAWIO", "DAC_READ_SEARCH", "SYS_PTRACE", "cap_sys_module", "CAP_SYS_MODULE", "ALL", "SYS_ADMIN", "sys_time"} {
		add("cap_add "+c, P, "api: cap_add: capability not on the allow-list ("+c+")", svc("    cap_add: ["+c+"]\n"))
	}
	add("seccomp profile from a file", P, "api: security_opt: not on the allow-list (no-new-privileges, apparmor=NAME, seccomp=builtin) (seccomp=./allow-all.json)",
		svc("    security_opt: [\"seccomp=./allow-all.json\"]\n"))
	add("seccomp unconfined", P, "security_opt", svc("    security_opt: [\"seccomp:unconfined\"]\n"))
	add("apparmor unconfined", P, "security_opt", svc("    security_opt: [\"apparmor=unconfined\"]\n"))
	add("selinux label disable", P, "security_opt", svc("    security_opt: [\"label=disable\"]\n"))
	add("device_cgroup_rules", P, "api: device_cgroup_rules: reaches host devices", svc("    device_cgroup_rules: [\"c 1:3 mr\"]\n"))
	add("gpus", P, "api: gpus: reaches host devices", svc("    gpus: all\n"))
	add("devices", P, "api: devices: reaches host devices", svc("    devices: [\"/dev/sda:/dev/sda\"]\n"))
	add("deploy device reservations", P, "deploy.resources.reservations.devices",
		svc("    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [gpu]\n"))
	add("post_start hook privileged", P, "api: post_start[0].privileged", svc("    post_start:\n      - command: [sh]\n        privileged: true\n"))
	add("pre_stop hook privileged", P, "api: pre_stop[0].privileged", svc("    pre_stop:\n      - command: [sh]\n        privileged: true\n"))
	add("privileged", P, "api: privileged: the whole host", svc("    privileged: true\n"))
	add("volumes_from a container outside", P, "api: volumes_from[0]", svc("    volumes_from: [\"container:monky-deployd-other\"]\n"))
	add("network_mode host", P, "api: network_mode", svc("    network_mode: host\n"))
	add("network_mode of a container outside", P, "api: network_mode", svc("    network_mode: \"container:other\"\n"))
	add("pid host", P, "api: pid", svc("    pid: host\n"))
	add("pid of a container outside", P, "api: pid", svc("    pid: \"container:other\"\n"))
	add("ipc host", P, "api: ipc", svc("    ipc: host\n"))
	add("ipc of a container outside", P, "api: ipc", svc("    ipc: \"container:other\"\n"))
	add("userns_mode host", P, "api: userns_mode", svc("    userns_mode: host\n"))
	add("uts host", P, "api: uts", svc("    uts: host\n"))
	add("cgroup host", P, "api: cgroup", svc("    cgroup: host\n"))
	add("cgroup_parent", P, "api: cgroup_parent", svc("    cgroup_parent: /system.slice\n"))
	add("external network named host", P, "network hostnet: external: the host's network",
		svc("    networks: [hostnet]\n")+"networks:\n  hostnet:\n    name: host\n    external: true\n")
	add("macvlan network", P, "network lan: driver", svc("    networks: [lan]\n")+"networks:\n  lan:\n    driver: macvlan\n")
	add("label_file outside the release", I, "api: label_file[0]: outside the release directory", svc("    label_file: /etc/labels\n"))
	add("env_file outside the release", I, "api: env_file[0]: outside the release directory", svc("    env_file: ../../x.env\n"))
	add("build", I, "api: build", svc("    build: .\n"))
	add("include", I, "(file): include", "include: [/etc/other.yml]\n"+svc(""))
	add("extends.file", I, "api: extends.file", svc("    extends: {file: /etc/x.yml, service: y}\n"))
	add("sysctl outside net", P, "api: sysctls: only the namespaced net.* sysctls are allowed (kernel.core_pattern)", svc("    sysctls: {kernel.core_pattern: \"|/x\"}\n"))
	add("use_api_socket", P, "api: use_api_socket", svc("    use_api_socket: true\n"))
	add("a runtime other than runc", P, "api: runtime", svc("    runtime: sysbox-runc\n"))
	add("bind propagation to the host", P, "bind.propagation", svc("    volumes:\n      - type: bind\n        source: ./x\n        target: /x\n        bind: {propagation: rshared}\n"))
	add("privileged hidden behind a merge key", P, "api: privileged", "x-a: &a\n  privileged: true\n"+svc("    <<: *a\n"))
	add("privileged hidden in an extended service", P, "api: privileged",
		"services:\n  base:\n    image: x\n    privileged: true\n    profiles: [never]\n  api:\n    image: y\n    extends: base\n")
	add("privileged in a profile", P, "tool: privileged", svc("")+"  tool:\n    image: x\n    profiles: [debug]\n    privileged: true\n")
	return out
}

func TestJudgeRefusesEveryBypassClass(t *testing.T) {
	for _, c := range BypassClasses() {
		t.Run(c.Name, func(t *testing.T) {
			b := composeBundle(c.File, c.Compose, false, c.Template)
			assertRefusal(t, b.Check(rel, project), c.Code, c.Want)
		})
	}
}

func TestJudgeAllowPrivileged(t *testing.T) {
	for _, c := range BypassClasses() {
		t.Run(c.Name, func(t *testing.T) {
			err := composeBundle(c.File, c.Compose, true, c.Template).Check(rel, project)
			if c.Code == protocol.CodePrivileged {
				if err != nil {
					t.Fatalf("allow_privileged: %v", err)
				}
				return
			}
			assertRefusal(t, err, c.Code, c.Want) // never allowed, whatever the flag
		})
	}
}

func TestJudgeAcceptsRealWorldFiles(t *testing.T) {
	files, err := filepath.Glob("testdata/compose/*.yml")
	if err != nil || len(files) < 12 {
		t.Fatalf("fixtures: %v %d", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b := composeBundle("", string(data), false, "DB_PASSWORD=${SECRET}\nMYSQL_ROOT_PASSWORD=${SECRET}\nMINIO_ROOT_PASSWORD=${SECRET}\nTAG=1.2\n")
			if err := b.Check(rel, project); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

func TestJudgeDetails(t *testing.T) {
	t.Run("every finding listed, invalid before privileged", func(t *testing.T) {
		err := composeBundle("", svc("    privileged: true\n    build: .\n    env_file: /e\n"), false, "").Check(rel, project)
		assertRefusal(t, err, protocol.CodeBundleInvalid, "docker-compose.yml: 2 finding(s): api: build: the box builds nothing")
		if strings.Contains(err.Error(), "privileged") {
			t.Errorf("detail %q lists privileged findings with invalid ones", err)
		}
	})
	t.Run("many findings are cut at 4 KiB with a count", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("services:\n")
		for i := range 2000 {
			fmt.Fprintf(&b, "  s%d: {image: x, privileged: true}\n", i)
		}
		err := composeBundle("", b.String(), false, "").Check(rel, project)
		assertRefusal(t, err, protocol.CodePrivileged, "2000 finding(s)")
		if len(err.Error()) > MaxFindingsDetail {
			t.Errorf("detail is %d bytes", len(err.Error()))
		}
		if !strings.Contains(err.Error(), " more") {
			t.Errorf("detail does not count what it left out: …%s", err.Error()[len(err.Error())-60:])
		}
	})
	t.Run("a file compose does not load names where", func(t *testing.T) {
		err := composeBundle("", svc("    volumes: [7]\n"), false, "").Check(rel, project)
		assertRefusal(t, err, protocol.CodeBundleInvalid, "docker-compose.yml does not load as compose loads it")
	})
	t.Run("post-render details name keys, never values", func(t *testing.T) {
		j := Judgement{Compose: []byte(svc("    volumes: [\"/etc/s3cr3t-path:/x\"]\n")), File: "dc.yml", ReleaseDir: rel, Project: project, Stage: "rendered: "}
		err := j.Verdict(false)
		assertRefusal(t, err, protocol.CodePrivileged, "rendered: dc.yml: 1 finding(s) (bundle.json agent.allow_privileged is not set): api: volumes[0]: bind source outside")
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("detail %q carries a value", err)
		}
	})
	t.Run("relative release directory is the caller's error", func(t *testing.T) {
		err := composeBundle("", svc(""), false, "").Check("releases/x", project)
		var r *protocol.Refusal
		if err == nil || errors.As(err, &r) {
			t.Errorf("Check = %v, want a plain error", err)
		}
	})
}

func TestJudgeBoundedCost(t *testing.T) {
	t.Run("past 1 MiB refused before decoding", func(t *testing.T) {
		big := svc("") + "x-pad: \"" + strings.Repeat("a", MaxComposeBytes) + "\"\n"
		assertRefusal(t, composeBundle("", big, false, "").Check(rel, project), protocol.CodeBundleInvalid, "the limit is 1048576 (1 MiB)")
	})
	t.Run("one mapping of many keys refused before the quadratic key check", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(svc("") + "x-keys:\n")
		for i := 0; b.Len() < MaxComposeBytes-20; i++ {
			fmt.Fprintf(&b, "  k%d: 1\n", i)
		}
		assertRefusal(t, composeBundle("", b.String(), false, "").Check(rel, project), protocol.CodeBundleInvalid, "mappings of too many keys")
	})
	t.Run("a 1 MiB file of many services is judged", func(t *testing.T) {
		data := manyServices(MaxComposeBytes)
		if err := composeBundle("", data, false, "").Check(rel, project); err != nil {
			t.Fatalf("refused: %.300v", err)
		}
	})
	t.Run("past the node cap refused before decoding", func(t *testing.T) {
		var b strings.Builder
		b.WriteString(svc("    command:\n"))
		for range maxComposeNodes {
			b.WriteString("      - x\n")
		}
		assertRefusal(t, composeBundle("", b.String(), false, "").Check(rel, project), protocol.CodeBundleInvalid, "has more than 30000 YAML nodes")
	})
	t.Run("aliases of aliases are bounded", func(t *testing.T) {
		doc := "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\n" +
			"services:\n  api:\n    image: x\n    command: *f\n"
		assertRefusal(t, composeBundle("", doc, false, "").Check(rel, project), protocol.CodeBundleInvalid, "")
	})
}

// manyServices is a compose file of about size bytes: services of the size people write
// (an image, a restart policy, a logging anchor, two dozen settings in environment and labels),
// one after another.
func manyServices(size int) string {
	var b strings.Builder
	b.WriteString("x-log: &log\n  driver: json-file\n  options: {max-size: 10m}\nservices:\n")
	for i := 0; ; i++ {
		var s strings.Builder
		fmt.Fprintf(&s, "  svc%d:\n    image: registry.example.net/team/service-%d:1.%d.0\n    restart: unless-stopped\n    logging: *log\n", i, i, i)
		fmt.Fprintf(&s, "    ports: [\"%d:8080\"]\n    volumes: [\"./conf/svc%d:/etc/app:ro\", \"data%d:/var/lib/app\"]\n    environment:\n", 10000+i%50000, i, i%3)
		for k := range 16 {
			fmt.Fprintf(&s, "      SETTING_%02d: \"https://internal-%d.service.example.net:8443/api/v2/resource/%d?mode=fast&"+
				"fallback=https://backup-%d.service.example.net:8443/api/v2/resource/%d&timeout=30s&retries=5\"\n", k, i, k, i, k)
		}
		s.WriteString("    labels:\n")
		for k := range 4 {
			fmt.Fprintf(&s, "      com.example.team.label-%d: \"a label value of a realistic length for service %d\"\n", k, i)
		}
		if b.Len()+s.Len()+40 > size {
			break
		}
		b.WriteString(s.String())
	}
	b.WriteString("volumes: {data0: {}, data1: {}, data2: {}}\n")
	return b.String()
}

// BenchmarkJudge is the pre-lease judgement (load + policy) of a typical 5-service compose file
// and of a 1 MiB one; the agent's benchmark adds the post-render judgement with the real
// `docker compose config` process.
func BenchmarkJudge(b *testing.B) {
	typical, err := os.ReadFile("testdata/compose/03-nginx-app.yml")
	if err != nil {
		b.Fatal(err)
	}
	typical = append(typical, []byte(strings.TrimPrefix(mustRead(b, "testdata/compose/04-redis-worker.yml"), "services:\n"))...)
	for _, c := range []struct {
		name string
		data string
	}{{"typical-5-services", strings.Replace(string(typical), "volumes:\n  dbdata: {}\n", "", 1) + "  dbdata: {}\n"}, {"1MiB", manyServices(MaxComposeBytes)}} {
		bu := composeBundle("", c.data, false, "DB_PASSWORD=${SECRET}\n")
		if err := bu.Check(rel, project); err != nil {
			b.Fatalf("%s refused: %.300v", c.name, err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.data)))
			for b.Loop() {
				if err := bu.Check(rel, project); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mustRead(tb testing.TB, p string) string {
	tb.Helper()
	d, err := os.ReadFile(p)
	if err != nil {
		tb.Fatal(err)
	}
	return string(d)
}
