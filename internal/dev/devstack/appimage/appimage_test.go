package appimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckTag(t *testing.T) {
	for tag, ok := range map[string]bool{"v1": true, "hello:1": false, "1.2.3-rc_1": true, "": false, "-x": false, "a b": false} {
		if err := CheckTag(tag); (err == nil) != ok {
			t.Errorf("CheckTag(%q) = %v", tag, err)
		}
	}
}

func tarEntries(t *testing.T, raw []byte) map[string]*tar.Header {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(raw))
	got := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
	}
}

func TestImageTarHoldsTheAppAndTmp(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	os.WriteFile(bin, []byte("\x7fELF fake"), 0o755)
	raw, err := imageTar(bin)
	if err != nil {
		t.Fatal(err)
	}
	got := tarEntries(t, raw)
	if len(got) != 2 || got["app"] == nil || got["app"].Mode != 0o755 || got["tmp/"] == nil || got["tmp/"].Mode != 0o1777 {
		t.Errorf("entries = %v", got)
	}
	if _, err := imageTar(filepath.Join(dir, "absent")); err == nil {
		t.Error("an absent binary made an image")
	}
}

// TestBuildContextIsScratchWithAHealthcheck: the context docker build reads holds the
// Dockerfile (FROM scratch, nothing to pull, the app's own HEALTHCHECK) and the root filesystem.
func TestBuildContextIsScratchWithAHealthcheck(t *testing.T) {
	for _, want := range []string{"FROM scratch\n", "ADD rootfs.tar /\n", `ENTRYPOINT ["/app"]`, `HEALTHCHECK --interval=1s --timeout=3s --retries=3 CMD ["/app", "-check"]`} {
		if !strings.Contains(Dockerfile, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, Dockerfile)
		}
	}
	if strings.Count(Dockerfile, "FROM ") != 1 {
		t.Errorf("Dockerfile has another base than scratch:\n%s", Dockerfile)
	}
	raw, err := contextTar([]byte("rootfs"))
	if err != nil {
		t.Fatal(err)
	}
	got := tarEntries(t, raw)
	if len(got) != 2 || got["Dockerfile"] == nil || got["rootfs.tar"] == nil || got["rootfs.tar"].Size != 6 || got["Dockerfile"].Size != int64(len(Dockerfile)) {
		t.Errorf("context entries = %v", got)
	}
}
