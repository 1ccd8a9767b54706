package bundletest

import (
	"os"
	"path/filepath"
	"testing"
)

// RealWorldFiles runs f as a subtest, named after the file, with each of the dozen compose
// files people write: dir/*.yml, dir being internal/agent/bundle/testdata/compose as seen from the
// calling test's package. Fewer than twelve fail the test.
func RealWorldFiles(t *testing.T, dir string, f func(t *testing.T, compose string)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yml"))
	if err != nil || len(files) < 12 {
		t.Fatalf("fixtures: %v, %d", err, len(files))
	}
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			data, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f(t, string(data))
		})
	}
}
