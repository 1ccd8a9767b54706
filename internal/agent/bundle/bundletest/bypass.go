// Package bundletest holds the compose files that tried to take a box over, shared by the
// bundle package's judgement tests and the agent's tick tests (one table, judged twice).
package bundletest

import (
	"fmt"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Svc wraps service-level YAML (indented by 4) into a compose file with one service "api".
func Svc(body string) string {
	return "services:\n  api:\n    image: harbor.tikali.net/monky/api:1\n" + body
}

// BypassClass is one way a hostile bundle author tried to take the host over, as the smallest
// bundle that shows it. The agent's tick test runs the same table through the whole tick.
type BypassClass struct {
	Name     string
	File     string // compose_file; "" = docker-compose.yml
	Compose  string
	Template string // .env.template when it matters; DB_PASSWORD is a secret variable
	Code     string
	Want     string // in the detail
}

// BypassClasses lists every class of issue 10, each the smallest compose file that shows it.
func BypassClasses() []BypassClass {
	bind := func(src string) string { return Svc(fmt.Sprintf("    volumes: [%q]\n", src+":/x")) }
	var out []BypassClass
	add := func(name, code, want, compose string) {
		out = append(out, BypassClass{Name: name, Compose: compose, Code: code, Want: want})
	}
	P, I := protocol.CodePrivileged, protocol.CodeBundleInvalid
	add("a second YAML document", P, "api: privileged", Svc("")+"---\nservices:\n  api:\n    privileged: true\n")
	out = append(out, BypassClass{Name: "compose file in a subdirectory leaving by ../..", File: "a/b/dc.yml",
		Compose: bind("../.."), Code: P, Want: "api: volumes[0]: bind source outside the release"})
	add("volume type from a variable", I, "api: volumes: holds a variable",
		Svc("    volumes:\n      - type: \"${T:-bind}\"\n        source: /\n        target: /host\n"))
	add("driver_opts from a variable", I, "volume vol: driver_opts: holds a variable",
		Svc("    volumes: [\"vol:/v\"]\n")+"volumes:\n  vol:\n    driver_opts: {type: none, o: \"${O}\", device: /}\n")
	out = append(out, BypassClass{Name: "bind from a secret variable", Compose: bind("${DB_PASSWORD}"),
		Template: "DB_PASSWORD=${DB_PASSWORD}\n", Code: I, Want: "api: volumes: holds a variable"})
	for _, p := range []string{"/var/lib/docker", "/boot", "/usr", "/lib/modules", "/home", "/var/spool/cron",
		"/run/containerd/containerd.sock", "/run/dbus/system_bus_socket", "/opt/openziti", "/var/lib/monky-deployd",
		"/etc/monky-deployd", "/", "/var/run/docker.sock", "/etc", "/root", "/proc", "/sys", "/tmp", "/srv/app"} {
		add("bind of "+p, P, "bind source outside the release directory ("+p+")", bind(p))
	}
	add("bind of the release's parent", P, "bind source outside", bind(".."))
	add("bind under ~", P, "bind source outside", bind("~/.ssh"))
	add("named volume binding the host", P, "volume root: driver_opts: mounts host storage",
		Svc("    volumes: [\"root:/host\"]\n")+"volumes:\n  root:\n    driver: local\n    driver_opts: {type: none, o: bind, device: /}\n")
	add("named volume of another driver", P, "volume vol: driver: only the local driver",
		Svc("    volumes: [\"vol:/v\"]\n")+"volumes:\n  vol:\n    driver: rexray\n")
	add("named volume reaching another project's volume", P, "volume vol: name: names a volume outside this project",
		Svc("    volumes: [\"vol:/v\"]\n")+"volumes:\n  vol:\n    name: monky-env-prod-01_pgdata\n")
	add("external volume", P, "volume vol: external", Svc("    volumes: [\"vol:/v\"]\n")+"volumes:\n  vol:\n    external: true\n")
	add("secret file outside the release", I, "secret s: file: outside the release directory (/etc/shadow)",
		Svc("    secrets: [s]\n")+"secrets:\n  s:\n    file: /etc/shadow\n")
	add("config file outside the release", I, "config c: file: outside the release directory",
		Svc("    configs: [c]\n")+"configs:\n  c:\n    file: ../../c\n")
	for _, c := range []string{"SYS_MODULE", "SYS_RAWIO", "DAC_READ_SEARCH", "SYS_PTRACE", "cap_sys_module", "CAP_SYS_MODULE", "ALL", "SYS_ADMIN", "sys_time"} {
		add("cap_add "+c, P, "api: cap_add: capability not on the allow-list ("+c+")", Svc("    cap_add: ["+c+"]\n"))
	}
	add("seccomp profile from a file", P, "api: security_opt: not on the allow-list (no-new-privileges, apparmor=NAME, seccomp=builtin) (seccomp=./allow-all.json)",
		Svc("    security_opt: [\"seccomp=./allow-all.json\"]\n"))
	// One service-level setting each (indented by 4 under api).
	for _, r := range []struct{ name, want, setting string }{
		{"seccomp unconfined", "security_opt", `security_opt: ["seccomp:unconfined"]`},
		{"apparmor unconfined", "security_opt", `security_opt: ["apparmor=unconfined"]`},
		{"selinux label disable", "security_opt", `security_opt: ["label=disable"]`},
		{"device_cgroup_rules", "api: device_cgroup_rules: reaches host devices", `device_cgroup_rules: ["c 1:3 mr"]`},
		{"gpus", "api: gpus: reaches host devices", "gpus: all"},
		{"devices", "api: devices: reaches host devices", `devices: ["/dev/sda:/dev/sda"]`},
		{"privileged", "api: privileged: the whole host", "privileged: true"},
		{"volumes_from a container outside", "api: volumes_from[0]", `volumes_from: ["container:monky-deployd-other"]`},
		{"cgroup_parent", "api: cgroup_parent", "cgroup_parent: /system.slice"},
	} {
		add(r.name, P, r.want, Svc("    "+r.setting+"\n"))
	}
	add("deploy devices from a variable", I, "api: deploy: holds a variable",
		Svc("    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [\"${CAP}\"]\n"))
	add("deploy device reservations", P, "deploy.resources.reservations.devices",
		Svc("    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [gpu]\n"))
	for _, hook := range []string{"post_start", "pre_stop"} {
		add(hook+" hook privileged", P, "api: "+hook+"[0].privileged", Svc("    "+hook+":\n      - command: [sh]\n        privileged: true\n"))
	}
	add("volumes_from a container outside, a service named container", P, "api: volumes_from[0]",
		Svc("    volumes_from: [\"container:other\"]\n")+"  container:\n    image: x\n")
	// `container:db` is the host's container named db, never the service db beside it.
	add("volumes_from container: naming a service of this project", P, "api: volumes_from[0]",
		Svc("    volumes_from: [\"container:db\"]\n")+"  db:\n    image: x\n")
	// The host's namespaces, and another container's.
	for _, ns := range []string{"network_mode", "pid", "ipc", "userns_mode", "uts", "cgroup"} {
		add(ns+" host", P, "api: "+ns, Svc("    "+ns+": host\n"))
	}
	for _, ns := range []string{"network_mode", "pid", "ipc"} {
		add(ns+" of a container outside", P, "api: "+ns, Svc("    "+ns+": \"container:other\"\n"))
	}
	add("external network named host", P, "network hostnet: external: the host's network",
		Svc("    networks: [hostnet]\n")+"networks:\n  hostnet:\n    name: host\n    external: true\n")
	add("macvlan network", P, "network lan: driver", Svc("    networks: [lan]\n")+"networks:\n  lan:\n    driver: macvlan\n")
	add("label_file outside the release", I, "api: label_file[0]: outside the release directory", Svc("    label_file: /etc/labels\n"))
	add("env_file outside the release", I, "api: env_file[0]: outside the release directory", Svc("    env_file: ../../x.env\n"))
	add("build", I, "api: build", Svc("    build: .\n"))
	add("include", I, "(file): include", "include: [/etc/other.yml]\n"+Svc(""))
	add("extends.file", I, "api: extends.file", Svc("    extends: {file: /etc/x.yml, service: y}\n"))
	add("sysctl outside net", P, "api: sysctls: only the namespaced net.* sysctls are allowed (kernel.core_pattern)", Svc("    sysctls: {kernel.core_pattern: \"|/x\"}\n"))
	add("use_api_socket", P, "api: use_api_socket", Svc("    use_api_socket: true\n"))
	add("a runtime other than runc", P, "api: runtime", Svc("    runtime: sysbox-runc\n"))
	add("bind propagation to the host", P, "bind.propagation", Svc("    volumes:\n      - type: bind\n        source: ./x\n        target: /x\n        bind: {propagation: rshared}\n"))
	add("privileged hidden behind a merge key", P, "api: privileged", "x-a: &a\n  privileged: true\n"+Svc("    <<: *a\n"))
	add("privileged hidden in an extended service", P, "api: privileged",
		"services:\n  base:\n    image: x\n    privileged: true\n    profiles: [never]\n  api:\n    image: y\n    extends: base\n")
	add("privileged in a profile", P, "tool: privileged", Svc("")+"  tool:\n    image: x\n    profiles: [debug]\n    privileged: true\n")
	add("a bind inside another service's writable bind (a planted symlink)", P, "b: volumes[0]: inside a writable bind of api (volumes[0])",
		Svc("    volumes: [\"./shared:/shared\"]\n")+"  b:\n    image: x\n    volumes: [\"./shared/evil:/host:ro\"]\n")
	add("the release bound writable, a config file inside it", P, "config c: file: inside a writable bind of api",
		Svc("    volumes: [\".:/app\"]\n    configs: [c]\n")+"configs:\n  c:\n    file: ./conf/c.json\n")
	for _, src := range []string{".", "./", "./sub/.."} {
		add("the release bound writable ("+src+")", P, "api: volumes[0]: writable bind of the release directory", bind(src))
	}
	add("the compose file bound writable", P, "api: volumes[0]: writable bind holding the release's own docker-compose.yml", bind("./docker-compose.yml"))
	add("the .env bound writable", P, "api: volumes[0]: writable bind holding the release's own .env", bind("./.env"))
	add("bundle.json bound writable", P, "api: volumes[0]: writable bind holding the release's own bundle.json", bind("./bundle.json"))
	out = append(out, BypassClass{Name: "the compose file's directory bound writable", File: "deploy/dc.yml",
		Compose: bind("./deploy"), Code: P, Want: "api: volumes[0]: writable bind holding the release's own deploy/dc.yml"})
	add("logging to a host socket", P, "api: logging.driver: not on the allow-list (json-file, local, none): dockerd would send logs where the bundle says (syslog)",
		Svc("    logging:\n      driver: syslog\n      options: {syslog-address: \"unix:///var/run/docker.sock\"}\n"))
	add("logging to a plugin", P, "api: logging.driver", Svc("    logging: {driver: \"example/evil-plugin:latest\"}\n"))
	add("logging option not on the allow-list", P, "api: logging.options.syslog-address: not on the allow-list",
		Svc("    logging:\n      driver: json-file\n      options: {syslog-address: \"tcp://10.0.0.1:514\"}\n"))
	add("logging driver from a variable", I, "api: logging: holds a variable", Svc("    logging: {driver: \"${LOGD:-syslog}\"}\n"))
	add("oom_score_adj below 0", P, "api: oom_score_adj: below 0 the host's OOM killer kills the host's own processes first (-1000)",
		Svc("    oom_score_adj: -1000\n"))
	add("oom_kill_disable", P, "api: oom_kill_disable", Svc("    oom_kill_disable: true\n"))
	out = append(out, round2Classes()...)
	return out
}

// round2Classes are issue 19's: a network's address management, nesting that holds the loader,
// and the host's time zone files bound otherwise than read-only.
func round2Classes() []BypassClass {
	var out []BypassClass
	add := func(name, code, want, compose string) {
		out = append(out, BypassClass{Name: name, Compose: compose, Code: code, Want: want})
	}
	P, I := protocol.CodePrivileged, protocol.CodeBundleInvalid
	network := func(ipam string) string {
		return Svc("    networks: [lan]\n") + "networks:\n  lan:\n    ipam:\n" + ipam
	}
	add("an IPAM driver plugin", P, "network lan: ipam.driver: only the default IPAM driver is allowed",
		network("      driver: example/evil-ipam:latest\n"))
	for _, r := range []struct{ name, key, pool, want string }{
		{"a subnet in the intercept range", "subnet", "subnet: 100.64.0.0/16", "overlaps the tunneller's intercept range (100.64.0.0/10)"},
		{"a subnet holding the intercept range", "subnet", "subnet: 96.0.0.0/4", "overlaps the tunneller's intercept range"},
		{"one intercept address", "subnet", "subnet: 100.101.102.103/32", "overlaps the tunneller's intercept range"},
		{"an ip_range in the intercept range", "ip_range", "{subnet: 100.64.0.0/10, ip_range: 100.64.1.0/24}", "overlaps the tunneller's intercept range"},
		{"a gateway in the intercept range", "gateway", "{subnet: 10.10.0.0/16, gateway: 100.64.0.1}", "overlaps the tunneller's intercept range"},
		{"an aux address in the intercept range", "aux_addresses.tenancy", "{subnet: 10.10.0.0/16, aux_addresses: {tenancy: 100.64.0.7}}", "overlaps the tunneller's intercept range"},
		{"the IPv4-mapped intercept range", "subnet", "subnet: \"::ffff:100.64.0.0/112\"", "overlaps the tunneller's intercept range"},
		{"a loopback subnet", "subnet", "subnet: 127.0.0.0/8", "overlaps loopback (127.0.0.0/8)"},
		{"a link-local subnet (cloud metadata)", "subnet", "subnet: 169.254.169.0/24", "overlaps link-local (169.254.0.0/16)"},
		{"the IPv6 loopback", "subnet", "subnet: \"::1/128\"", "overlaps loopback (::1/128)"},
		{"an IPv6 link-local subnet", "subnet", "subnet: \"fe80::/64\"", "overlaps link-local (fe80::/10)"},
		{"every IPv6 address", "subnet", "subnet: \"::/0\"", "overlaps"},
	} {
		pool := r.pool
		if !strings.HasPrefix(pool, "{") {
			pool = "{" + pool + "}"
		}
		add("ipam: "+r.name, P, "network lan: ipam.config[0]."+r.key+": "+r.want, network("      config: ["+pool+"]\n"))
	}
	deep := strings.Repeat("[", 100) + "x" + strings.Repeat("]", 100)
	add("lists nested 100 deep", I, "nests deeper than 64 levels", Svc("")+"x-deep: "+deep+"\n")
	var chain strings.Builder
	chain.WriteString("x-a0: &a0 [x]\n")
	for i := 1; i <= 70; i++ {
		fmt.Fprintf(&chain, "x-a%d: &a%d [*a%d]\n", i, i, i-1)
	}
	add("nesting built from aliases", I, "nests deeper than 64 levels (aliases expanded)", chain.String()+Svc("    labels: {deep: x}\n"))
	for _, r := range []struct{ name, want, volume string }{
		{"the host's time zone bound writable", "api: volumes[0]: the host's time zone may only be bound read-only (:ro) (/etc/localtime)", `"/etc/localtime:/etc/localtime"`},
		{"the host's time zone bound rw", "api: volumes[0]: the host's time zone may only be bound read-only", `"/etc/timezone:/etc/timezone:rw"`},
		{"the host's time zone relabelled", "api: volumes[0].bind.selinux: a SELinux label relabels the host's /etc/localtime", `"/etc/localtime:/etc/localtime:ro,Z"`},
		{"the long syntax without read_only", "api: volumes[0]: the host's time zone may only be bound read-only", "{type: bind, source: /etc/timezone, target: /etc/timezone}"},
		{"another file under /etc, read-only", "api: volumes[0]: bind source outside the release directory (/etc/passwd)", `"/etc/passwd:/etc/passwd:ro"`},
		{"the zone directory, read-only", "api: volumes[0]: bind source outside the release directory (/etc/localtime.d)", `"/etc/localtime.d:/x:ro"`},
		{"a path through the time zone file", "api: volumes[0]: bind source outside the release directory (/etc/localtime/../shadow)", `"/etc/localtime/../shadow:/x:ro"`},
	} {
		add(r.name, P, r.want, Svc("    volumes: ["+r.volume+"]\n"))
	}
	return out
}

// ManyServices is a compose file of about size bytes: services of the size people write
// (an image, a restart policy, a logging anchor, two dozen settings in environment and labels),
// one after another.
func ManyServices(size int) string {
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
