package config

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/window"
)

const file = "/etc/monky-deployd/config.yaml"

func mustParse(t *testing.T, y string) *Config {
	t.Helper()
	c, err := Parse([]byte(y), file)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func boolp(b bool) *bool { return &b }

func TestDefaults(t *testing.T) {
	c := mustParse(t, "env_id: env-qa-02\n")
	want := &Config{
		Path:      file,
		EnvID:     "env-qa-02",
		Transport: "sdk",
		Identity:  "/opt/openziti/etc/identities/monky-host.env-qa-02.json",
		Tenancy: Tenancy{
			Service: "monky.tenancy.deploy", Host: "monky.tenancy.deploy", Port: 443, Scheme: "http",
			ProxyAddr: "127.0.0.1:18443", TimeoutS: 30,
		},
		Bao: Bao{
			Service: "openbao", Addr: "https://bao.cbs.tikali.net:8200", AuthMount: "jwt-tenancy",
			Role: "see-env", KVMount: "monky", CAFile: "/etc/monky-deployd/openbao-ca.pem",
			ProxyAddr: "127.0.0.1:18200", RenewBelowS: 3600, TimeoutS: 30,
		},
		IntervalS:       60,
		LaptopMode:      false,
		Prod:            boolp(false), // env-qa-*: see TestProd
		StateDir:        "/var/lib/monky-deployd",
		BootstrapFile:   "/etc/monky-deployd/bootstrap.jwt",
		Disk:            Disk{Factor: 1.5, HeadroomBytes: 2147483648},
		HealthyTimeoutS: 300,
		AutoRevert:      true,
		VolumesOnAbsent: "keep",
		ComposeProject:  "monky-env-qa-02",
		DockerBin:       "docker",
		RegistryHost:    "harbor.tikali.net",
		ContainerdRoot:  "/var/lib/containerd",
		LogLevel:        "INFO",
		TextfileDir:     "/var/lib/prometheus/node-exporter",
		AgentUser:       "monky-deployd",
		InterceptRange:  "100.64.0.0/10",
		InterceptPrefix: netip.MustParsePrefix("100.64.0.0/10"),
		DriftCorrection: true,
		Windows:         mustSchedule(t, nil, ""),
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	// Every key present with an empty value (`key:` or `key: ""`) also means its default.
	empty := "env_id: env-qa-02\nsite:\ntransport: \"\"\nidentity: ''\ntenancy:\n  host:\n  port:\nbao:\ndisk:\n  factor: ~\nprod:\nlog_level:\n"
	c2 := mustParse(t, empty)
	if !reflect.DeepEqual(c2, want) {
		t.Errorf("empty values are not defaults:\n got %+v\nwant %+v", c2, want)
	}
}

func TestMethods(t *testing.T) {
	c := mustParse(t, "env_id: env-dev-06\nstate_dir: /srv/agent\nbao:\n  addr: https://bao.example\n  renew_below_s: 120\n  timeout_s: 7\ntenancy:\n  timeout_s: 9\ninterval_s: 45\nhealthy_timeout_s: 90\n")
	checks := map[string][2]any{
		"TenancyURL":      {c.TenancyURL(), "http://monky.tenancy.deploy:443"},
		"BaoURL":          {c.BaoURL(), "https://bao.example:443"},
		"DockerConfigDir": {c.DockerConfigDir(), "/srv/agent/docker"},
		"StatePath":       {c.StatePath(), "/srv/agent/state.json"},
		"TokenPath":       {c.TokenPath(), "/srv/agent/bao.token"},
		"LockPath":        {c.LockPath(), "/srv/agent/lock"},
		"EnvDir":          {c.EnvDir(), "/srv/agent/env-dev-06"},
		"ReleasesDir":     {c.ReleasesDir(), "/srv/agent/env-dev-06/releases"},
		"CurrentLink":     {c.CurrentLink(), "/srv/agent/env-dev-06/current"},
		"Interval":        {c.Interval(), 45 * time.Second},
		"HealthyTimeout":  {c.HealthyTimeout(), 90 * time.Second},
		"Tenancy.Timeout": {c.Tenancy.Timeout(), 9 * time.Second},
		"Bao.Timeout":     {c.Bao.Timeout(), 7 * time.Second},
		"Bao.RenewBelow":  {c.Bao.RenewBelow(), 120 * time.Second},
	}
	for name, gw := range checks {
		if gw[0] != gw[1] {
			t.Errorf("%s = %v, want %v", name, gw[0], gw[1])
		}
	}
	scheme, host, port := c.BaoEndpoint()
	if scheme != "https" || host != "bao.example" || port != 443 {
		t.Errorf("BaoEndpoint = %s %s %d", scheme, host, port)
	}
	v6 := mustParse(t, "env_id: e\ntenancy:\n  base_url: http://[::1]:8080\nbao:\n  addr: http://127.0.0.1:8200/\n")
	if got := v6.TenancyURL(); got != "http://[::1]:8080" {
		t.Errorf("IPv6 TenancyURL = %s", got)
	}
	if got := v6.BaoURL(); got != "http://127.0.0.1:8200" {
		t.Errorf("BaoURL with trailing slash = %s", got)
	}
}

func TestSlogLevel(t *testing.T) {
	for in, want := range map[string]slog.Level{
		"DEBUG": slog.LevelDebug, "debug": slog.LevelDebug, "INFO": slog.LevelInfo, "Info": slog.LevelInfo,
		"WARN": slog.LevelWarn, "warning": slog.LevelWarn, "ERROR": slog.LevelError, "error": slog.LevelError,
	} {
		c := mustParse(t, "env_id: e\nlog_level: "+in+"\n")
		if c.SlogLevel() != want || c.LogLevel != strings.ToUpper(in) {
			t.Errorf("log_level %s: level %v (%s), want %v", in, c.SlogLevel(), c.LogLevel, want)
		}
	}
}

func TestProd(t *testing.T) {
	cases := []struct {
		name, yaml string
		want       bool
	}{
		{"prod site", "env_id: env-prod-01\nsite: cbs\n", true},
		{"no site", "env_id: shop-eu-1\n", true},
		{"site dev", "env_id: shop-eu-1\nsite: dev\n", false},
		{"site QA any case", "env_id: shop-eu-1\nsite: QA\n", false},
		{"env-dev-* in a data-centre site", "env_id: env-dev-08\nsite: cbs\n", false},
		{"env-qa-* in a data-centre site", "env_id: env-qa-02\nsite: cbs\n", false},
		{"a name merely containing dev", "env_id: devices-01\nsite: cbs\n", true},
		{"explicit true wins over dev", "env_id: env-dev-08\nsite: dev\nprod: true\n", true},
		{"explicit false wins", "env_id: env-prod-01\nprod: false\n", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.yaml)
			if c.IsProd() != tc.want || c.Prod == nil || *c.Prod != tc.want {
				t.Errorf("IsProd = %v (Prod %v), want %v", c.IsProd(), c.Prod, tc.want)
			}
		})
	}
	// A Config built by hand (Prod nil) derives the same way.
	if (&Config{EnvID: "env-qa-1"}).IsProd() || !(&Config{EnvID: "x", Site: "cbs"}).IsProd() {
		t.Error("IsProd on a hand-built Config does not derive")
	}
}

