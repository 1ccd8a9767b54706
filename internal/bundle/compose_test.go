package bundle

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/protocol"
)

const rel = "/var/lib/monky-deployd/env-qa-02/releases/7a10"

// svc wraps service-level YAML (indented by 4) into a compose file with one service "api".
func svc(body string) string {
	return "services:\n  api:\n    image: harbor.tikali.net/monky/api:1\n" + body
}

func TestScanComposePrivileged(t *testing.T) {
	tests := []struct {
		name    string
		compose string
		want    []string
	}{
		{"nothing", svc("    ports: [\"8080:80\"]\n    volumes: [\"./data:/data\", \"data:/var/lib/x\", \"/srv/app:/srv\", \"/data\"]\n"), nil},
		{"privileged true", svc("    privileged: true\n"), []string{"api: privileged: true"}},
		{"privileged false", svc("    privileged: false\n"), nil},
		{"privileged as a string", svc("    privileged: \"yes\"\n"), []string{"api: privileged: yes"}},
		{"privileged from a variable", svc("    privileged: ${PRIV}\n"), []string{"api: privileged: ${PRIV}"}},
		{"cap_add ALL", svc("    cap_add: [ALL]\n"), []string{"api: cap_add ALL"}},
		{"cap_add SYS_ADMIN", svc("    cap_add: [NET_BIND_SERVICE, SYS_ADMIN]\n"), []string{"api: cap_add SYS_ADMIN"}},
		{"cap_add with prefix, any case", svc("    cap_add: [cap_sys_admin, Cap_All]\n"), []string{"api: cap_add cap_sys_admin", "api: cap_add Cap_All"}},
		{"cap_add harmless", svc("    cap_add: [NET_ADMIN, CHOWN]\n"), nil},
		{"pid host", svc("    pid: host\n"), []string{"api: pid: host"}},
		{"pid other service", svc("    pid: \"service:db\"\n"), nil},
		{"network_mode host", svc("    network_mode: host\n"), []string{"api: network_mode: host"}},
		{"network_mode bridge", svc("    network_mode: bridge\n"), nil},
		{"network_mode from a variable", svc("    network_mode: ${NET}\n"), []string{"api: network_mode: ${NET} (set from a variable, cannot be checked)"}},
		{"ipc host", svc("    ipc: host\n"), []string{"api: ipc: host"}},
		{"devices short", svc("    devices: [\"/dev/fuse:/dev/fuse\"]\n"), []string{"api: devices /dev/fuse:/dev/fuse"}},
		{"devices long", svc("    devices:\n      - source: /dev/kvm\n        target: /dev/kvm\n"), []string{"api: devices /dev/kvm"}},
		{"seccomp unconfined", svc("    security_opt: [\"seccomp:unconfined\"]\n"), []string{"api: security_opt seccomp:unconfined"}},
		{"apparmor unconfined", svc("    security_opt: [\"apparmor=unconfined\", \"no-new-privileges:true\"]\n"), []string{"api: security_opt apparmor=unconfined"}},
		{"bind root", svc("    volumes: [\"/:/host:ro\"]\n"), []string{"api: bind mount of /"}},
		{"bind docker socket", svc("    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\"]\n"), []string{"api: bind mount of /var/run/docker.sock"}},
		{"bind docker socket under /run", svc("    volumes: [\"/run/docker.sock:/s\"]\n"), []string{"api: bind mount of /run/docker.sock"}},
		{"bind docker socket, double slash", svc("    volumes: [\"//var/run/docker.sock:/s\"]\n"), []string{"api: bind mount of /var/run/docker.sock"}},
		{"bind a directory holding the socket", svc("    volumes: [\"/var/run:/r\", \"/run/:/r2\"]\n"), []string{"api: bind mount of /var/run", "api: bind mount of /run"}},
		{"bind /etc", svc("    volumes: [\"/etc:/etc:ro\"]\n"), []string{"api: bind mount of /etc"}},
		{"bind /etc, dot-dot spelling", svc("    volumes: [\"/etc/../etc:/x\"]\n"), []string{"api: bind mount of /etc"}},
		{"bind under /etc", svc("    volumes: [\"/etc/ssl/certs:/certs:ro\"]\n"), []string{"api: bind mount of /etc/ssl/certs"}},
		{"bind /root, /proc, /sys", svc("    volumes: [\"/root/.ssh:/k\", \"/proc:/p\", \"/sys/fs/cgroup:/c\"]\n"),
			[]string{"api: bind mount of /root/.ssh", "api: bind mount of /proc", "api: bind mount of /sys/fs/cgroup"}},
		{"similar names are not sensitive", svc("    volumes: [\"/etcetera:/x\", \"/rootfs:/y\", \"/system:/z\"]\n"), nil},
		{"long bind", svc("    volumes:\n      - type: bind\n        source: /etc\n        target: /host-etc\n"), []string{"api: bind mount of /etc"}},
		{"long volume is not a bind", svc("    volumes:\n      - type: volume\n        source: etc\n        target: /etc\n"), nil},
		{"named volume bound to a host path", svc("    volumes: [\"hostroot:/host\"]\n") +
			"volumes:\n  hostroot:\n    driver: local\n    driver_opts: {type: none, o: bind, device: /}\n",
			[]string{"api: bind mount (volume hostroot) of /"}},
		{"secret file from the host", svc("    secrets: [shadow]\n") + "secrets:\n  shadow:\n    file: /etc/shadow\n",
			[]string{"api: secret shadow file of /etc/shadow"}},
		{"config file, long reference", svc("    configs:\n      - source: c\n        target: /c\n") + "configs:\n  c:\n    file: /root/x\n",
			[]string{"api: config c file of /root/x"}},
		{"hidden in a merged extension block", "x-priv: &priv\n  privileged: true\n  pid: host\nservices:\n  api:\n    <<: *priv\n    image: x\n",
			[]string{"api: privileged: true", "api: pid: host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			priv, inv, err := ScanCompose([]byte(tt.compose), rel)
			if err != nil {
				t.Fatalf("ScanCompose: %v", err)
			}
			if len(inv) != 0 {
				t.Errorf("invalid = %q, want none", inv)
			}
			if !reflect.DeepEqual(priv, tt.want) {
				t.Errorf("privileged = %q\nwant         %q", priv, tt.want)
			}
		})
	}
}

