package kitconfig

import (
	"errors"
	"strings"
	"testing"
)

// kit is what install.sh writes for env-qa-02 (the header first, then the kit's keys).
const kit = `# Written by install.sh for env-qa-02. Re-running the install kit sets only its own keys and
# keeps every other key and comment here.

env_id: env-qa-02
site: cbs
transport: sdk
identity: /opt/openziti/etc/identities/monky-host.env-qa-02.json
laptop_mode: false
tenancy:
  service: monky.tenancy.deploy
  port: 443
bao:
  addr: https://bao.cbs.tikali.net:8200
  auth_mount: jwt-tenancy
  role: see-env
`

// v020 is what 0.2.0's install.sh wrote, then tuned by an operator by hand.
const v020 = `# Written by install.sh for env-qa-02; re-running the install kit rewrites it.
# Every key and its default: /usr/share/doc/monky-deployd/config.example.yaml
env_id: env-qa-02
site: cbs
transport: sdk
identity: /opt/openziti/etc/identities/monky-host.env-qa-02.json
laptop_mode: false
tenancy:
  service: monky.tenancy.deploy
  port: 443
  # this box's tenancy answers slowly
  timeout_s: 90
bao:
  addr: https://bao.cbs.tikali.net:8200
  auth_mount: jwt-tenancy
  role: see-env
disk:
  factor: 2 # big images here
  headroom_bytes: 4294967296
textfile_dir: /srv/node-exporter
`

const path = "/etc/monky-deployd/config.yaml"

