package identity_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity/identitytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/syncbuf"
)

const name = "monky-host.env-qa-02"

const day = 24 * time.Hour

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// box is one identity file, the fake controller that enrolled it, and the state a tick keeps.
type box struct {
	t     *testing.T
	ctrl  *identitytest.Server
	clock *clock
	path  string
	st    *state.State
	logs  *syncbuf.Buffer
	saves int
	// saveErr, when set, makes every state save fail (a full disk).
	saveErr error
}

// newBox enrols an identity whose certificate is valid for left and writes it 0640.
func newBox(t *testing.T, left time.Duration) *box {
	t.Helper()
	c := &clock{t: time.Now().UTC().Truncate(time.Second)}
	ctrl, err := identitytest.Start(identitytest.Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctrl.Close)
	raw, err := ctrl.Enroll(name, c.Now().Add(left))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := filepath.Join(dir, name+".json")
	if err := os.WriteFile(p, raw, 0o640); err != nil {
		t.Fatal(err)
	}
	return &box{t: t, ctrl: ctrl, clock: c, path: p, st: &state.State{}, logs: &syncbuf.Buffer{}}
}

// renewer is what a tick of the sdk transport builds, with a 30-day window.
func (b *box) renewer() *identity.Renewer {
	return &identity.Renewer{
		Path:       b.path,
		Who:        identity.Who{Transport: "sdk", Window: 30 * day},
		Controller: transport.Extender{Timeout: 10 * time.Second},
		Now:        b.clock.Now,
		Log:        slog.New(journal.New(b.logs, slog.LevelDebug)),
	}
}

func (b *box) save() error {
	b.saves++
	return b.saveErr
}

func (b *box) renew(r *identity.Renewer) identity.Outcome {
	b.t.Helper()
	o, err := r.Renew(context.Background(), b.st, b.save)
	if err != nil {
		b.t.Fatalf("Renew: %v", err)
	}
	return o
}

