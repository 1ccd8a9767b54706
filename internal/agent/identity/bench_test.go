package identity_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity/identitytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// BenchmarkRenewNotDue is what every converged tick pays for the identity: read the file,
// decide nothing is due (the controller was asked within six hours), record the horizon. The
// parse itself is paid once per process (the check-in's read comes first, lastParsed keeps it):
// the first iteration parses, the rest are the memo's re-read and compare.
func BenchmarkRenewNotDue(b *testing.B) {
	ctrl, err := identitytest.Start(identitytest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer ctrl.Close()
	raw, err := ctrl.Enroll(name, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "id.json")
	if err := os.WriteFile(p, raw, 0o640); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	st := &state.State{Identity: &state.IdentityCert{AskedAt: &now}}
	r := &identity.Renewer{Path: p, Who: identity.Who{Transport: "sdk", Window: 30 * day}, Now: time.Now, Log: discard()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o, err := r.Renew(b.Context(), st, func() error { return nil })
		if err != nil || o.Renewed || o.FailedAt != "" {
			b.Fatalf("%+v %v", o, err)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
