//go:build integration

package debtest

import (
	"os"
	"strings"
	"testing"
)

// TestUploadDryRun runs the release job's own command, scripts/packaging-upload.sh, on what
// make deb built: every file is checked against SHA256SUMS and every request is printed.
func TestUploadDryRun(t *testing.T) {
	a := build(t)
	root := repoRoot(t)
	need(t, "bash")
	for _, tc := range []struct {
		target, tag string
		wantOK      bool
		want        []string
	}{
		{"gitlab", "v" + a.version, true, []string{"PUT ", "/packages/generic/monky-deployd/" + a.version + "/monky-deployd_" + a.version + "_amd64.deb",
			"/packages/generic/monky-deployd/" + a.version + "/monky-fleetctl_" + a.version + "_amd64.deb", "/install.sh", "/SHA256SUMS", "POST ", "/releases"}},
		{"gitea", "v" + a.version, true, []string{"GET ", "/releases/tags/v" + a.version, "?name=install.sh", "?name=SHA256SUMS"}},
		{"gitlab", "v0.0.1", false, []string{"does not match VERSION"}},
	} {
		t.Run(tc.target+" "+tc.tag, func(t *testing.T) {
			env := append(os.Environ(), "CI_COMMIT_TAG="+tc.tag, "CI_JOB_TOKEN=job-s3cr3t-token", "GITEA_TOKEN=gitea-s3cr3t-token")
			out, err := run(t, root, env, "bash", "scripts/packaging-upload.sh", "--target", tc.target, "--dist", a.dist, "--dry-run")
			if (err == nil) != tc.wantOK {
				t.Fatalf("err %v, want ok=%v\n%s", err, tc.wantOK, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "s3cr3t") {
				t.Errorf("a token was printed:\n%s", out)
			}
		})
	}
}

// TestMakeDebOutput: make deb leaves both packages, the stamped installer and their checksums.
func TestMakeDebOutput(t *testing.T) {
	a := build(t)
	info := mustRun(t, "", nil, need(t, "dpkg-deb"), "--field", a.deb, "Package", "Version", "Architecture", "Depends")
	for _, want := range []string{"Package: monky-deployd", "Version: " + a.version, "Architecture: amd64", "Depends: passwd"} {
		if !strings.Contains(info, want) {
			t.Errorf("control lacks %q:\n%s", want, info)
		}
	}
	for deb, c := range map[string]struct{ want, not []string }{
		a.deb: {[]string{"./usr/bin/monky-deployd", "./usr/lib/systemd/system/monky-deployd.timer",
			"./usr/share/doc/monky-deployd/config.example.yaml", "./usr/share/man/man8/monky-deployd-tick.8.gz"},
			[]string{"./usr/bin/fleetctl", "fleetctl-exporter.service"}},
		a.fleetDeb: {[]string{"./usr/bin/fleetctl", "./usr/lib/systemd/system/fleetctl-exporter.service",
			"./usr/share/monky-fleetctl/prometheus/monky-deployd.rules.yml", "./usr/share/man/man1/fleetctl-status.1.gz"},
			[]string{"./usr/bin/monky-deployd"}},
	} {
		contents := mustRun(t, "", nil, "dpkg-deb", "--contents", deb)
		for _, want := range c.want {
			if !strings.Contains(contents, want) {
				t.Errorf("%s lacks %s", deb, want)
			}
		}
		for _, not := range c.not {
			if strings.Contains(contents, not) {
				t.Errorf("%s holds %s", deb, not)
			}
		}
		if strings.Contains(contents, "./etc/") {
			t.Errorf("%s ships files under /etc:\n%s", deb, contents)
		}
	}
	if !strings.Contains(readAll(t, a.installSh), "\nDEFAULT_VERSION=\""+a.version+"\"\n") {
		t.Error("dist/install.sh is not stamped with the version")
	}
	sums := mustRun(t, a.dist, nil, "sha256sum", "-c", "SHA256SUMS")
	if strings.Count(sums, ": OK") != 3 {
		t.Errorf("sha256sum -c:\n%s", sums)
	}
	out := mustRun(t, "", nil, a.dist+"/bin/monky-deployd", "version")
	if !strings.Contains(out, a.version) || strings.Contains(out, "-dev") {
		t.Errorf("monky-deployd version says %q, want %s embedded by ldflags", out, a.version)
	}
}