func TestScanComposeInvalid(t *testing.T) {
	tests := []struct {
		name    string
		compose string
		want    []string
	}{
		{"build", svc("    build: .\n"), []string{"api: build (the box builds nothing; images come from the registry)"}},
		{"build, long form", svc("    build:\n      context: ./src\n"), []string{"api: build (the box builds nothing; images come from the registry)"}},
		{"relative bind escapes", svc("    volumes: [\"../other-release:/x\"]\n"), []string{"api: bind mount ../other-release resolves outside the release directory"}},
		{"relative bind escapes after a detour", svc("    volumes: [\"./a/../../..:/x\"]\n"), []string{"api: bind mount ./a/../../.. resolves outside the release directory"}},
		{"long relative bind escapes", svc("    volumes:\n      - type: bind\n        source: ../../../../../etc\n        target: /x\n"),
			[]string{"api: bind mount ../../../../../etc resolves outside the release directory"}},
		{"home directory", svc("    volumes: [\"~/.docker:/d\"]\n"), []string{"api: bind mount ~/.docker is in a home directory, outside the release directory"}},
		{"bind source from a variable", svc("    volumes: [\"${DATA}:/data\"]\n"),
			[]string{"api: bind mount ${DATA} comes from a variable; the agent checks paths before rendering, so they must be literal"}},
		{"bind path with a variable inside", svc("    volumes: [\"./data/${SUB}:/data\"]\n"),
			[]string{"api: bind mount ./data/${SUB} comes from a variable; the agent checks paths before rendering, so they must be literal"}},
		{"env_file string escapes", svc("    env_file: ../../secrets.env\n"), []string{"api: env_file ../../secrets.env resolves outside the release directory"}},
		{"env_file list escapes", svc("    env_file: [app.env, ../x.env]\n"), []string{"api: env_file ../x.env resolves outside the release directory"}},
		{"env_file long form escapes", svc("    env_file:\n      - path: ./ok.env\n      - path: ../x.env\n        required: false\n"),
			[]string{"api: env_file ../x.env resolves outside the release directory"}},
		{"env_file absolute outside", svc("    env_file: /etc/environment\n"), []string{"api: env_file /etc/environment is outside the release directory"}},
		{"env_file in home", svc("    env_file: ~/.env\n"), []string{"api: env_file ~/.env is in a home directory, outside the release directory"}},
		{"secret file escapes", svc("    secrets: [s]\n") + "secrets:\n  s:\n    file: ../s.txt\n",
			[]string{"api: secret s file ../s.txt resolves outside the release directory"}},
		{"include", "include: [other.yml]\n" + svc(""), []string{"include: other compose files are not allowed (the agent checks one file)"}},
		{"extends another file", svc("    extends:\n      file: base.yml\n      service: base\n"),
			[]string{"api: extends.file (another compose file the agent does not check)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			priv, inv, err := ScanCompose([]byte(tt.compose), rel)
			if err != nil {
				t.Fatalf("ScanCompose: %v", err)
			}
			if len(priv) != 0 {
				t.Errorf("privileged = %q, want none", priv)
			}
			if !reflect.DeepEqual(inv, tt.want) {
				t.Errorf("invalid = %q\nwant      %q", inv, tt.want)
			}
		})
	}
	t.Run("fine inside the release directory", func(t *testing.T) {
		c := svc("    volumes: [\".:/app\", \"./a/../b:/b\", \"" + rel + "/data:/d\"]\n    env_file: [app.env, \"" + rel + "/x.env\", {path: ./y.env}]\n    extends: {service: base}\n")
		priv, inv, err := ScanCompose([]byte(c), rel)
		if err != nil || len(priv) != 0 || len(inv) != 0 {
			t.Errorf("ScanCompose = %q, %q, %v; want nothing", priv, inv, err)
		}
	})
}