// file reads the identity file as the transport would.
func (b *box) file() *identity.File {
	b.t.Helper()
	raw, err := os.ReadFile(b.path)
	if err != nil {
		b.t.Fatal(err)
	}
	f, err := identity.Parse(raw, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	return f
}

// authenticates proves the identity file's certificate and key open a session at the controller.
func (b *box) authenticates() bool {
	b.t.Helper()
	s, err := transport.Extender{}.Open(context.Background(), b.file())
	if err != nil {
		return false
	}
	s.Close(context.Background())
	return true
}

func (b *box) expectLog(substr string) {
	b.t.Helper()
	if !strings.Contains(b.logs.String(), substr) {
		b.t.Errorf("journal lacks %q:\n%s", substr, b.logs.String())
	}
}

func (b *box) noPending() {
	b.t.Helper()
	if _, err := os.Lstat(b.path + identity.PendingSuffix); !errors.Is(err, os.ErrNotExist) {
		b.t.Errorf("the pending file is still there (%v)", err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(b.path), ".*.tmp-*"))
	if len(left) > 0 {
		b.t.Errorf("temp files left: %v", left)
	}
}

func stat(t *testing.T, p string) syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// A certificate inside the window is renewed: a new key and certificate in the same file (same
// mode, owner and group, every other field kept), the controller accepts only the new one, and
// the API session is deleted again.
func TestRenewWhenDue(t *testing.T) {
	b := newBox(t, 20*day)
	before := b.file()
	beforeStat := stat(t, b.path)
	forget := filepath.Join(t.TempDir(), "session.json")
	if err := os.WriteFile(forget, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := b.renewer()
	r.Forget = []string{forget}

	o := b.renew(r)
	if !o.Renewed || o.FailedAt != "" {
		t.Fatalf("outcome %+v; journal:\n%s", o, b.logs.String())
	}
	after := b.file()
	switch {
	case after.Leaf().Fingerprint == before.Leaf().Fingerprint:
		t.Fatal("the identity still holds the old certificate")
	case string(after.KeyPEM) == string(before.KeyPEM):
		t.Error("the key was not rolled")
	case !after.Leaf().NotAfter.Equal(b.clock.Now().Add(365 * day)):
		t.Errorf("new certificate valid until %s, want a year from now", after.Leaf().NotAfter)
	case !identity.KeyMatches(after.Key, after.Leaf().X509):
		t.Error("the new key does not belong to the new certificate")
	case string(after.CAPEM) != string(before.CAPEM) || after.Controllers[0] != before.Controllers[0]:
		t.Error("the CA or the controller changed")
	}
	if st := stat(t, b.path); st.Mode != beforeStat.Mode || st.Uid != beforeStat.Uid || st.Gid != beforeStat.Gid {
		t.Errorf("mode/owner/group %o %d:%d, was %o %d:%d", st.Mode, st.Uid, st.Gid, beforeStat.Mode, beforeStat.Uid, beforeStat.Gid)
	}
	var top map[string]any
	raw, _ := os.ReadFile(b.path)
	if err := json.Unmarshal(raw, &top); err != nil || top["enableHa"] != false {
		t.Errorf("fields the agent does not know were dropped: %v %v", err, top)
	}
	if !b.ctrl.Accepts(name, after.CertPEM) || b.ctrl.Accepts(name, before.CertPEM) {
		t.Error("the controller should accept the new certificate and refuse the old")
	}
	if !b.authenticates() {
		t.Error("the renewed identity does not authenticate")
	}
	c := b.ctrl.Counts(name)
	if c.Extends != 1 || c.Verifies != 1 || c.Opened != c.Closed {
		t.Errorf("controller counts %+v", c)
	}
	rec := b.st.Identity
	if rec == nil || rec.Renewal != nil || rec.RenewedAt == nil || !rec.NotAfter.Equal(after.Leaf().NotAfter) || rec.Fingerprint != after.Leaf().Fingerprint {
		t.Errorf("state record %+v", rec)
	}
	if _, err := os.Stat(forget); !errors.Is(err, os.ErrNotExist) {
		t.Error("the cached controller session was not forgotten")
	}
	b.noPending()
	b.expectLog("identity: certificate renewed: valid until")
	b.expectLog("within identity_renew_below_s (30d)")

	// Renewed, it is no longer due: the next tick asks the controller nothing (asked within 6 h).
	b.clock.Advance(time.Minute)
	opened := b.ctrl.Counts(name).Opened
	if o := b.renew(b.renewer()); o.Renewed || o.FailedAt != "" || b.ctrl.Counts(name).Opened != opened {
		t.Errorf("a fresh certificate was touched: %+v, %+v", o, b.ctrl.Counts(name))
	}
}

// Not due, the controller is asked for its request flags at most every six hours; a request
// (key roll) renews at once.
func TestTheControllerIsAskedEverySixHoursAndItsRequestRenews(t *testing.T) {
	b := newBox(t, 300*day)
	r := b.renewer()
	b.renew(r)
	if c := b.ctrl.Counts(name); c.Opened != 1 || c.Closed != 1 || c.Extends != 0 {
		t.Fatalf("first tick: %+v", c)
	}
	for _, d := range []time.Duration{time.Minute, time.Hour, 4 * time.Hour} {
		b.clock.Advance(d)
		b.renew(r)
	}
	if c := b.ctrl.Counts(name); c.Opened != 1 {
		t.Fatalf("asked again within six hours: %+v", c)
	}
	b.clock.Advance(time.Hour) // six hours since the first ask
	b.ctrl.RequestExtend(name, true)
	if o := b.renew(r); !o.Renewed {
		t.Fatalf("a key roll request did not renew: %+v\n%s", o, b.logs.String())
	}
	b.expectLog("the controller requests a new key (key roll requested)")
	if !b.authenticates() {
		t.Error("the renewed identity does not authenticate")
	}
}

// Whoever else holds the identity renews it; the agent only records its horizon.
func TestOnlyTheIdentitysOnlyUserRenews(t *testing.T) {
	active := func(context.Context) (bool, error) { return true, nil }
	tests := []struct {
		name string
		who  func(dir string) identity.Who
		by   string
	}{
		{"system transport", func(string) identity.Who { return identity.Who{Transport: "system", Window: 30 * day} }, identity.ByTunneller},
		{"the tunneller's directory, its unit active", func(dir string) identity.Who {
			return identity.Who{Transport: "sdk", Window: 30 * day, TunnellerDir: dir, TunnellerActive: active}
		}, identity.ByTunneller},
		{"a tick of the proxy transport", func(string) identity.Who { return identity.Who{Transport: "proxy", Window: 30 * day} }, identity.ByProxy},
		{"renewal off", func(string) identity.Who { return identity.Who{Transport: "sdk"} }, identity.Off},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := newBox(t, 20*day)
			r := b.renewer()
			r.Who = tc.who(filepath.Dir(b.path))
			o := b.renew(r)
			if o.Owner.By != tc.by || o.Renewed {
				t.Errorf("outcome %+v, want by %s and nothing renewed", o, tc.by)
			}
			if c := b.ctrl.Counts(name); c.Opened != 0 {
				t.Errorf("the controller was called: %+v", c)
			}
			if rec := b.st.Identity; rec == nil || rec.NotAfter == nil || !rec.NotAfter.Equal(b.file().Leaf().NotAfter) {
				t.Errorf("the horizon was not recorded: %+v", rec)
			}
		})
	}
	t.Run("the tunneller's directory, its unit inactive", func(t *testing.T) {
		b := newBox(t, 20*day)
		r := b.renewer()
		r.Who.TunnellerDir = filepath.Dir(b.path)
		r.Who.TunnellerActive = func(context.Context) (bool, error) { return false, nil }
		if o := b.renew(r); !o.Renewed {
			t.Errorf("not renewed with the tunneller stopped: %+v", o)
		}
	})
}

