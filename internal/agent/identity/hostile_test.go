package identity_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity/identitytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

// hostile wraps a real controller's sessions and rewrites what extend and verify answer.
type hostile struct {
	identity.Controller
	extend func(real []byte, err error) ([]byte, error)
	verify func(s identity.Session, certPEM []byte) error
}

func (h hostile) Open(ctx context.Context, f *identity.File) (identity.Session, error) {
	s, err := h.Controller.Open(ctx, f)
	if err != nil {
		return nil, err
	}
	return hostileSession{Session: s, h: h}, nil
}

type hostileSession struct {
	identity.Session
	h hostile
}

func (s hostileSession) Extend(ctx context.Context, csr []byte) ([]byte, error) {
	chain, err := s.Session.Extend(ctx, csr)
	if s.h.extend != nil {
		return s.h.extend(chain, err)
	}
	return chain, err
}

func (s hostileSession) Verify(ctx context.Context, certPEM []byte) error {
	if s.h.verify != nil {
		return s.h.verify(s.Session, certPEM)
	}
	return s.Session.Verify(ctx, certPEM)
}

// nextTick runs what the next tick runs: a new process's recovery, then its renewal.
func (b *box) nextTick() {
	b.t.Helper()
	r := b.renewer()
	if err := r.Recover(context.Background(), b.st, b.save); err != nil {
		b.t.Fatal(err)
	}
	b.renew(r)
}

// A verify that took effect at the controller but whose answer is a 4xx (a proxy's 408, a
// confused controller) must not drop the pending file: its key is the only one that works now.
func TestAVerifyThatTookEffectButAnswered4xxKeepsTheLiveKey(t *testing.T) {
	for _, status := range []int{400, 404, 408, 409} {
		b := newBox(t, 20*day)
		b.ctrl.Fail(identitytest.OpVerifyAnswer, identitytest.Failure{Status: status})
		b.renew(b.renewer())
		b.ctrl.Fail(identitytest.OpVerifyAnswer, identitytest.Failure{})
		b.clock.Advance(time.Minute)
		b.nextTick()
		if !b.authenticates() {
			t.Fatalf("status %d: the controller verified the new certificate, and the box lost its key:\n%s", status, b.logs.String())
		}
		b.noPending()
	}
}

// The same in the recovery: a verify of the pending certificate that took effect but answered a
// 4xx must not drop the pending file.
func TestARecoveryVerifyThatTookEffectButAnswered4xxKeepsTheLiveKey(t *testing.T) {
	b := killedAt(t, identity.StepPending)
	b.ctrl.Fail(identitytest.OpVerifyAnswer, identitytest.Failure{Status: 400})
	if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
		t.Fatal(err)
	}
	b.ctrl.Fail(identitytest.OpVerifyAnswer, identitytest.Failure{})
	b.clock.Advance(time.Minute)
	b.nextTick()
	if !b.authenticates() {
		t.Fatalf("the box lost its live key:\n%s", b.logs.String())
	}
	b.noPending()
}

// A verify that says yes without having taken effect (a 200 carrying an error, a proxy's page)
// must not put an unverified certificate in the identity's place.
func TestAVerifyThatSaysYesButDidNotTakeEffect(t *testing.T) {
	b := newBox(t, 20*day)
	r := b.renewer()
	r.Controller = hostile{Controller: r.Controller, verify: func(identity.Session, []byte) error { return nil }}
	b.renew(r)
	if !b.authenticates() {
		t.Fatalf("the identity holds a certificate the controller never verified:\n%s", b.logs.String())
	}
	b.expectLog("the controller answered the verification, yet refuses the new certificate")
	b.clock.Advance(time.Hour)
	b.nextTick()
	if !b.authenticates() || b.st.Identity.RenewedAt == nil {
		t.Fatalf("the next tick did not finish the renewal:\n%s", b.logs.String())
	}
	b.noPending()
}

// killedAt is a box whose renewal was killed at step: what a kill there leaves on disk, in the
// state and at the controller.
func killedAt(t *testing.T, step string) *box {
	t.Helper()
	b := newBox(t, 20*day)
	r := b.renewer()
	r.Step = func(s string) error {
		if s == step {
			return errKill
		}
		return nil
	}
	if _, err := r.Renew(context.Background(), b.st, b.save); err == nil {
		t.Fatal("not killed")
	}
	return b
}

