package registrydev

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/devstack/process"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/secret"
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