// A failed renewal keeps the identity, names the step and the fix, and backs off.
func TestFailuresBackOff(t *testing.T) {
	b := newBox(t, 20*day)
	before := b.file()
	b.ctrl.Fail(identitytest.OpExtend, identitytest.Failure{Status: 503})
	r := b.renewer()
	if o := b.renew(r); o.FailedAt != "extend" || !errors.Is(o.Err, identity.ErrUnreachable) {
		t.Fatalf("outcome %+v", o)
	}
	b.expectLog("identity: renewal failed at extend:")
	b.expectLog("the current certificate stays in use")
	b.expectLog("next try in 30m0s")
	rec := b.st.Identity.Renewal
	if rec == nil || rec.Failures != 1 || !strings.HasPrefix(rec.LastError, "extend:") || !rec.NextTryAt.Equal(b.clock.Now().Add(30*time.Minute)) {
		t.Fatalf("renewal record %+v", rec)
	}
	if b.file().Leaf().Fingerprint != before.Leaf().Fingerprint || !b.authenticates() {
		t.Fatal("the identity did not keep its working certificate")
	}
	opened := b.ctrl.Counts(name).Opened
	b.clock.Advance(20 * time.Minute)
	b.renew(r)
	if b.ctrl.Counts(name).Opened != opened {
		t.Fatal("the controller was asked again before the next try")
	}
	b.clock.Advance(11 * time.Minute)
	b.renew(r)
	if rec := b.st.Identity.Renewal; rec.Failures != 2 || !rec.NextTryAt.Equal(b.clock.Now().Add(time.Hour)) {
		t.Fatalf("second failure: %+v", rec)
	}
	b.ctrl.Fail(identitytest.OpExtend, identitytest.Failure{})
	b.clock.Advance(time.Hour)
	if o := b.renew(r); !o.Renewed || b.st.Identity.Renewal != nil {
		t.Fatalf("after the controller recovered: %+v %+v", o, b.st.Identity.Renewal)
	}
}