func TestScanComposeErrors(t *testing.T) {
	tests := []struct {
		name, compose, want string
	}{
		{"not YAML", "services: [\n", "not valid YAML"},
		{"duplicate key", svc("    privileged: false\n    privileged: true\n"), "not valid YAML"},
		{"empty", "", "empty compose file"},
		{"top level a list", "- a\n", "(top level): want a mapping"},
		{"services a list", "services: [api]\n", "services: want a mapping"},
		{"service null", "services:\n  api:\n", "services.api: want a mapping"},
		{"volumes a string", svc("    volumes: ./x:/x\n"), "services.api.volumes: want a list"},
		{"volume a number", svc("    volumes: [\"./x:/x\", 7]\n"), "services.api.volumes[1]: want a string or a mapping"},
		{"volume source a list", svc("    volumes:\n      - type: bind\n        source: [a]\n"), "services.api.volumes[0].source: want a string"},
		{"cap_add a string", svc("    cap_add: ALL\n"), "services.api.cap_add: want a list"},
		{"cap_add element a map", svc("    cap_add: [{a: b}]\n"), "services.api.cap_add[0]: want a string"},
		{"pid a list", svc("    pid: [host]\n"), "services.api.pid: want a string"},
		{"devices a map", svc("    devices: {a: b}\n"), "services.api.devices: want a list"},
		{"security_opt element a number", svc("    security_opt: [1]\n"), "services.api.security_opt[0]: want a string"},
		{"env_file a number", svc("    env_file: 3\n"), "services.api.env_file: want a string or a list"},
		{"env_file path missing", svc("    env_file: [{required: true}]\n"), "services.api.env_file[0].path: want a string"},
		{"top-level volumes a list", svc("") + "volumes: [a]\n", "volumes: want a mapping"},
		{"secrets file a number", svc("") + "secrets:\n  s:\n    file: 1\n", "secrets.s.file: want a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ScanCompose([]byte(tt.compose), rel)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	t.Run("relative release directory", func(t *testing.T) {
		if _, _, err := ScanCompose([]byte(svc("")), "releases/7a10"); err == nil {
			t.Error("a relative release directory was accepted")
		}
	})
}

// everything is a compose file with every privileged finding at once, over two services.
const everything = `services:
  api:
    image: x
    privileged: true
    cap_add: [SYS_ADMIN]
    pid: host
    volumes:
      - /var/run/docker.sock:/var/run/docker.sock
      - type: bind
        source: /etc
        target: /etc
  worker:
    image: y
    network_mode: host
    ipc: host
    devices: [/dev/fuse]
    security_opt: [seccomp:unconfined]
    cap_add: [ALL]
    volumes: ["/:/host", "/root:/r", "/proc:/p", "/sys:/s", "/run/docker.sock:/s2"]
`