// A pending file that is a symlink is refused, never read through, and never renamed over the
// identity.
func TestAPlantedPendingSymlinkIsNotFollowed(t *testing.T) {
	t.Run("to another identity the controller accepts", func(t *testing.T) {
		b := newBox(t, 20*day)
		other, err := b.ctrl.Enroll("another-box", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(t.TempDir(), "another.json")
		if err := os.WriteFile(target, other, 0o600); err != nil {
			t.Fatal(err)
		}
		before := b.file().Leaf().Fingerprint
		if err := os.Symlink(target, b.path+identity.PendingSuffix); err != nil {
			t.Fatal(err)
		}
		if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(b.path); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("the identity is no longer a regular file: %v %v", fi.Mode(), err)
		}
		if b.file().Leaf().Fingerprint != before {
			t.Fatalf("the box took another identity through a planted symlink:\n%s", b.logs.String())
		}
		if raw, _ := os.ReadFile(target); string(raw) != string(other) {
			t.Fatal("the symlink's target was changed")
		}
		b.expectLog("it is a symlink, which a renewal never writes")
		if fi, err := os.Lstat(b.path + identity.PendingSuffix + identity.RefusedSuffix); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the planted link was not set aside: %v", err)
		}
		b.noPending()
	})
	t.Run("to a FIFO", func(t *testing.T) {
		b := newBox(t, 20*day)
		fifo := filepath.Join(t.TempDir(), "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(fifo, b.path+identity.PendingSuffix); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- b.renewer().Recover(context.Background(), b.st, b.save) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			// Unblock the reader so the test can end.
			if f, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatal("the recovery hangs reading a planted FIFO")
		}
	})
	t.Run("a FIFO in its place", func(t *testing.T) {
		b := newBox(t, 20*day)
		if err := syscall.Mkfifo(b.path+identity.PendingSuffix, 0o600); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- b.renewer().Recover(context.Background(), b.st, b.save) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			if f, err := os.OpenFile(b.path+identity.PendingSuffix, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatal("the recovery hangs reading a FIFO")
		}
	})
}

// A pending file whose key is not its certificate's (damaged, or planted) is never verified or
// swapped in: the identity would hold a pair that cannot authenticate.
func TestAPendingFileWhoseKeyIsNotItsCertificates(t *testing.T) {
	b := killedAt(t, identity.StepPending)
	pending := b.path + identity.PendingSuffix
	raw, err := os.ReadFile(pending)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := identity.Parse(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The pending certificate with the current identity's key.
	bad, err := pf.WithCredentials(pf.CertPEM, b.file().KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pending, bad, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
		t.Fatal(err)
	}
	if !b.authenticates() {
		t.Fatalf("the identity no longer authenticates:\n%s", b.logs.String())
	}
	b.noPending()
	b.clock.Advance(time.Minute)
	b.nextTick()
	if !b.authenticates() || b.st.Identity.RenewedAt == nil {
		t.Fatalf("not renewed after the bad pending file:\n%s", b.logs.String())
	}
}

// A pending file of another identity (another box's file copied in) is not swapped in.
func TestAPendingFileOfAnotherIdentityIsNotSwappedIn(t *testing.T) {
	b := newBox(t, 20*day)
	other, err := b.ctrl.Enroll("another-box", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.path+identity.PendingSuffix, other, 0o640); err != nil {
		t.Fatal(err)
	}
	before := b.file().Leaf().Fingerprint
	if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
		t.Fatal(err)
	}
	if b.file().Leaf().Fingerprint != before {
		t.Fatalf("the box took another identity's file:\n%s", b.logs.String())
	}
	b.expectLog(`its certificate is for "another-box", the identity's for "` + name + `"`)
	if raw, err := os.ReadFile(b.path + identity.PendingSuffix + identity.RefusedSuffix); err != nil || string(raw) != string(other) {
		t.Errorf("the foreign file was not set aside as it was: %v", err)
	}
	b.noPending()
	// It no longer stands in the way of the box's own renewal.
	b.nextTick()
	if b.file().Leaf().Fingerprint == before || !b.authenticates() {
		t.Fatalf("not renewed:\n%s", b.logs.String())
	}
}

