package debpkg

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func stubBinaries(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	d, f := filepath.Join(dir, "monky-deployd"), filepath.Join(dir, "fleetctl")
	for _, p := range []string{d, f} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d, f
}

func packagingDir(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// arMembers reads the members of an ar archive (a .deb) by name.
func arMembers(t *testing.T, data []byte) map[string][]byte {
	t.Helper()
	if !bytes.HasPrefix(data, []byte("!<arch>\n")) {
		t.Fatal("not an ar archive")
	}
	out := map[string][]byte{}
	r := bufio.NewReader(bytes.NewReader(data[8:]))
	for {
		hdr := make([]byte, 60)
		if _, err := io.ReadFull(r, hdr); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimRight(strings.TrimSpace(string(hdr[:16])), "/")
		size, err := strconv.Atoi(strings.TrimSpace(string(hdr[48:58])))
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			t.Fatal(err)
		}
		if size%2 == 1 {
			r.ReadByte()
		}
		out[name] = body
	}
}

type entry struct {
	mode int64
	body string
}

func tarEntries(t *testing.T, gz []byte) map[string]entry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]entry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[strings.TrimPrefix(h.Name, ".")] = entry{h.Mode & 0o7777, string(b)}
	}
}

func TestAgentPackage(t *testing.T) {
	d, f := stubBinaries(t)
	info, err := Info(Options{Version: "0.2.0", DeploydBin: d, FleetctlBin: f, PackagingDir: packagingDir(t),
		MTime: time.Unix(1700000000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := FileName(info); name != "monky-deployd_0.2.0_amd64.deb" {
		t.Errorf("file name %q", name)
	}
	out, err := Write(info, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	members := arMembers(t, raw)
	control := tarEntries(t, members["control.tar.gz"])
	data := tarEntries(t, members["data.tar.gz"])

	if _, ok := control["/conffiles"]; ok {
		t.Errorf("the package has conffiles: %q", control["/conffiles"].body)
	}
	for _, s := range []string{"/preinst", "/postinst", "/prerm", "/postrm"} {
		e, ok := control[s]
		if !ok || e.mode != 0o755 || !strings.HasPrefix(e.body, "#!/bin/sh\n") {
			t.Errorf("maintainer script %s: present=%v mode=%o", s, ok, e.mode)
		}
	}
	for _, want := range []string{"Package: monky-deployd\n", "Version: 0.2.0\n", "Architecture: amd64\n", "Depends: passwd\n"} {
		if !strings.Contains(control["/control"].body, want) {
			t.Errorf("control lacks %q:\n%s", want, control["/control"].body)
		}
	}
	for path, mode := range map[string]int64{
		DeploydPath: 0o755, FleetctlPath: 0o755,
		UnitDir + "/monky-deployd.service": 0o644, UnitDir + "/monky-deployd.timer": 0o644,
		UnitDir + "/monky-deployd-proxy.service": 0o644, DocDir + "/config.example.yaml": 0o644,
		UnitDir + "/fleetctl-exporter.service": 0o644, RulesPath: 0o644,
	} {
		e, ok := data[path]
		if !ok {
			t.Errorf("%s is not in the package", path)
			continue
		}
		if e.mode != mode {
			t.Errorf("%s mode %o, want %o", path, e.mode, mode)
		}
	}
	for path := range data {
		if strings.HasPrefix(path, "/etc") || strings.HasPrefix(path, "/var") {
			t.Errorf("the package ships %s: /etc and /var belong to install.sh and postinst", path)
		}
	}
}

func TestPrereleaseSortsBeforeRelease(t *testing.T) {
	d, f := stubBinaries(t)
	info, err := Info(Options{Version: "0.2.0-rc1", DeploydBin: d, FleetctlBin: f, PackagingDir: packagingDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	if name, _ := FileName(info); name != "monky-deployd_0.2.0~rc1_amd64.deb" {
		t.Errorf("file name %q, want the Debian ~ form", name)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	d, f := stubBinaries(t)
	notExec := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ok := Options{Version: "0.2.0", DeploydBin: d, FleetctlBin: f, PackagingDir: packagingDir(t)}
	for _, tc := range []struct {
		name  string
		edit  func(*Options)
		field string
	}{
		{"empty version", func(o *Options) { o.Version = "" }, "Version"},
		{"v prefix", func(o *Options) { o.Version = "v0.2.0" }, "Version"},
		{"shell in version", func(o *Options) { o.Version = "0.2.0;rm" }, "Version"},
		{"arch", func(o *Options) { o.Arch = "mips" }, "Arch"},
		{"no deployd", func(o *Options) { o.DeploydBin = "" }, "DeploydBin"},
		{"missing fleetctl", func(o *Options) { o.FleetctlBin = "/nonexistent" }, "FleetctlBin"},
		{"not executable", func(o *Options) { o.DeploydBin = notExec }, "DeploydBin"},
		{"no packaging dir", func(o *Options) { o.PackagingDir = "" }, "PackagingDir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			_, err := Info(o)
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Info: %v, want ErrInvalidOptions naming %s", err, tc.field)
			}
		})
	}
	t.Run("missing unit file", func(t *testing.T) {
		o := ok
		o.PackagingDir = t.TempDir()
		if _, err := Info(o); err == nil || !strings.Contains(err.Error(), "config.example.yaml") {
			t.Errorf("Info with an empty packaging dir: %v", err)
		}
	})
}

func ExampleFileName() {
	info, _ := Info(Options{Version: "0.2.0", DeploydBin: "/bin/sh", FleetctlBin: "/bin/sh", PackagingDir: ".."})
	name, _ := FileName(info)
	fmt.Println(name)
	// Output: monky-deployd_0.2.0_amd64.deb
}

// The maintainer scripts run standalone, so postinst (the upgrade heal) and postrm (the failed
// unpack's heal) each spell which `systemctl is-enabled` states count as "on": they must agree,
// or a timer one of them leaves off the other would turn on.
func TestMaintainerScriptsAgreeOnWhatIsEnabled(t *testing.T) {
	states := func(script string) string {
		b, err := os.ReadFile(filepath.Join("..", "scripts", script))
		if err != nil {
			t.Fatal(err)
		}
		var found []string
		for _, line := range strings.Split(string(b), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "enabled |") {
				found = append(found, strings.TrimSpace(l[:strings.Index(l, ")")]))
			}
		}
		if len(found) != 1 {
			t.Fatalf("%s: %d case patterns of enabled states, want 1: %q", script, len(found), found)
		}
		return found[0]
	}
	if a, b := states("postinst.sh"), states("postrm.sh"); a != b {
		t.Errorf("postinst counts %q as on, postrm %q", a, b)
	}
}
