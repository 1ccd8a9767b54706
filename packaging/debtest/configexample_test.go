package debtest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// protocolDefaults is PROTOCOL.md's "Config keys" list with each default as the example file
// must show it. Derived keys show the value derived for the example's env (env-qa-02, site cbs).
var protocolDefaults = map[string]string{
	"env_id":              "env-qa-02",
	"site":                "cbs",
	"transport":           "sdk",
	"identity":            "/opt/openziti/etc/identities/monky-host.env-qa-02.json",
	"tenancy.service":     "monky.tenancy.deploy",
	"tenancy.host":        "monky.tenancy.deploy",
	"tenancy.port":        "443",
	"tenancy.scheme":      "http",
	"tenancy.base_url":    "http://monky.tenancy.deploy:443",
	"tenancy.proxy_addr":  "127.0.0.1:18443",
	"tenancy.timeout_s":   "30",
	"bao.service":         "openbao",
	"bao.addr":            "https://bao.cbs.tikali.net:8200",
	"bao.auth_mount":      "jwt-tenancy",
	"bao.role":            "see-env",
	"bao.kv_mount":        "monky",
	"bao.ca_file":         "/etc/monky-deployd/openbao-ca.pem",
	"bao.proxy_addr":      "127.0.0.1:18200",
	"bao.renew_below_s":   "3600",
	"bao.timeout_s":       "30",
	"interval_s":          "60",
	"laptop_mode":         "false",
	"prod":                "true",
	"state_dir":           "/var/lib/monky-deployd",
	"bootstrap_file":      "/etc/monky-deployd/bootstrap.jwt",
	"disk.factor":         "1.5",
	"disk.headroom_bytes": "2147483648",
	"healthy_timeout_s":   "300",
	"volumes_on_absent":   "keep",
	"compose_project":     "monky-env-qa-02",
	"docker_bin":          "docker",
	"registry_host":       "harbor.tikali.net",
	"log_level":           "INFO",
	"textfile_dir":        "/var/lib/prometheus/node-exporter",
	"drift_correction":    "true",
	"apply_windows":       "[]",
	"apply_windows_tz":    "UTC",
	"agent_user":          "monky-deployd",
	"intercept_range":     "100.64.0.0/10",
}

// flatten turns a decoded YAML map into dotted keys with their scalar values.
func flatten(prefix string, m map[string]any, out map[string]string) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			flatten(key, sub, out)
			continue
		}
		out[key] = fmt.Sprint(v)
	}
}

// exampleConfig returns the keys of config.example.yaml with their values: its "# " lines,
// uncommented, are the keys; "## " lines are prose.
func exampleConfig(t *testing.T) map[string]string {
	t.Helper()
	raw := readAll(t, filepath.Join(moduleRoot(t), "packaging", "config.example.yaml"))
	var keys []string
	for _, line := range strings.Split(raw, "\n") {
		if strings.HasPrefix(line, "# ") {
			keys = append(keys, strings.TrimPrefix(line, "# "))
		} else if line != "" && !strings.HasPrefix(line, "##") && line != "#" {
			t.Errorf("config.example.yaml: %q is neither a commented key (\"# \") nor prose (\"## \")", line)
		}
	}
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(strings.Join(keys, "\n")), &doc); err != nil {
		t.Fatalf("config.example.yaml, uncommented, is not YAML: %v", err)
	}
	out := map[string]string{}
	flatten("", doc, out)
	return out
}

func TestConfigExampleHasEveryKeyAtItsDefault(t *testing.T) {
	got := exampleConfig(t)
	var missing, wrong, extra []string
	for k, want := range protocolDefaults {
		v, ok := got[k]
		switch {
		case !ok:
			missing = append(missing, k)
		case v != want:
			wrong = append(wrong, fmt.Sprintf("%s: %q, want %q", k, v, want))
		}
	}
	for k := range got {
		if _, ok := protocolDefaults[k]; !ok {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(wrong)
	sort.Strings(extra)
	if len(missing)+len(wrong)+len(extra) > 0 {
		t.Errorf("config.example.yaml vs PROTOCOL.md:\nmissing %q\nwrong %q\nunknown %q", missing, wrong, extra)
	}
}