// Whatever the controller answers to extend, the identity keeps a certificate that works, and a
// certificate that is not for this key, this identity or a later end is never verified.
func TestHostileExtendAnswers(t *testing.T) {
	otherPEM := func(b *box) []byte {
		raw, err := b.ctrl.Enroll("another-box", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		f, err := identity.Parse(raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		return f.CertPEM
	}
	cases := []struct {
		name   string
		answer func(b *box, real []byte) []byte
		log    string
	}{
		{"not PEM", func(*box, []byte) []byte { return []byte("<html>502 Bad Gateway</html>") }, "the controller's certificate: no PEM CERTIFICATE block"},
		{"a certificate for another key", func(b *box, _ []byte) []byte { return b.file().CertPEM }, "not for the key the agent sent"},
		{"another identity's certificate", func(b *box, _ []byte) []byte { return otherPEM(b) }, "not for the key the agent sent"},
		{"the CA first", func(b *box, real []byte) []byte {
			blocks := strings.SplitAfter(string(real), "-----END CERTIFICATE-----\n")
			return []byte(blocks[1] + blocks[0])
		}, "not for the key the agent sent"},
		{"more than a megabyte", func(_ *box, real []byte) []byte {
			return append(real, []byte(strings.Repeat("x", 2<<20))...)
		}, "more than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, 20*day)
			before := b.file().Leaf().Fingerprint
			r := b.renewer()
			r.Controller = hostile{Controller: r.Controller, extend: func(real []byte, err error) ([]byte, error) {
				if err != nil {
					return nil, err
				}
				return tc.answer(b, real), nil
			}}
			if o := b.renew(r); o.FailedAt != "extend" {
				t.Fatalf("outcome %+v\n%s", o, b.logs.String())
			}
			b.expectLog(tc.log)
			b.expectLog("identity: renewal failed at extend:")
			if b.file().Leaf().Fingerprint != before || !b.authenticates() || b.ctrl.Counts(name).Verifies != 0 {
				t.Fatalf("the identity changed or something was verified:\n%s", b.logs.String())
			}
			b.noPending()
		})
	}
}

// A certificate signed for this key but for another common name (another identity) is refused
// before it is verified.
func TestAnExtendedCertificateOfAnotherNameIsRefused(t *testing.T) {
	b := newBox(t, 20*day)
	b.ctrl.SignAs(name, "another-box")
	before := b.file().Leaf().Fingerprint
	if o := b.renew(b.renewer()); o.FailedAt != "extend" {
		t.Fatalf("outcome %+v\n%s", o, b.logs.String())
	}
	b.expectLog(`the controller's certificate is for "another-box", not for this identity ("` + name + `")`)
	if b.file().Leaf().Fingerprint != before || !b.authenticates() || b.ctrl.Counts(name).Verifies != 0 {
		t.Fatalf("the identity changed or the certificate was verified:\n%s", b.logs.String())
	}
	b.noPending()
}

// Only the certificates the agent checked reach the identity file: another PEM block in the
// controller's answer (garbage, a key) is not written.
func TestOnlyCheckedCertificatesAreWritten(t *testing.T) {
	b := newBox(t, 20*day)
	r := b.renewer()
	junk := "-----BEGIN JUNK-----\nAAAA\n-----END JUNK-----\ntrailing words\n"
	r.Controller = hostile{Controller: r.Controller, extend: func(real []byte, err error) ([]byte, error) {
		return append(append([]byte(junk), real...), junk...), err
	}}
	if o := b.renew(r); !o.Renewed {
		t.Fatalf("outcome %+v\n%s", o, b.logs.String())
	}
	f := b.file()
	if strings.Contains(string(f.CertPEM), "JUNK") || strings.Contains(string(f.CertPEM), "trailing") {
		t.Errorf("id.cert holds what was not checked:\n%s", f.CertPEM)
	}
	if len(f.Cert) != 2 || !b.authenticates() {
		t.Errorf("id.cert has %d certificates", len(f.Cert))
	}
}

// A pending file the agent cannot read may hold the live key: it is kept, with the fix.
func TestAnUnreadablePendingFileIsKept(t *testing.T) {
	b := killedAt(t, identity.StepPending)
	pending := b.path + identity.PendingSuffix
	defer identity.FailOpenPending(syscall.EACCES)()
	if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(pending); err != nil {
		t.Fatalf("the pending file was removed unread: %v\n%s", err, b.logs.String())
	}
	b.expectLog("identity: cannot read the pending renewal file " + pending + ": permission denied; fix: chown ")
}

// A key pasted without its PEM armour (base64 DER) reads as a relative file path; no error,
// journal line or status field may repeat it.
func TestAKeyWithoutItsArmourIsNeverRepeated(t *testing.T) {
	b := newBox(t, 20*day)
	f := b.file()
	block, _ := pem.Decode(f.KeyPEM)
	bare := base64.StdEncoding.EncodeToString(block.Bytes)
	var top map[string]any
	raw, _ := os.ReadFile(b.path)
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	top["id"].(map[string]any)["key"] = bare
	raw, _ = json.Marshal(top)
	if err := os.WriteFile(b.path, raw, 0o640); err != nil {
		t.Fatal(err)
	}
	secret := bare[8:40]
	_, perr := identity.Parse(raw, nil)
	cerr := transport.CheckIdentity(b.path, nil)
	for _, err := range []error{perr, cerr} {
		if err == nil || strings.Contains(err.Error(), secret) {
			t.Errorf("the key is repeated (or no error): %v", err)
		}
	}
	if perr != nil && !strings.Contains(perr.Error(), "id.key: referenced file (a relative path, not shown") {
		t.Errorf("Parse = %v", perr)
	}
	b.renew(b.renewer())
	if strings.Contains(b.logs.String(), secret) {
		t.Errorf("the journal repeats the key:\n%s", b.logs.String())
	}
}

// A 401 in the middle of a renewal (the API session ended between authenticate and extend or
// verify) is not a refused certificate: the line must not send the operator to re-enrol, and the
// renewal goes through once the controller answers again.
func TestA401MidRenewalIsNotARefusedCertificate(t *testing.T) {
	for _, op := range []identitytest.Op{identitytest.OpExtend, identitytest.OpVerify} {
		t.Run(string(op), func(t *testing.T) {
			b := newBox(t, 20*day)
			b.ctrl.Fail(op, identitytest.Failure{Status: 401})
			if o := b.renew(b.renewer()); o.FailedAt != string(map[identitytest.Op]string{identitytest.OpExtend: "extend", identitytest.OpVerify: "verify"}[op]) {
				t.Fatalf("outcome %+v", o)
			}
			if strings.Contains(b.logs.String(), "re-enrol") {
				t.Errorf("a session's 401 sends the operator to re-enrol:\n%s", b.logs.String())
			}
			b.expectLog("the controller ended the API session")
			if !b.authenticates() {
				t.Fatal("the identity does not authenticate")
			}
			b.ctrl.Fail(op, identitytest.Failure{})
			b.clock.Advance(31 * time.Minute)
			b.nextTick()
			if !b.authenticates() || b.st.Identity.RenewedAt == nil {
				t.Fatalf("not renewed once the controller answered:\n%s", b.logs.String())
			}
		})
	}
}

// An identity whose key an engine holds (pkcs11:) cannot authenticate from the agent: while it
// is not due the controller is not asked, and no failure is logged or recorded every few hours.
func TestAnEngineKeyIsNotAskedAbout(t *testing.T) {
	b := newBox(t, 300*day)
	var top map[string]any
	raw, _ := os.ReadFile(b.path)
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatal(err)
	}
	top["id"].(map[string]any)["key"] = "pkcs11:///usr/lib/softhsm/libsofthsm2.so?slot=0&id=01"
	raw, _ = json.Marshal(top)
	if err := os.WriteFile(b.path, raw, 0o640); err != nil {
		t.Fatal(err)
	}
	r := b.renewer()
	for range 3 {
		if o := b.renew(r); o.FailedAt != "" {
			t.Fatalf("outcome %+v\n%s", o, b.logs.String())
		}
		b.clock.Advance(7 * time.Hour)
	}
	if rec := b.st.Identity; rec == nil || rec.Renewal != nil {
		t.Errorf("a failure was recorded: %+v", rec.Renewal)
	}
	if strings.Contains(b.logs.String(), "WARN") {
		t.Errorf("warnings for an identity that is not due:\n%s", b.logs.String())
	}
}

