//go:build integration

package pkgtest

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// OpenPGPKey makes a fresh OpenPGP signing key for uid with gpg, in a throw-away home, and
// returns it armored with its fingerprint: a key planted where a vendor's apt key is expected.
func OpenPGPKey(t *testing.T, uid string) ([]byte, string) {
	t.Helper()
	gpg, err := exec.LookPath("gpg")
	if err != nil {
		Missing(t, "gpg not found (apt-get install gpg)")
	}
	home := t.TempDir()
	if err := os.Chmod(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := Run("", nil, gpg, "--batch", "--homedir", home, "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"); err != nil {
		t.Fatalf("gpg --quick-gen-key: %v\n%s", err, out)
	}
	armored, err := exec.Command(gpg, "--batch", "--homedir", home, "--armor", "--export").Output()
	if err != nil {
		t.Fatal(err)
	}
	colons, err := exec.Command(gpg, "--batch", "--homedir", home, "--with-colons", "--list-keys").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(colons), "\n") {
		if f := strings.Split(l, ":"); f[0] == "fpr" && len(f) > 9 {
			return armored, f[9]
		}
	}
	t.Fatalf("gpg listed no fingerprint:\n%s", colons)
	return nil, ""
}
