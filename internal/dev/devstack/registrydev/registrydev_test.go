package registrydev

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

func TestCredentialIsWhatTheAgentReads(t *testing.T) {
	r := &Registry{Addr: "127.0.0.1:5000", User: "monky-ab12", Password: secret.New("pw-1")}
	c := r.Credential()
	if c.String() == c.Reveal() {
		t.Fatal("the credential prints in clear")
	}
	var got map[string]string
	if err := json.Unmarshal([]byte(c.Reveal()), &got); err != nil {
		t.Fatal(err)
	}
	if got["registry"] != r.Addr || got["username"] != r.User || got["password"] != "pw-1" || len(got) != 3 {
		t.Errorf("credential = %v", got)
	}
}

func TestStartFailsCleanly(t *testing.T) {
	if _, err := Start(context.Background(), Options{}); err == nil {
		t.Fatal("Start without a Dir")
	}
	// A registry binary that dies at once: retried, then an error carrying its log.
	dir := t.TempDir()
	bin := filepath.Join(dir, "registry")
	os.WriteFile(bin, []byte("#!/bin/sh\necho 'listen: address already in use' >&2\nexit 1\n"), 0o755)
	_, err := Start(context.Background(), Options{Bin: bin, Dir: dir})
	if !errors.Is(err, process.ErrExited) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start = %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "htpasswd"))
	if !strings.Contains(string(b), ":$2") {
		t.Errorf("htpasswd = %q, want a bcrypt hash", b)
	}
}

// The registry's config binds it to loopback only, and Addr (the host of every image reference)
// is that listener. A fake registry binary keeps each config it is started with, then exits.
func TestListensOnLoopbackOnly(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "registry")
	os.WriteFile(bin, []byte("#!/bin/sh\ncat \"$2\" >>"+filepath.Join(dir, "configs")+"\nexit 1\n"), 0o755)
	if _, err := Start(context.Background(), Options{Bin: bin, Dir: dir}); !errors.Is(err, process.ErrExited) {
		t.Fatalf("Start = %v, want ErrExited", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "configs"))
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "addr: "); ok {
			addrs = append(addrs, v)
		}
	}
	if len(addrs) != 3 { // three attempts, each with its own free port
		t.Fatalf("http.addr given %d times over 3 attempts:\n%s", len(addrs), b)
	}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" || port == "" || port == "0" {
			t.Errorf("http.addr %s, want 127.0.0.1:PORT", a)
		}
	}
}
