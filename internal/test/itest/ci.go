// No build tag: unit tests that need something of the machine (root, a tool) stop through
// Unavailable too, so a CI run never passes by skipping them.

package itest

import (
	"os"
	"strings"
	"testing"
)

// InCI reads the CI variable as CI systems set it: "true" (GitHub, GitLab), "1", "yes",
// "woodpecker"… — any non-empty value but "false" and "0" means the tests run in CI, where a
// missing part is a failure. Reading only "true" would let CI=1 skip the whole suite green.
func InCI(value string) bool {
	v := strings.ToLower(strings.TrimSpace(value))
	return v != "" && v != "false" && v != "0"
}

// Unavailable stops a test this machine cannot run (not root, a tool missing): t.Skip on a
// workstation, t.Fatal when CI is set (InCI of $CI), since CI promised the machine.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	unavailableIn(t, InCI(os.Getenv("CI")), why)
}

func unavailableIn(t testing.TB, ci bool, why string) {
	t.Helper()
	if ci {
		t.Fatal(why + " — CI is set, so this is a failure, not a skip")
	}
	t.Skip(why)
}