func TestWhatCannotBeRenewed(t *testing.T) {
	t.Run("a certificate a third-party CA issued", func(t *testing.T) {
		b := newBox(t, 20*day)
		b.ctrl.SetExtendable(name, false)
		if o := b.renew(b.renewer()); o.FailedAt != "extend" {
			t.Fatalf("outcome %+v", o)
		}
		b.expectLog("not extendable (a third-party CA issued it)")
		if c := b.ctrl.Counts(name); c.Extends != 0 {
			t.Errorf("extend was called: %+v", c)
		}
	})
	t.Run("an expired certificate", func(t *testing.T) {
		b := newBox(t, 20*day)
		b.clock.Advance(21 * day)
		if o := b.renew(b.renewer()); o.FailedAt != "expired" {
			t.Fatalf("outcome %+v", o)
		}
		b.expectLog("cannot be renewed: re-enrol this box")
		if c := b.ctrl.Counts(name); c.Opened != 0 {
			t.Errorf("the controller was called: %+v", c)
		}
	})
	t.Run("a file the agent cannot replace", func(t *testing.T) {
		b := newBox(t, 20*day)
		r := b.renewer()
		r.Perms = identity.Perms{
			Lstat:     func(string) (identity.Stat, error) { return identity.Stat{Mode: 0o640, UID: 0, GID: 64124}, nil },
			Euid:      func() int { return 64123 },
			UserName:  func(uid uint32) string { return map[uint32]string{0: "root", 64123: "monky-deployd"}[uid] },
			GroupName: func(uint32) string { return "ziti" },
		}
		for range 2 { // once per tick, every tick
			if o := b.renew(r); o.FailedAt != "permissions" {
				t.Fatalf("outcome %+v", o)
			}
		}
		if n := strings.Count(b.logs.String(), "identity: cannot renew "+b.path+": "); n != 2 {
			t.Errorf("%d lines, want one per tick:\n%s", n, b.logs.String())
		}
		b.expectLog("belongs to root, and a renewed file written by monky-deployd would belong to monky-deployd; fix: chown monky-deployd " + b.path)
		if c := b.ctrl.Counts(name); c.Opened != 0 {
			t.Errorf("the controller was called: %+v", c)
		}
	})
}

var errKill = errors.New("killed")

// A renewal killed after any step leaves an identity that authenticates, and the next tick
// finishes it (or starts over) and converges on a renewed identity.
func TestARenewalKilledAtAnyStepIsFinishedByTheNextTick(t *testing.T) {
	cases := []struct {
		step string
		// saveFails: the state write before the kill failed too (a full disk): only the file tells.
		saveFails bool
	}{
		{step: identity.StepExtended}, {step: identity.StepPending}, {step: identity.StepPending, saveFails: true},
		{step: identity.StepVerified}, {step: identity.StepSwapped},
	}
	for _, tc := range cases {
		title := tc.step
		if tc.saveFails {
			title += ", state unsaved"
		}
		t.Run(title, func(t *testing.T) {
			b := newBox(t, 20*day)
			old := b.file()
			r := b.renewer()
			reached := false
			r.Step = func(s string) error {
				if s == tc.step {
					reached = true
					return errKill
				}
				return nil
			}
			b.saveErr = nil
			if tc.saveFails {
				b.saveErr = errors.New("no space left on device")
			}
			_, err := r.Renew(context.Background(), b.st, b.save)
			var stop *identity.StepStop
			if !errors.As(err, &stop) || !reached {
				t.Fatalf("Renew = %v, want the kill at %s", err, tc.step)
			}
			if tc.saveFails {
				b.st = &state.State{} // what the next tick loads: nothing of the renewal
			}
			b.saveErr = nil

			// The next tick: a new process recovers before anything loads the identity.
			next := b.renewer()
			if err := next.Recover(context.Background(), b.st, b.save); err != nil {
				t.Fatal(err)
			}
			if !b.authenticates() {
				t.Fatalf("after a kill at %s and the recovery the identity does not authenticate:\n%s", tc.step, b.logs.String())
			}
			b.noPending()
			if o := b.renew(next); o.FailedAt != "" {
				t.Fatalf("the tick after the recovery: %+v\n%s", o, b.logs.String())
			}
			f := b.file()
			if f.Leaf().Fingerprint == old.Leaf().Fingerprint || !b.ctrl.Accepts(name, f.CertPEM) || b.ctrl.Accepts(name, old.CertPEM) {
				t.Fatalf("not converged on a renewed identity:\n%s", b.logs.String())
			}
			if rec := b.st.Identity; rec == nil || rec.Renewal != nil || rec.RenewedAt == nil {
				t.Errorf("state record %+v", rec)
			}
			b.noPending()
		})
	}
}

// A verify that took effect but whose answer was lost: the same process settles it at its next
// round (the proxy daemon), and only the new certificate is used.
func TestAVerifyWhoseAnswerWasLostIsSettled(t *testing.T) {
	b := newBox(t, 20*day)
	b.ctrl.Fail(identitytest.OpVerifyAnswer, identitytest.Failure{Status: 502})
	r := b.renewer()
	if o := b.renew(r); o.FailedAt != "verify" {
		t.Fatalf("outcome %+v", o)
	}
	if _, err := os.Stat(b.path + identity.PendingSuffix); err != nil {
		t.Fatalf("the pending file was not kept: %v", err)
	}
	if b.authenticates() {
		t.Fatal("the controller verified the new certificate, yet the identity file still authenticates")
	}
	b.ctrl.Fail(identitytest.OpVerifyAnswer, identitytest.Failure{})
	b.renew(r) // the next round of the same process: the pending file is settled first
	if !b.authenticates() {
		t.Fatalf("not settled:\n%s", b.logs.String())
	}
	b.expectLog("finished the renewal a killed process left: the controller had verified the new certificate")
	b.noPending()
}