func TestScanComposeEveryFindingAtOnce(t *testing.T) {
	priv, inv, err := ScanCompose([]byte(everything), rel)
	if err != nil || len(inv) != 0 {
		t.Fatalf("ScanCompose: %v %q", err, inv)
	}
	want := []string{
		"api: privileged: true",
		"api: cap_add SYS_ADMIN",
		"api: pid: host",
		"api: bind mount of /var/run/docker.sock",
		"api: bind mount of /etc",
		"worker: cap_add ALL",
		"worker: network_mode: host",
		"worker: ipc: host",
		"worker: devices /dev/fuse",
		"worker: security_opt seccomp:unconfined",
		"worker: bind mount of /",
		"worker: bind mount of /root",
		"worker: bind mount of /proc",
		"worker: bind mount of /sys",
		"worker: bind mount of /run/docker.sock",
	}
	if !reflect.DeepEqual(priv, want) {
		t.Errorf("privileged =\n%q\nwant\n%q", priv, want)
	}
}

func TestCheck(t *testing.T) {
	bundleWith := func(compose string, allow bool, composeFile string) *Bundle {
		if composeFile == "" {
			composeFile = DefaultComposeFile
		}
		return &Bundle{
			Files: map[string]string{composeFile: compose},
			Meta:  Meta{ComposeFile: composeFile, Agent: Agent{AllowPrivileged: allow}},
		}
	}
	tests := []struct {
		name    string
		b       *Bundle
		code    string // "" = accepted
		want    string
		notWant string
	}{
		{"clean", bundleWith(svc(""), false, ""), "", "", ""},
		{"privileged refused, every finding listed", bundleWith(everything, false, ""), protocol.CodePrivileged,
			"api: privileged: true, api: cap_add SYS_ADMIN, api: pid: host, api: bind mount of /var/run/docker.sock, api: bind mount of /etc, " +
				"worker: cap_add ALL, worker: network_mode: host, worker: ipc: host, worker: devices /dev/fuse, worker: security_opt seccomp:unconfined, " +
				"worker: bind mount of /, worker: bind mount of /root, worker: bind mount of /proc, worker: bind mount of /sys, worker: bind mount of /run/docker.sock " +
				"(bundle.json agent.allow_privileged is not set)", ""},
		{"privileged allowed", bundleWith(everything, true, ""), "", "", ""},
		{"build refused even when privileged is allowed", bundleWith(svc("    build: .\n    privileged: true\n"), true, ""), protocol.CodeBundleInvalid,
			"docker-compose.yml: api: build", ""},
		{"invalid wins over privileged", bundleWith(svc("    privileged: true\n    volumes: [\"../x:/x\"]\n"), false, ""), protocol.CodeBundleInvalid,
			"docker-compose.yml: api: bind mount ../x resolves outside the release directory", "privileged"},
		{"every invalid finding listed", bundleWith("services:\n  a:\n    build: .\n  b:\n    image: x\n    env_file: ../e\n", false, ""), protocol.CodeBundleInvalid,
			"docker-compose.yml: a: build (the box builds nothing; images come from the registry), b: env_file ../e resolves outside the release directory", ""},
		{"malformed compose", bundleWith(svc("    volumes: [7]\n"), false, ""), protocol.CodeBundleInvalid,
			"docker-compose.yml: services.api.volumes[0]: want a string or a mapping", ""},
		{"compose in a subdirectory resolves from there", bundleWith(svc("    volumes: [\"../config:/c\"]\n"), false, "deploy/compose.yml"), "", "", ""},
		{"compose in a subdirectory still cannot leave", bundleWith(svc("    volumes: [\"../../x:/c\"]\n"), false, "deploy/compose.yml"), protocol.CodeBundleInvalid,
			"deploy/compose.yml: api: bind mount ../../x resolves outside", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.b.Check(rel)
			if tt.code == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			assertRefusal(t, err, tt.code, tt.want)
			if tt.notWant != "" && strings.Contains(err.Error(), tt.notWant) {
				t.Errorf("detail %q mentions %q", err, tt.notWant)
			}
		})
	}
	t.Run("relative release directory is the caller's error", func(t *testing.T) {
		err := bundleWith(svc(""), false, "").Check("releases/x")
		var r *protocol.Refusal
		if err == nil || errors.As(err, &r) {
			t.Errorf("Check = %v, want a plain error", err)
		}
	})
}
