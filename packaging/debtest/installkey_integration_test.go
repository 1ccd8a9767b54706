//go:build integration

package debtest

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/packaging/pkgtest"
)

// pinnedOpenZitiKey is the fingerprint install.sh pins (and testdata/openziti holds that key).
const pinnedOpenZitiKey = "34CBCF18427D8814B5BDBB0DDE3623EF08C996E5"

// TestInstallScriptPinsTheOpenZitiKey: on a box without ziti-edge-tunnel, install.sh fetches
// OpenZiti's apt key and trusts it only when its fingerprint is the pinned one. OpenZiti's real
// key passes (the keyring and the apt source are written, and the install goes on to apt-get);
// a key planted in its place, and a key file holding the real key plus another, are refused with
// both fingerprints shown, before anything is written for apt.
func TestInstallScriptPinsTheOpenZitiKey(t *testing.T) {
	a := build(t)
	real, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "debtest", "testdata", "openziti", "package-repos.gpg"))
	if err != nil {
		t.Fatal(err)
	}
	planted, plantedFpr := pkgtest.OpenPGPKey(t, "OpenZiti Developers <developers@openziti.org>")
	for _, tc := range []struct {
		name    string
		key     []byte
		trusted bool
		want    []string
	}{
		{"OpenZiti's key", real, true, []string{"has the pinned fingerprint " + pinnedOpenZitiKey, "could not install ziti-edge-tunnel"}},
		{"a planted key", planted, false, []string{"has the fingerprint " + plantedFpr + ", not the pinned " + pinnedOpenZitiKey}},
		{"OpenZiti's key and another", append(append([]byte{}, real...), planted...), false,
			[]string{"has the fingerprint " + pinnedOpenZitiKey + " " + plantedFpr + ", not the pinned"}},
		{"not a key", []byte("<html>captive portal</html>\n"), false, []string{"(none: not an OpenPGP key)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(tc.key) }))
			defer srv.Close()
			b := installBox(t)
			b.remove("/usr/bin/ziti-edge-tunnel")
			reg := newRegistry(t, a.version, a.deb)
			out, err := b.installSh([]string{"MONKY_DEPLOYD_BASE_URL=" + reg.base(), "MONKY_DEPLOYD_OPENZITI_KEY_URL=" + srv.URL + "/tun/package-repos.gpg"},
				"--env", envID, "--site", "cbs", "--token", deployToken,
				"--bootstrap-file", "/root/kit/bootstrap.jwt", "--enrol-jwt", "/root/kit/monky-host."+envID+".jwt")
			if err == nil {
				t.Fatalf("install.sh succeeded without ziti-edge-tunnel:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("install.sh's output lacks %q:\n%s", w, out)
				}
			}
			keyring, source := b.exists("/usr/share/keyrings/openziti.asc"), b.exists("/etc/apt/sources.list.d/openziti.list")
			if keyring != tc.trusted || source != tc.trusted {
				t.Errorf("keyring written %v, apt source written %v; want %v", keyring, source, tc.trusted)
			}
			if tc.trusted {
				if b.read("/usr/share/keyrings/openziti.asc") != string(tc.key) {
					t.Error("the keyring is not the key that was checked")
				}
				if !containsPrefix(b.calls("apt-get"), "install -y -qq ziti-edge-tunnel") {
					t.Errorf("apt-get calls %q: the trusted key did not lead to the install", b.calls("apt-get"))
				}
			} else if containsPrefix(b.calls("apt-get"), "install -y -qq ziti-edge-tunnel") {
				t.Errorf("apt-get installed from a repository whose key was refused: %q", b.calls("apt-get"))
			}
		})
	}
}