// A controller that signs for less than identity_renew_below_s returns certificates that are due
// at once: the agent must not renew on every tick (every minute) for as long as that lasts.
func TestACertificateLifeShorterThanTheWindowDoesNotRenewEveryTick(t *testing.T) {
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	ctrl, err := identitytest.Start(identitytest.Options{Now: c.Now, Life: 10 * day})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Close)
	raw, err := ctrl.Enroll(name, c.Now().Add(9*day))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), name+".json")
	if err := os.WriteFile(p, raw, 0o640); err != nil {
		t.Fatal(err)
	}
	b := &box{t: t, ctrl: ctrl, clock: c, path: p, st: &state.State{}, logs: &syncbuf.Buffer{}}
	for range 60 { // an hour of ticks
		b.clock.Advance(time.Minute)
		b.nextTick()
	}
	if n := ctrl.Counts(name).Extends; n != 1 {
		t.Fatalf("%d renewals in an hour of ticks, want 1:\n%s", n, b.logs.String())
	}
	b.expectLog("the renewed certificate is already within identity_renew_below_s")
	if !b.authenticates() {
		t.Fatal("the identity does not authenticate")
	}
	// It is renewed again before it expires.
	for range 40 {
		b.clock.Advance(6 * time.Hour)
		b.nextTick()
	}
	if n := ctrl.Counts(name).Extends; n < 2 || !b.authenticates() {
		t.Fatalf("%d renewals in ten days; authenticates %v:\n%s", n, b.authenticates(), b.logs.String())
	}
	if r := b.st.Identity.Renewal; r == nil || r.NextTryAt == nil {
		t.Fatalf("after the last renewal nothing is held back: %+v", r)
	}
	// The operator lowers the window below the controller's life: the hold is dropped, not shown.
	short := b.renewer()
	short.Who.Window = time.Hour
	b.clock.Advance(time.Minute)
	b.renew(short)
	if r := b.st.Identity.Renewal; r != nil {
		t.Errorf("a window that no longer covers the certificate still holds a renewal back: %+v", r)
	}
}

