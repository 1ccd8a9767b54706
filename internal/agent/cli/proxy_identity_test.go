package cli

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity/identitytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

// The proxy daemon's rounds renew under the tick lock and say when the certificate changed (the
// proxy then reloads it); a tick holding the lock makes a round wait for the next.
func TestProxyKeeperRounds(t *testing.T) {
	ctrl, err := identitytest.Start(identitytest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ctrl.Close()
	dir := t.TempDir()
	raw, err := ctrl.Enroll("monky-host.env-qa-02", time.Now().Add(10*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	id := filepath.Join(dir, "id.json")
	os.WriteFile(id, raw, 0o640)
	cfg, err := config.Parse([]byte("env_id: env-qa-02\ntransport: proxy\nidentity: "+id+"\nstate_dir: "+dir+"/state\n"), filepath.Join(dir, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	log := slog.New(journal.New(logs, slog.LevelDebug))
	k := &proxyKeeper{cfg: cfg, log: log, rn: newRenewer(cfg, log, true)}

	os.MkdirAll(cfg.StateDir, 0o700)
	lock, err := os.OpenFile(cfg.LockPath(), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if k.round(context.Background()) || ctrl.Counts("monky-host.env-qa-02").Opened != 0 {
		t.Fatal("a round ran while a tick held the lock")
	}
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)

	if !k.round(context.Background()) {
		t.Fatalf("the round did not renew a certificate 10 days from its end:\n%s", logs.String())
	}
	st, err := state.Load(cfg.StatePath())
	if err != nil || st.Identity == nil || st.Identity.RenewedAt == nil {
		t.Fatalf("state after the round: %+v %v", st.Identity, err)
	}
	if k.round(context.Background()) {
		t.Error("a second round changed a fresh certificate")
	}
	// A tick of the same config only reports: it is the daemon's to renew.
	if o := newRenewer(cfg, log, false).Who.Decide(context.Background(), id); o.By != identity.ByProxy {
		t.Errorf("a tick of the proxy transport: %+v", o)
	}
}
