package state

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestTokenFieldsRoundTrip: the token's record (token, previous_token, pending_lease,
// lease_backoff) is read and written by internal/agent/token through State; state.json is a contract
// (docs/PROTOCOL.md), so a file with every one of them set, and a field this version does not
// know, must come back byte for byte.
func TestTokenFieldsRoundTrip(t *testing.T) {
	want, err := os.ReadFile("testdata/go-0.2.0-token-state.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load("testdata/go-0.2.0-token-state.json")
	if err != nil {
		t.Fatal(err)
	}
	if s.Token == nil || s.Token.Addr == "" || s.PreviousToken == nil || s.PendingLease == nil || s.LeaseBackoff == nil {
		t.Fatalf("token fields not read: %+v", s)
	}
	p := filepath.Join(t.TempDir(), "state.json")
	if err := Save(p, s); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("state.json changed on a load and save:\n%s\nwant:\n%s", got, want)
	}
}