// A verify the controller refuses drops the pending file; the old certificate stays.
func TestARefusedVerifyKeepsTheOldCertificate(t *testing.T) {
	b := newBox(t, 20*day)
	b.ctrl.Fail(identitytest.OpVerify, identitytest.Failure{Status: 400})
	if o := b.renew(b.renewer()); o.FailedAt != "verify" || !errors.Is(o.Err, identity.ErrRejected) {
		t.Fatalf("outcome %+v", o)
	}
	b.noPending()
	if !b.authenticates() {
		t.Fatal("the old certificate no longer authenticates")
	}
}

func TestRecovery(t *testing.T) {
	t.Run("the controller unreachable: both files stay for the next tick", func(t *testing.T) {
		b := killedAt(t, identity.StepPending)
		b.ctrl.Fail(identitytest.OpAuthenticate, identitytest.Failure{Status: 503})
		if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(b.path + identity.PendingSuffix); err != nil {
			t.Fatal("the pending file is gone")
		}
		b.expectLog("the next tick finishes it")
		b.ctrl.Fail(identitytest.OpAuthenticate, identitytest.Failure{})
		if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
			t.Fatal(err)
		}
		if !b.authenticates() || b.st.Identity.Renewal != nil {
			t.Fatalf("not finished: %+v\n%s", b.st.Identity, b.logs.String())
		}
		b.noPending()
	})
	t.Run("an unreadable pending file is removed", func(t *testing.T) {
		b := killedAt(t, identity.StepPending)
		if err := os.WriteFile(b.path+identity.PendingSuffix, []byte("{garbage"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
			t.Fatal(err)
		}
		b.noPending()
		b.expectLog("the pending renewal file is unreadable; removing it")
		if !b.authenticates() {
			t.Fatal("the identity does not authenticate")
		}
	})
	t.Run("temp files of a killed write are removed", func(t *testing.T) {
		b := newBox(t, 20*day)
		tmp := filepath.Join(filepath.Dir(b.path), "."+filepath.Base(b.path)+identity.PendingSuffix+".tmp-0123456789abcdef")
		if err := os.WriteFile(tmp, []byte("half"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := b.renewer().Recover(context.Background(), b.st, b.save); err != nil {
			t.Fatal(err)
		}
		b.noPending()
	})
	t.Run("the state is read only by the identity's renewer, once", func(t *testing.T) {
		b := killedAt(t, identity.StepPending)
		loads := 0
		load := func() (*state.State, func() error) { loads++; return b.st, b.save }
		r := b.renewer()
		r.Who = identity.Who{Transport: "system", Window: 30 * day}
		if err := r.RecoverLoading(context.Background(), load); err != nil || loads != 0 {
			t.Fatalf("the tunneller's identity: %v, state read %d times, want none", err, loads)
		}
		r = b.renewer()
		_ = r.RecoverLoading(context.Background(), load)
		_ = r.RecoverLoading(context.Background(), load)
		if loads != 1 {
			t.Fatalf("the agent's identity: state read %d times, want once", loads)
		}
		if !b.authenticates() || b.st.Identity.Renewal != nil {
			t.Fatalf("not finished: %+v\n%s", b.st.Identity, b.logs.String())
		}
	})
	t.Run("recovery runs once per process", func(t *testing.T) {
		b := killedAt(t, identity.StepPending)
		r := b.renewer()
		b.ctrl.Fail(identitytest.OpAuthenticate, identitytest.Failure{Status: 503})
		_ = r.Recover(context.Background(), b.st, b.save)
		b.ctrl.Fail(identitytest.OpAuthenticate, identitytest.Failure{})
		_ = r.Recover(context.Background(), b.st, b.save)
		if _, err := os.Stat(b.path + identity.PendingSuffix); err != nil {
			t.Fatal("a second Recover of the same process acted")
		}
	})
}
