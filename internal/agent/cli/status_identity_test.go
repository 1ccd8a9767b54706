package cli

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"
)

// testIdentity writes an identity file whose certificate and CA end at the given times.
func testIdentity(t *testing.T, dir string, certEnd, caEnd time.Time) string {
	t.Helper()
	ca := testpki.NewCAValid(t, "net CA", time.Unix(0, 0), caEnd)
	leaf := ca.Client(t, "monky-host.env-qa-02", time.Unix(0, 0), certEnd)
	b, _ := json.Marshal(map[string]any{"ztAPI": "https://ctrl.example:1280", "id": map[string]string{
		"cert": "pem:" + string(leaf.CertPEM), "key": "pem:" + string(leaf.KeyPEM), "ca": "pem:" + string(ca.PEM)}})
	p := filepath.Join(dir, "monky-host.env-qa-02.json")
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

func testJWT(exp int64) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(`{"alg":"ES256"}`)) + "." + enc.EncodeToString(fmt.Appendf(nil, `{"exp":%d}`, exp)) + ".c2ln"
}

// status shows the identity's horizon, its CA's, who renews it, and the grants' exp; a garbage
// identity or grant is said, never a crash.
func TestStatusShowsTheHorizons(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	certEnd := time.Date(2027, 12, 3, 10, 0, 0, 0, time.UTC)
	caEnd := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	id := testIdentity(t, dir, certEnd, caEnd)
	os.WriteFile(dir+"/state/state.json", []byte(`{"env_id":"env-qa-02","identity":{"renewed_at":"2026-12-01T00:00:00Z",
		"renewal":{"started_at":"2026-12-02T00:00:00Z","failures":2,"next_try_at":"2026-12-02T02:00:00Z","last_error":"extend: HTTP 503"}}}`), 0o600)
	os.WriteFile(dir+"/bootstrap.jwt", []byte(testJWT(1796292000)+"\n"), 0o600)
	os.WriteFile(dir+"/state/lease.jwt", []byte("not a jwt"), 0o600)
	path := writeConfig(t, "env_id: env-qa-02\nsite: cbs\ntransport: sdk\nidentity: "+id+"\nstate_dir: "+dir+"/state\nbootstrap_file: "+dir+"/bootstrap.jwt\n")

	code, stdout, stderr := runCLI(t, nil, "--config", path, "status", "--json")
	var doc struct {
		Identity struct {
			Path        string `json:"path"`
			RenewedBy   string `json:"renewed_by"`
			NotAfter    string `json:"not_after"`
			CANotAfter  string `json:"ca_not_after"`
			RenewedAt   string `json:"renewed_at"`
			RenewBelowS int64  `json:"renew_below_s"`
			Renewal     struct {
				Failures int `json:"failures"`
			} `json:"renewal"`
		} `json:"identity"`
		Grants []struct {
			Kind      string `json:"kind"`
			ExpiresAt string `json:"expires_at"`
			Error     string `json:"error"`
		} `json:"grants"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &doc) != nil {
		t.Fatalf("status --json exit %d: %s%s", code, stdout, stderr)
	}
	switch i := doc.Identity; {
	case i.Path != id || i.NotAfter != "2027-12-03T10:00:00Z" || i.CANotAfter != "2030-01-01T00:00:00Z":
		t.Errorf("identity = %+v", i)
	case i.RenewedBy != "agent" || i.RenewedAt != "2026-12-01T00:00:00Z" || i.Renewal.Failures != 2 || i.RenewBelowS != 2592000:
		t.Errorf("identity renewal = %+v", i)
	}
	if len(doc.Grants) != 2 || doc.Grants[0].Kind != "bootstrap" || doc.Grants[0].ExpiresAt != "2026-12-03T10:00:00Z" ||
		doc.Grants[1].Kind != "lease" || !strings.Contains(doc.Grants[1].Error, "not a JWT") {
		t.Errorf("grants = %+v", doc.Grants)
	}
	if strings.Contains(stdout, "c2ln") {
		t.Error("status printed the grant itself")
	}

	code, stdout, _ = runCLI(t, nil, "--config", path, "status")
	for _, want := range []string{
		"identity:        " + id + ": certificate valid until 2027-12-03T10:00:00Z (",
		"CA until 2030-01-01T00:00:00Z",
		"renewal:         by agent (transport sdk: the agent is the identity's only user); last renewed 2026-12-01T00:00:00Z; 2 failure(s), last: extend: HTTP 503",
		"bootstrap grant: " + dir + "/bootstrap.jwt: expires 2026-12-03T10:00:00Z",
		"lease grant:     " + dir + "/state/lease.jwt: unreadable: not a JWT",
	} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, stdout)
		}
	}

	os.WriteFile(id, []byte(`{"ztAPI":"https://a:1","id":{"cert":"pem:garbage","key":"pem:x"}}`), 0o640)
	code, stdout, _ = runCLI(t, nil, "--config", path, "status")
	if code != 0 || !strings.Contains(stdout, "unreadable: identity "+id+": id.cert: no PEM CERTIFICATE block") {
		t.Errorf("a garbage identity: exit %d\n%s", code, stdout)
	}
}

// status reads the grants as the tick does: a FIFO in the bootstrap grant's (or the lease
// grant's) place is said at once, not waited on (os.ReadFile waited for a writer, and the
// operator's `status`, run to see why the tick refused the same FIFO, hung).
func TestStatusDoesNotWaitOnAFIFOGrant(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(dir+"/state", 0o700)
	os.WriteFile(dir+"/state/state.json", []byte(`{"env_id":"env-qa-02"}`), 0o600)
	for _, p := range []string{dir + "/bootstrap.jwt", dir + "/state/lease.jwt"} {
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := writeConfig(t, "env_id: env-qa-02\nsite: cbs\nstate_dir: "+dir+"/state\nbootstrap_file: "+dir+"/bootstrap.jwt\n")
	type result struct {
		code   int
		stdout string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, _ := runCLI(t, nil, "--config", path, "status")
		done <- result{code, stdout}
	}()
	select {
	case r := <-done:
		for _, want := range []string{
			"bootstrap grant: " + dir + "/bootstrap.jwt: unreadable: open " + dir + "/bootstrap.jwt: not a regular file (fifo)",
			"lease grant:     " + dir + "/state/lease.jwt: unreadable: open " + dir + "/state/lease.jwt: not a regular file (fifo)",
		} {
			if r.code != 0 || !strings.Contains(r.stdout, want) {
				t.Errorf("status (exit %d) lacks %q:\n%s", r.code, want, r.stdout)
			}
		}
	case <-time.After(10 * time.Second):
		for _, p := range []string{dir + "/bootstrap.jwt", dir + "/state/lease.jwt"} {
			if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
		}
		t.Fatal("status still waits on the FIFO grants after 10 s")
	}
}
