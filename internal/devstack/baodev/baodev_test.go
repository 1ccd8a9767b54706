package baodev

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/devstack/process"
)

// The real server is exercised by internal/itest and internal/e2e (integration tag); here only
// what needs no OpenBao.
func TestStartRefusesAndCleansUp(t *testing.T) {
	for _, o := range []Options{{}, {Bin: "/bin/true", Dir: t.TempDir()}, {Bin: "/bin/true", PublicKeyPEM: "x"}} {
		if _, err := Start(context.Background(), o); err == nil {
			t.Errorf("Start(%+v) succeeded", o)
		}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bao")
	os.WriteFile(bin, []byte("#!/bin/sh\necho \"root token: $BAO_DEV_ROOT_TOKEN_ID\"; exit 2\n"), 0o755)
	_, err := Start(context.Background(), Options{Bin: bin, Dir: dir, PublicKeyPEM: "pem"})
	if !errors.Is(err, process.ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
	if !strings.Contains(err.Error(), "root token: ***") || strings.Contains(err.Error(), "root-") {
		t.Errorf("the error shows the server's log unmasked: %v", err)
	}
}