func TestPythonAgentFilesLoadUnchanged(t *testing.T) {
	t.Run("config.example.yaml", func(t *testing.T) {
		c, err := Load("testdata/python-0.1.9-config.example.yaml")
		if err != nil {
			t.Fatal(err)
		}
		d := mustParse(t, "env_id: env-qa-02\nsite: cbs\n")
		d.Path = "testdata/python-0.1.9-config.example.yaml"
		if !reflect.DeepEqual(c, d) {
			t.Errorf("the example spells out the defaults, yet:\n got %+v\nwant %+v", c, d)
		}
	})
	t.Run("install.sh output", func(t *testing.T) {
		c, err := Load("testdata/python-install-env-dev-08.yaml")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.EnvID != "env-dev-08" || c.Site != "cbs" || c.Transport != "proxy":
			t.Errorf("top: %+v", c)
		case c.TenancyURL() != "http://monky.tenancy.deploy:443" || c.Tenancy.ProxyAddr != "127.0.0.1:18443":
			t.Errorf("tenancy: %+v", c.Tenancy)
		case c.BaoURL() != "https://bao.cbs.tikali.net:8200" || c.Bao.TimeoutS != 20 || c.Bao.AuthMount != "jwt-tenancy" || c.Bao.Role != "see-env":
			t.Errorf("bao: %+v", c.Bao)
		case c.HealthyTimeoutS != 600 || c.DockerBin != "/usr/bin/docker" || c.LogLevel != "INFO":
			t.Errorf("rest: %+v", c)
		case c.IsProd() || c.ComposeProject != "monky-env-dev-08" || c.EnvDir() != "/var/lib/monky-deployd/env-dev-08":
			t.Errorf("derived: prod %v project %s", c.IsProd(), c.ComposeProject)
		}
	})
	t.Run("kit with base_url", func(t *testing.T) {
		c, err := Load("testdata/python-kit-base-url.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if c.Tenancy.Scheme != "http" || c.Tenancy.Host != "monky.tenancy.deploy" || c.Tenancy.Port != 443 {
			t.Errorf("base_url not applied: %+v", c.Tenancy)
		}
		if c.BaoURL() != "https://bao.cbs.tikali.net:8200" || c.ComposeProject != "monky-env-qa-02" || c.IntervalS != 60 {
			t.Errorf("kit values: %+v", c)
		}
	})
}