// A next try or an ask time far in the future (a clock that ran ahead, a hand edit) is lapsed,
// not obeyed: the renewal is not stopped until the certificate expires.
func TestBackoffFromTheFutureIsLapsed(t *testing.T) {
	b := newBox(t, 20*day)
	far := b.clock.Now().Add(10 * 365 * day)
	b.st.Identity = &state.IdentityCert{AskedAt: &far, Renewal: &state.IdentityRenewal{StartedAt: far, Failures: 9, NextTryAt: &far, LastError: "extend: x"}}
	if o := b.renew(b.renewer()); !o.Renewed {
		t.Fatalf("outcome %+v\n%s", o, b.logs.String())
	}
	b2 := newBox(t, 300*day)
	b2.ctrl.RequestExtend(name, false)
	b2.st.Identity = &state.IdentityCert{AskedAt: &far}
	if o := b2.renew(b2.renewer()); !o.Renewed {
		t.Fatalf("an ask time in the future stopped the asking: %+v\n%s", o, b2.logs.String())
	}
}

// An endless answer to extend (a broken proxy, a hostile controller) is read no further than a
// certificate chain could need, not into memory until the timeout.
func TestAHugeExtendAnswerIsNotReadWhole(t *testing.T) {
	b := newBox(t, 20*day)
	written := make(chan int64, 1)
	b.ctrl.Answer(identitytest.OpExtend, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		var n int64
		defer func() { written <- n }()
		k, err := io.WriteString(w, `{"data":{"clientCert":"`)
		n += int64(k)
		if err != nil {
			return
		}
		chunk := []byte(strings.Repeat("A", 64<<10))
		for n < 64<<20 {
			k, err := w.Write(chunk)
			n += int64(k)
			if err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}}`)
	})
	before := b.file().Leaf().Fingerprint
	if o := b.renew(b.renewer()); o.FailedAt != "extend" {
		t.Fatalf("outcome %+v", o)
	}
	if n := <-written; n >= 16<<20 {
		t.Errorf("the agent read %d MiB of the answer", n>>20)
	}
	b.expectLog("larger than")
	if b.file().Leaf().Fingerprint != before || !b.authenticates() {
		t.Fatal("the identity changed")
	}
}

// An identity file removed by hand while a verified renewal waits for its swap: the pending file
// is all the box has, and the recovery puts it in place.
func TestAVerifiedPendingFileOutlivesARemovedIdentity(t *testing.T) {
	b := killedAt(t, identity.StepVerified)
	if err := os.Remove(b.path); err != nil {
		t.Fatal(err)
	}
	if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
		t.Fatal(err)
	}
	if !b.authenticates() {
		t.Fatalf("the verified certificate was not put in place:\n%s", b.logs.String())
	}
	b.noPending()
}