func TestMergeKeepsTheOperatorsKeys(t *testing.T) {
	r, err := Merge([]byte(v020), []byte(kit), path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(r.Changed, ",") != "(header)" {
		t.Errorf("Changed = %q, want only the header", r.Changed)
	}
	out := string(r.Config)
	for _, want := range []string{"timeout_s: 90", "# this box's tenancy answers slowly", "factor: 2 # big images here",
		"headroom_bytes: 4294967296", "textfile_dir: /srv/node-exporter", "# Written by install.sh for env-qa-02. Re-running"} {
		if !strings.Contains(out, want) {
			t.Errorf("the merged config lost %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "rewrites it") || strings.Contains(out, "Every key and its default") {
		t.Errorf("0.2.0's header is still there:\n%s", out)
	}
	// A re-run: nothing changes, not even a byte.
	again, err := Merge(r.Config, []byte(kit), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Changed) != 0 || string(again.Config) != out {
		t.Errorf("a second merge changed %q:\n%s", again.Changed, again.Config)
	}
}

func TestMergeSetsTheKitsKeys(t *testing.T) {
	first, err := Merge([]byte(v020), []byte(kit), path)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(kit, "transport: sdk", "transport: proxy", 1)
	changed = strings.Replace(changed, "  port: 443", "  port: 8443", 1)
	changed += "healthy_timeout_s: 600\n" // a key the operator had not set (the role's extra config)
	r, err := Merge(first.Config, []byte(changed), path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Changed, ","); got != "transport,tenancy.port,healthy_timeout_s" {
		t.Errorf("Changed = %q", got)
	}
	out := string(r.Config)
	for _, want := range []string{"transport: proxy", "port: 8443", "healthy_timeout_s: 600", "timeout_s: 90", "textfile_dir: /srv/node-exporter"} {
		if !strings.Contains(out, want) {
			t.Errorf("the merged config lacks %q:\n%s", want, out)
		}
	}
}

// TestMergeKeepsTheOtherKitsHeader: a box run by install.sh and then the role (same values) keeps
// the file as it is, header and all; a value change brings the running kit's header.
func TestMergeKeepsTheOtherKitsHeader(t *testing.T) {
	first, err := Merge([]byte(v020), []byte(kit), path)
	if err != nil {
		t.Fatal(err)
	}
	role := strings.Replace(kit, "# Written by install.sh for env-qa-02. Re-running the install kit",
		"# Written by ansible (role monky_deployd) for env-qa-02. Re-running the role", 1)
	r, err := Merge(first.Config, []byte(role), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Changed) != 0 || string(r.Config) != string(first.Config) {
		t.Errorf("the role's run over install.sh's config changed %q:\n%s", r.Changed, r.Config)
	}
	r, err = Merge(first.Config, []byte(strings.Replace(role, "transport: sdk", "transport: proxy", 1)), path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Changed, ","); got != "(header),transport" || !strings.HasPrefix(string(r.Config), "# Written by ansible") {
		t.Errorf("a value change: Changed %q, config:\n%s", got, r.Config)
	}
}

func TestMergeWithoutAConfig(t *testing.T) {
	for _, existing := range []string{"", "# nothing yet\n", "~\n"} {
		r, err := Merge([]byte(existing), []byte(kit), path)
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Config) != kit || len(r.Changed) != 10 {
			t.Errorf("from %q: Changed %q, config:\n%s", existing, r.Changed, r.Config)
		}
	}
}

func TestMergeKeepsAnOperatorsHeader(t *testing.T) {
	own := "# env-qa-02 is the pilot: ask #monky before changing it\n\n" + strings.SplitN(v020, "\n", 3)[2]
	r, err := Merge([]byte(own), []byte(kit), path)
	if err != nil {
		t.Fatal(err)
	}
	out := string(r.Config)
	if !strings.Contains(out, "# env-qa-02 is the pilot") || strings.Index(out, "# Written by install.sh") > strings.Index(out, "# env-qa-02 is the pilot") {
		t.Errorf("the operator's own comment was lost or came first:\n%s", out)
	}
}

func TestMergeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, existing, kit string
		want                string
	}{
		{"broken YAML", "env_id: [\n", kit, "line"},
		{"a list, not keys", "- a\n- b\n", kit, "not a mapping of keys"},
		{"an unknown key the operator left", v020 + "tiemout_s: 3\n", kit, "tiemout_s"},
		{"a kit value the agent refuses", v020, strings.Replace(kit, "transport: sdk", "transport: carrier-pigeon", 1), "transport"},
		{"a kit that is no mapping", v020, "- env_id\n", "kit"},
		{"a second document", v020 + "---\nenv_id: x\n", kit, "more than one YAML document"},
		{"a kit that sets a key twice", v020, kit + "site: other\n", "sets site twice"},
		{"a kit that sets a nested key twice", v020, "env_id: env-a\ntenancy:\n  port: 1\n  port: 2\n", "sets tenancy.port twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge([]byte(tc.existing), []byte(tc.kit), path)
			var e *Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Merge: %v, want an *Error with %q", err, tc.want)
			}
		})
	}
}

// FuzzMerge: whatever the box's file and the kit hold, Merge refuses with an *Error or returns
// a config the agent loads, and merging the same kit again changes nothing.
func FuzzMerge(f *testing.F) {
	f.Add([]byte(v020), []byte(kit))
	f.Add([]byte(""), []byte(kit))
	f.Add([]byte("env_id: env-a\ntenancy: {port: 1}\n"), []byte("env_id: env-b\ntenancy:\n  port: 2\n"))
	f.Add([]byte("env_id: env-a\ntenancy: x\n"), []byte("env_id: env-a\ntenancy:\n  port: 2\n"))
	f.Fuzz(func(t *testing.T, existing, k []byte) {
		r, err := Merge(existing, k, path)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error of another type: %v", err)
			}
			return
		}
		again, err := Merge(r.Config, k, path)
		if err != nil {
			t.Fatalf("the merged config does not merge again: %v\n%s", err, r.Config)
		}
		if len(again.Changed) != 0 || string(again.Config) != string(r.Config) {
			t.Fatalf("a second merge changed %q:\n%s\nthen:\n%s", again.Changed, r.Config, again.Config)
		}
	})
}