func TestBaseURLAlias(t *testing.T) {
	cases := []struct {
		name, tenancy string
		scheme, host  string
		port          int
	}{
		{"full", "base_url: http://monky.tenancy.deploy:443", "http", "monky.tenancy.deploy", 443},
		{"loopback fake", "base_url: http://127.0.0.1:38111", "http", "127.0.0.1", 38111},
		{"http without port", "base_url: http://tenancy.example", "http", "tenancy.example", 80},
		{"https without port", "base_url: https://tenancy.example/", "https", "tenancy.example", 443},
		{"agreeing explicit keys", "base_url: https://t.example:8443\n  scheme: https\n  host: t.example\n  port: 8443", "https", "t.example", 8443},
		{"service stays the ziti service", "service: svc.x\n  base_url: http://127.0.0.1:9", "http", "127.0.0.1", 9},
		{"host defaults to service", "service: svc.x", "http", "svc.x", 443},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, "env_id: e\ntenancy:\n  "+tc.tenancy+"\n")
			if c.Tenancy.Scheme != tc.scheme || c.Tenancy.Host != tc.host || c.Tenancy.Port != tc.port {
				t.Errorf("got %s %s %d, want %s %s %d", c.Tenancy.Scheme, c.Tenancy.Host, c.Tenancy.Port, tc.scheme, tc.host, tc.port)
			}
		})
	}
}

// expectError parses y and checks the error is a *Error for key whose text names the key and
// the file and contains each of wants.
func expectError(t *testing.T, y, key string, wants ...string) *Error {
	t.Helper()
	c, err := Parse([]byte(y), file)
	if err == nil {
		t.Fatalf("Parse accepted it: %+v", c)
	}
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T %v is not a *config.Error", err, err)
	}
	if ce.Key != key {
		t.Errorf("Key = %q, want %q (error: %v)", ce.Key, key, err)
	}
	msg := err.Error()
	prefix := "config " + file + ": "
	if key != "" {
		prefix += key + ": "
	}
	if !strings.HasPrefix(msg, prefix) {
		t.Errorf("error %q does not start with %q", msg, prefix)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
	return ce
}

func TestBaseURLErrors(t *testing.T) {
	cases := []struct {
		name, tenancy string
		wants         []string
	}{
		{"conflicting port", "base_url: http://monky.tenancy.deploy:443\n  port: 8081", []string{"tenancy.port", "8081", "443"}},
		{"conflicting scheme", "base_url: http://x.example:443\n  scheme: https", []string{"tenancy.scheme", "https"}},
		{"conflicting host", "base_url: http://x.example:443\n  host: y.example", []string{"tenancy.host", "y.example"}},
		{"default port differs from explicit", "base_url: http://x.example\n  port: 443", []string{"tenancy.port", "80"}},
		{"not http", "base_url: ftp://x.example", []string{"http"}},
		{"no scheme", "base_url: x.example:443", []string{"http"}},
		{"path", "base_url: http://x.example/api", []string{"no path"}},
		{"query", "base_url: http://x.example?a=b", []string{"no path"}},
		{"user", "base_url: http://u:p@x.example", []string{"no path"}},
		{"port zero", "base_url: http://x.example:0", []string{"1 to 65535"}},
		{"port too big", "base_url: http://x.example:70000", []string{"1 to 65535"}},
		{"empty port", "base_url: 'http://x.example:'", []string{"empty port"}},
		{"no host", "base_url: http://:80", []string{"empty host"}},
		{"bad host", "base_url: http://x_y$z.example", []string{"host"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectError(t, "env_id: e\ntenancy:\n  "+tc.tenancy+"\n", "tenancy.base_url", tc.wants...)
		})
	}
}

