package appimage

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestCheckTag(t *testing.T) {
	for tag, ok := range map[string]bool{"v1": true, "hello:1": false, "1.2.3-rc_1": true, "": false, "-x": false, "a b": false} {
		if err := CheckTag(tag); (err == nil) != ok {
			t.Errorf("CheckTag(%q) = %v", tag, err)
		}
	}
}

func TestImageTarHoldsTheAppAndTmp(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	os.WriteFile(bin, []byte("\x7fELF fake"), 0o755)
	if err := writeImageTar(bin, bin+".tar"); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(bin + ".tar")
	tr := tar.NewReader(bytes.NewReader(raw))
	got := map[string]int64{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h.Mode
	}
	if len(got) != 2 || got["app"] != 0o755 || got["tmp/"] != 0o1777 {
		t.Errorf("entries = %v", got)
	}
	if err := writeImageTar(filepath.Join(dir, "absent"), bin+".tar"); err == nil {
		t.Error("an absent binary made an image")
	}
}
