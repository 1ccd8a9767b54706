package baodev

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
)

// The real server is exercised by internal/test/itest and internal/test/e2e (integration tag); here only
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

// The real server is told to listen on loopback only, and Addr names that listener. A fake bao
// records its arguments; it then exits, so Start retries and fails, as it does with no OpenBao.
func TestListensOnLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bao")
	argv := filepath.Join(dir, "argv")
	os.WriteFile(bin, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done >>"+argv+"\nexit 2\n"), 0o755)
	if _, err := Start(context.Background(), Options{Bin: bin, Dir: dir, PublicKeyPEM: "pem"}); !errors.Is(err, process.ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
	b, err := os.ReadFile(argv)
	if err != nil {
		t.Fatal(err)
	}
	var listens []string
	for _, a := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if v, ok := strings.CutPrefix(a, "-dev-listen-address="); ok {
			listens = append(listens, v)
		}
		if strings.Contains(a, "0.0.0.0") || strings.HasPrefix(a, "-dev-listen-address=:") {
			t.Errorf("argument %q listens beyond loopback", a)
		}
	}
	if len(listens) != 3 { // three attempts, each with its own free port
		t.Fatalf("-dev-listen-address given %d times over 3 attempts: %q", len(listens), b)
	}
	for _, l := range listens {
		host, port, err := net.SplitHostPort(l)
		if err != nil || host != "127.0.0.1" || port == "" || port == "0" {
			t.Errorf("-dev-listen-address=%s, want 127.0.0.1:PORT", l)
		}
	}
}