func TestValidationErrors(t *testing.T) {
	cases := []struct {
		name, yaml, key string
		wants           []string
	}{
		{"env_id missing", "site: cbs\n", "env_id", []string{"required"}},
		{"env_id empty file", "", "env_id", []string{"required"}},
		{"env_id upper case", "env_id: Env-QA-02\n", "env_id", []string{`"Env-QA-02"`}},
		{"env_id underscore", "env_id: env_qa\n", "env_id", []string{"env_qa"}},
		{"env_id leading dash", "env_id: -env\n", "env_id", nil},
		{"env_id slash", "env_id: ../etc\n", "env_id", nil},
		{"env_id too long", "env_id: " + strings.Repeat("a", 64) + "\n", "env_id", nil},
		{"site whitespace", "env_id: e\nsite: 'c b s'\n", "site", nil},
		{"transport", "env_id: e\ntransport: ziti\n", "transport", []string{`"ziti"`, "sdk, proxy or system"}},
		{"identity relative", "env_id: e\nidentity: id.json\n", "identity", []string{"absolute"}},
		{"tenancy.service whitespace", "env_id: e\ntenancy:\n  service: 'a b'\n", "tenancy.service", nil},
		{"tenancy.scheme", "env_id: e\ntenancy:\n  scheme: ftp\n", "tenancy.scheme", []string{"http or https"}},
		{"tenancy.host", "env_id: e\ntenancy:\n  host: a/b\n", "tenancy.host", nil},
		{"tenancy.port zero", "env_id: e\ntenancy:\n  port: 0\n", "tenancy.port", []string{"1 to 65535", "got 0"}},
		{"tenancy.port big", "env_id: e\ntenancy:\n  port: 65536\n", "tenancy.port", []string{"65536"}},
		{"tenancy.proxy_addr", "env_id: e\ntenancy:\n  proxy_addr: 18443\n", "tenancy.proxy_addr", []string{"host:port"}},
		{"tenancy.proxy_addr port", "env_id: e\ntenancy:\n  proxy_addr: 127.0.0.1:0\n", "tenancy.proxy_addr", []string{"1 to 65535"}},
		{"tenancy.timeout_s", "env_id: e\ntenancy:\n  timeout_s: 0\n", "tenancy.timeout_s", []string{"positive"}},
		{"bao.service", "env_id: e\nbao:\n  service: 'o b'\n", "bao.service", nil},
		{"bao.addr scheme", "env_id: e\nbao:\n  addr: bao.example:8200\n", "bao.addr", []string{"http"}},
		{"bao.addr path", "env_id: e\nbao:\n  addr: https://bao.example/v1\n", "bao.addr", []string{"no path"}},
		{"bao.auth_mount", "env_id: e\nbao:\n  auth_mount: /jwt\n", "bao.auth_mount", nil},
		{"bao.auth_mount dotdot", "env_id: e\nbao:\n  auth_mount: a/../b\n", "bao.auth_mount", nil},
		{"bao.kv_mount", "env_id: e\nbao:\n  kv_mount: 'mon ky'\n", "bao.kv_mount", nil},
		{"bao.role", "env_id: e\nbao:\n  role: a/b\n", "bao.role", nil},
		{"bao.ca_file", "env_id: e\nbao:\n  ca_file: ca.pem\n", "bao.ca_file", []string{"absolute"}},
		{"bao.proxy_addr", "env_id: e\nbao:\n  proxy_addr: localhost\n", "bao.proxy_addr", nil},
		{"bao.renew_below_s", "env_id: e\nbao:\n  renew_below_s: -1\n", "bao.renew_below_s", []string{"positive"}},
		{"bao.timeout_s", "env_id: e\nbao:\n  timeout_s: 0\n", "bao.timeout_s", []string{"positive"}},
		{"interval_s", "env_id: e\ninterval_s: 0\n", "interval_s", []string{"positive"}},
		{"state_dir", "env_id: e\nstate_dir: var/lib\n", "state_dir", []string{"absolute"}},
		{"bootstrap_file", "env_id: e\nbootstrap_file: bootstrap.jwt\n", "bootstrap_file", []string{"absolute"}},
		{"disk.factor", "env_id: e\ndisk:\n  factor: 0.9\n", "disk.factor", []string{"at least 1"}},
		{"disk.headroom_bytes", "env_id: e\ndisk:\n  headroom_bytes: -1\n", "disk.headroom_bytes", nil},
		{"healthy_timeout_s", "env_id: e\nhealthy_timeout_s: 0\n", "healthy_timeout_s", []string{"positive"}},
		{"healthy_timeout_s above the cap", "env_id: e\nhealthy_timeout_s: 7200\n", "healthy_timeout_s", []string{"at most 1800", "7200"}},
		{"volumes_on_absent", "env_id: e\nvolumes_on_absent: delete\n", "volumes_on_absent", []string{"keep or purge"}},
		{"compose_project", "env_id: e\ncompose_project: Monky\n", "compose_project", nil},
		{"docker_bin", "env_id: e\ndocker_bin: 'sudo docker'\n", "docker_bin", nil},
		{"registry_host scheme", "env_id: e\nregistry_host: https://harbor\n", "registry_host", nil},
		{"containerd_root", "env_id: e\ncontainerd_root: containerd\n", "containerd_root", []string{"absolute"}},
		{"log_level", "env_id: e\nlog_level: verbose\n", "log_level", []string{"DEBUG, INFO, WARN, WARNING or ERROR"}},
		{"textfile_dir", "env_id: e\ntextfile_dir: node-exporter\n", "textfile_dir", []string{"absolute"}},
		{"control character", "env_id: e\nsite: \"a\\x01b\"\n", "site", []string{"control"}},
		{"agent_user an option", "env_id: e\nagent_user: --help\n", "agent_user", []string{"account name", "--help"}},
		{"agent_user a number", "env_id: e\nagent_user: \"0\"\n", "agent_user", []string{"account name"}},
		{"agent_user a path", "env_id: e\nagent_user: ../root\n", "agent_user", []string{"account name"}},
		{"intercept_range no range", "env_id: e\nintercept_range: 100.64.0.1\n", "intercept_range", []string{"address range", "100.64.0.0/10"}},
		{"intercept_range not its first address", "env_id: e\nintercept_range: 100.64.0.1/10\n", "intercept_range", []string{"first address"}},
		{"intercept_range everything", "env_id: e\nintercept_range: 0.0.0.0/0\n", "intercept_range", []string{"not all addresses"}},
		{"apply_windows unknown day", "env_id: e\napply_windows: [\"Mon-Fro 02:00-05:00\"]\n", "apply_windows", []string{"entry 1", `"Fro" is not a day`}},
		{"apply_windows 25:00", "env_id: e\napply_windows:\n  - Sat 00:00-24:00\n  - Mon 25:00-26:00\n", "apply_windows", []string{"entry 2", "hour 25"}},
		{"apply_windows empty window", "env_id: e\napply_windows: [\"\"]\n", "apply_windows", []string{"entry 1", "empty"}},
		{"apply_windows blank window", "env_id: e\napply_windows: [\"  \"]\n", "apply_windows", []string{"entry 1", "empty"}},
		{"apply_windows start after end", "env_id: e\napply_windows: [\"Mon 05:00-02:00\"]\n", "apply_windows", []string{"the end must come after the start"}},
		{"apply_windows overnight", "env_id: e\napply_windows: [\"Fri 22:00-02:00\"]\n", "apply_windows", []string{"the end must come after the start"}},
		{"apply_windows 24:00 start", "env_id: e\napply_windows: [\"Fri 24:00-24:00\"]\n", "apply_windows", []string{"hour 24"}},
		{"apply_windows no times", "env_id: e\napply_windows: [Mon-Fri]\n", "apply_windows", []string{"want days and times"}},
		{"apply_windows_tz unknown zone", "env_id: e\napply_windows_tz: Europe/Atlantis\n", "apply_windows_tz", []string{`"Europe/Atlantis" is not an IANA zone`}},
		{"apply_windows_tz Local", "env_id: e\napply_windows_tz: Local\n", "apply_windows_tz", []string{"name the zone"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectError(t, tc.yaml, tc.key, tc.wants...)
		})
	}
}

func TestBadTypes(t *testing.T) {
	cases := []struct {
		name, yaml, key, want string
	}{
		{"port text", "env_id: e\ntenancy:\n  port: abc\n", "tenancy.port", `want an integer, got "abc"`},
		{"port float", "env_id: e\ntenancy:\n  port: 443.0\n", "tenancy.port", `want an integer, got "443.0"`},
		{"interval list", "env_id: e\ninterval_s: [60]\n", "interval_s", "want an integer, got a list"},
		{"headroom float", "env_id: e\ndisk:\n  headroom_bytes: 1.5\n", "disk.headroom_bytes", "want an integer"},
		{"factor text", "env_id: e\ndisk:\n  factor: lots\n", "disk.factor", `want a number, got "lots"`},
		{"factor infinite", "env_id: e\ndisk:\n  factor: .inf\n", "disk.factor", "want a number"},
		{"laptop_mode", "env_id: e\nlaptop_mode: maybe\n", "laptop_mode", `want true or false, got "maybe"`},
		{"auto_revert", "env_id: e\nauto_revert: 1h\n", "auto_revert", `want true or false, got "1h"`},
		{"prod", "env_id: e\nprod: 1\n", "prod", "want true or false"},
		{"env_id mapping", "env_id:\n  a: b\n", "env_id", "want a string, got a mapping"},
		{"site list", "env_id: e\nsite:\n  - cbs\n", "site", "want a string, got a list"},
		{"tenancy scalar", "env_id: e\ntenancy: monky.tenancy.deploy\n", "tenancy", `want a mapping, got "monky.tenancy.deploy"`},
		{"bao list", "env_id: e\nbao: [a]\n", "bao", "want a mapping, got a list"},
		{"binary tag", "env_id: e\nsite: !!binary aGVsbG8=\n", "site", "unsupported YAML tag"},
		{"alias", "env_id: &x e\nsite: *x\n", "site", "aliases are not supported"},
		{"apply_windows scalar", "env_id: e\napply_windows: Mon-Fri 02:00-05:00\n", "apply_windows", `want a list, got "Mon-Fri 02:00-05:00"`},
		{"apply_windows mapping entry", "env_id: e\napply_windows:\n  - {Mon: 1}\n", "apply_windows", "entry 1: want a string, got a mapping"},
		{"apply_windows null entry", "env_id: e\napply_windows: [~]\n", "apply_windows", "entry 1: want a string"},
		{"apply_windows control", "env_id: e\napply_windows: [\"Mon\\t02:00-05:00\\n\"]\n", "apply_windows", "entry 1: contains a control character"},
		{"drift_correction", "env_id: e\ndrift_correction: sometimes\n", "drift_correction", `want true or false, got "sometimes"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectError(t, tc.yaml, tc.key, tc.want)
		})
	}
	// YAML 1.1's other boolean spellings (the Python agent's PyYAML read them) are accepted;
	// a quoted number or boolean is a string, refused naming the key (issue 20).
	c := mustParse(t, "env_id: e\ntenancy:\n  port: 8443\nlaptop_mode: yes\nprod: off\ndisk:\n  factor: 2\n")
	if c.Tenancy.Port != 8443 || !c.LaptopMode || c.IsProd() || c.Disk.Factor != 2 {
		t.Errorf("lenient scalars: %+v", c)
	}
	for _, tc := range []struct{ yaml, key, want string }{
		{"env_id: e\ninterval_s: \"300\"\n", "interval_s", `want an integer, got the string "300": write the value without quotes (line 2)`},
		{"env_id: e\nlaptop_mode: \"false\"\n", "laptop_mode", `want true or false, got the string "false"`},
		{"env_id: e\ntenancy:\n  port: '8443'\n", "tenancy.port", "want an integer, got the string"},
		{"env_id: e\ndisk:\n  factor: \"1.5\"\n", "disk.factor", "want a number, got the string"},
		{"env_id: e\nauto_revert: !!str true\n", "auto_revert", "want true or false, got the string"},
		{"env_id: e\nprod: 'off'\n", "prod", "got the string"},
	} {
		expectError(t, tc.yaml, tc.key, tc.want)
	}
}

func TestBadTypeExactMessage(t *testing.T) {
	_, err := Parse([]byte("env_id: e\ntenancy:\n  port: abc\n"), file)
	want := `config /etc/monky-deployd/config.yaml: tenancy.port: want an integer, got "abc" (line 3)`
	if err == nil || err.Error() != want {
		t.Errorf("error %v\nwant  %s", err, want)
	}
}

func TestUnknownKeys(t *testing.T) {
	cases := []struct {
		name, yaml, key, want string
	}{
		{"top level", "env_id: e\nfoo: 1\n", "foo", "unknown key"},
		{"top-level typo", "env_id: e\nintervall_s: 60\n", "intervall_s", "did you mean interval_s?"},
		{"misplaced leaf", "env_id: e\nport: 443\n", "port", "did you mean tenancy.port?"},
		{"leaf in two sections", "env_id: e\nproxy_addr: x:1\n", "proxy_addr", "tenancy.proxy_addr or bao.proxy_addr"},
		{"dotted key", "env_id: e\ntenancy.port: 443\n", "tenancy.port", "nested"},
		{"nested tenancy", "env_id: e\ntenancy:\n  prot: 443\n", "tenancy.prot", "did you mean tenancy.port?"},
		{"nested bao", "env_id: e\nbao:\n  secret_id: x\n", "bao.secret_id", "unknown key"},
		{"nested disk", "env_id: e\ndisk:\n  headroom: 1\n", "disk.headroom", "unknown key"},
		{"Path is not a key", "env_id: e\nPath: /x\n", "Path", "unknown key"},
		{"python-era docker_data_root", "env_id: e\ndocker_data_root: /home/docker-data\n", "docker_data_root", "unknown key"},
		{"duplicate", "env_id: e\nsite: a\nsite: b\n", "site", "twice"},
		{"merge key", "env_id: e\nbase: &b {port: 1}\n", "base", "unknown key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectError(t, tc.yaml, tc.key, tc.want)
		})
	}
}

func TestLegacyAppRoleRefused(t *testing.T) {
	for name, v := range map[string]string{
		"map":    "\n    role_id: abc\n    secret_id_file: /etc/monky-deployd/secret_id\n",
		"scalar": " yes\n",
		"null":   "\n",
		"list":   " [a]\n",
	} {
		t.Run(name, func(t *testing.T) {
			expectError(t, "env_id: e\nbao:\n  approle:"+v, "bao.approle", "AppRole is gone", "JWT deploy grant")
		})
	}
}

func TestDocumentErrors(t *testing.T) {
	cases := []struct {
		name, yaml, want string
	}{
		{"top-level list", "- a\n- b\n", "want a mapping of keys at the top level, got a list"},
		{"top-level scalar", "env_id\n", `got "env_id"`},
		{"syntax", "env_id: e\n  bad: [\n", "invalid YAML"},
		{"tab indentation", "env_id: e\ntenancy:\n\tport: 1\n", "invalid YAML"},
		{"two documents", "env_id: e\n---\nenv_id: f\n", "more than one YAML document"},
		{"complex key", "env_id: e\n? [a]\n: b\n", "plain name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectError(t, tc.yaml, "", tc.want)
		})
	}
	expectError(t, "env_id: e\ntenancy:\n  ? {a: 1}\n  : b\n", "tenancy", "plain name")
	big := make([]byte, maxSize+1)
	expectError(t, string(big), "", "larger than")
	// Comments only, or a bare null document: every key at its default, so env_id is missing.
	expectError(t, "# nothing yet\n", "env_id", "required")
	expectError(t, "~\n", "env_id", "required")
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(p, []byte("env_id: env-qa-02\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Path != p {
		t.Errorf("Path = %q, want %q", c.Path, p)
	}
	missing := filepath.Join(dir, "absent.yaml")
	_, err = Load(missing)
	var ce *Error
	if !errors.As(err, &ce) || ce.File != missing || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if strings.Count(err.Error(), missing) != 1 {
		t.Errorf("error names the file more than once: %v", err)
	}
	_, err = Load(dir)
	if !errors.As(err, &ce) {
		t.Errorf("directory: %T %v", err, err)
	}
}

func FuzzParse(f *testing.F) {
	for _, p := range []string{
		"testdata/python-0.1.9-config.example.yaml", "testdata/python-install-env-dev-08.yaml", "testdata/python-kit-base-url.yaml",
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "env_id: e\n", "env_id: e\ntenancy:\n  port: abc\n", "env_id: e\nbao:\n  approle: {a: 1}\n",
		"a: &a [*a]\n", "env_id: e\ntenancy:\n  base_url: http://[::1]:1\n", "- x\n", "{", "env_id: !!binary x\n",
		"env_id: e\n---\n", "? [a]\n: b\n", "env_id: e\ndisk:\n  factor: 1e400\n", "prod: ~\n",
		"env_id: e\napply_windows: [\"Mon-Fri 02:00-05:00\"]\napply_windows_tz: Europe/Berlin\n", "env_id: e\napply_windows: [a, [b]]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error is %T, not *config.Error: %v", err, err)
			}
			if c != nil {
				t.Fatal("non-nil config with an error")
			}
			return
		}
		// What parses is usable as it stands.
		if c.EnvID == "" || c.Tenancy.Port < 1 || c.Tenancy.Port > 65535 || c.Prod == nil || c.Disk.Factor < 1 {
			t.Fatalf("accepted an unusable config: %+v", c)
		}
		if _, err := Parse([]byte("env_id: "+c.EnvID+"\n"), "again.yaml"); err != nil {
			t.Fatalf("an accepted env_id does not parse on its own: %v", err)
		}
		_ = c.TenancyURL()
		_ = c.BaoURL()
		_ = c.SlogLevel()
		if !ValidAccountName(c.AgentUser) || !c.InterceptPrefix.IsValid() {
			t.Fatalf("accepted agent_user %q, intercept_range %v", c.AgentUser, c.InterceptPrefix)
		}
		if c.Windows == nil {
			t.Fatal("accepted a config without its parsed windows")
		}
		c.Windows.Next(time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC))
	})
}

func mustSchedule(t *testing.T, specs []string, zone string) *window.Schedule {
	t.Helper()
	s, err := window.NewSchedule(specs, zone)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestApplyWindowsAndDriftCorrection(t *testing.T) {
	c := mustParse(t, "env_id: e\ndrift_correction: false\napply_windows:\n  - Mon-Fri 02:00-05:00\n  - \"Sat,Sun 00:00-24:00\"\napply_windows_tz: Europe/Berlin\n")
	if c.DriftCorrection {
		t.Error("drift_correction: false left DriftCorrection on")
	}
	if c.Windows.Empty() || c.Windows.String() != "Mon-Fri 02:00-05:00, Sat,Sun 00:00-24:00 (Europe/Berlin)" {
		t.Errorf("windows = %s", c.Windows)
	}
	// Wednesday 03:00 in Berlin is 02:00 UTC in December: inside.
	if !c.Windows.Open(time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)) || c.Windows.Open(time.Date(2026, 12, 2, 4, 0, 0, 0, time.UTC)) {
		t.Error("the schedule does not follow Europe/Berlin")
	}
	if c := mustParse(t, "env_id: e\napply_windows: []\n"); !c.Windows.Empty() || !c.DriftCorrection {
		t.Errorf("an empty list: windows %s, drift %v", c.Windows, c.DriftCorrection)
	}
}

func TestAutoRevertOptOut(t *testing.T) {
	if c := mustParse(t, "env_id: e\nauto_revert: false\n"); c.AutoRevert {
		t.Error("auto_revert: false left AutoRevert on")
	}
	if c := mustParse(t, "env_id: e\n"); !c.AutoRevert {
		t.Error("auto_revert is not on by default")
	}
}
