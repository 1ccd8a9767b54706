package identity

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/horizon"
)

// Controller opens API sessions at the controller's edge client API, authenticated by TLS with
// the certificate and key of an identity file (transport.Extender is the real one). Errors match
// ErrRefused when the controller refused the certificate, ErrUnreachable when it could not be
// asked (network, 5xx, 429), ErrRejected when it answered a request no (another 4xx).
type Controller interface {
	Open(ctx context.Context, f *File) (Session, error)
}

// Session is one API session; every call presents the certificate it was opened with.
type Session interface {
	Info() SessionInfo
	// Extend has the controller sign a certificate for the CSR's key (PEM chain, leaf first).
	// Until Verify, the old certificate stays the only one that authenticates.
	Extend(ctx context.Context, csrPEM []byte) ([]byte, error)
	// Verify confirms receipt of certPEM; from then on only it authenticates new connections.
	Verify(ctx context.Context, certPEM []byte) error
	// Close ends the session at the controller, best effort.
	Close(ctx context.Context)
}

// SessionInfo is what the current API session says of the identity's certificate.
type SessionInfo struct {
	AuthenticatorID string
	// Extendable is false for a certificate a third-party CA issued: only re-enrolment helps.
	Extendable bool
	// ExtendRequested and KeyRollRequested: an administrator asked for a renewal.
	ExtendRequested, KeyRollRequested bool
}

// Errors a Controller's calls match.
var (
	ErrRefused     = errors.New("the controller refused the certificate")
	ErrUnreachable = errors.New("the controller could not be reached")
	ErrRejected    = errors.New("the controller refused the request")
)

// Steps of a renewal, after each of which Renewer.Step runs (a kill there in tests).
const (
	StepExtended = "identity-extended" // the controller signed the new certificate; nothing on disk
	StepPending  = "identity-pending"  // the new key and certificate are in the pending file
	StepVerified = "identity-verified" // the controller verified the new certificate
	StepSwapped  = "identity-swapped"  // the pending file replaced the identity
)

// Steps lists the renewal's steps in order.
var Steps = []string{StepExtended, StepPending, StepVerified, StepSwapped}

// PendingSuffix names the pending file beside the identity: <identity>.renew.
const PendingSuffix = ".renew"

// Backoff after a failed renewal: 30 min, doubling, at most 12 h, so a controller refusing for
// days is asked a few times a day, and a month's window still holds dozens of tries.
const (
	firstRetry = 30 * time.Minute
	maxRetry   = 12 * time.Hour
)

// DefaultAskEvery is how often the controller is asked whether it requests an extension while
// none is due: one authentication every six hours, never on every tick.
const DefaultAskEvery = 6 * time.Hour

// Renewer renews one identity file's certificate and finishes or abandons a renewal a killed
// process left. It records its progress in state.json's "identity" (state.IdentityCert). The
// caller holds the tick lock. Its methods never fail the tick: they log one line per problem
// with the fix; the only error they return is a stop asked for by Step.
type Renewer struct {
	Path       string
	Who        Who
	Controller Controller
	Now        func() time.Time
	Log        *slog.Logger
	// Step, when set, runs after each of Steps; its error stops the renewal there like a kill.
	Step func(name string) error
	// ReadFile resolves the identity's file references (nil: ReadFile).
	ReadFile func(string) ([]byte, error)
	Perms    Perms
	// Forget lists files to delete after a verified renewal: caches of a controller session
	// opened with the old certificate.
	Forget []string
	// AskEvery: how often to ask the controller for its request flags (0: DefaultAskEvery).
	AskEvery time.Duration

	recoverOnce sync.Once
	recoverErr  error
}

// Outcome is what one Renew did.
type Outcome struct {
	Owner Owner
	// Renewed: a new certificate replaced the identity.
	Renewed bool
	// FailedAt is the step that failed ("" when none did), Err why.
	FailedAt string
	Err      error
}

// StepStop is a renewal stopped by Step, as a kill would have stopped it.
type StepStop struct {
	Name string
	Err  error
}

func (e *StepStop) Error() string { return "step " + e.Name + ": " + e.Err.Error() }
func (e *StepStop) Unwrap() error { return e.Err }

// PendingPath is where the new key and certificate wait for the controller's verification.
func (r *Renewer) PendingPath() string { return r.Path + PendingSuffix }

func (r *Renewer) step(name string) error {
	if r.Step == nil {
		return nil
	}
	if err := r.Step(name); err != nil {
		return &StepStop{Name: name, Err: err}
	}
	return nil
}

func (r *Renewer) now() time.Time { return r.Now().UTC() }

func (r *Renewer) askEvery() time.Duration {
	if r.AskEvery > 0 {
		return r.AskEvery
	}
	return DefaultAskEvery
}

func (r *Renewer) read(path string) (*File, error) {
	readFile := r.ReadFile
	if readFile == nil {
		readFile = ReadFile
	}
	raw, err := readFile(path)
	if err != nil {
		return nil, err
	}
	if f := lastParsed.lookup(path, raw, readFile); f != nil {
		return f, nil
	}
	reads := []fileRead{{path, raw}}
	f, err := Parse(raw, func(p string) ([]byte, error) {
		data, err := readFile(p)
		if err == nil {
			reads = append(reads, fileRead{p, data})
		}
		return data, err
	})
	if err != nil {
		return nil, fmt.Errorf("identity %s: %w", path, err)
	}
	lastParsed.keep(reads, f)
	return f, nil
}

// lastParsed is the identity this process parsed last. A tick reads the file three times (the
// check-in's identity_not_after, the renewal, the textfile's horizons), and parsing its
// certificates and key is most of what a read costs; a File is never changed once parsed.
var lastParsed parsedIdentity

type parsedIdentity struct {
	mu    sync.Mutex
	reads []fileRead // the identity file first, then each file it references, as Parse read them
	f     *File
}

type fileRead struct {
	path string
	data []byte
}

// lookup returns the kept File when path was parsed from raw and every file it referenced still
// reads the same bytes (each is read again: the memo trusts no timestamp); else nil.
func (p *parsedIdentity) lookup(path string, raw []byte, readFile func(string) ([]byte, error)) *File {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.f == nil || p.reads[0].path != path || !bytes.Equal(p.reads[0].data, raw) {
		return nil
	}
	for _, rd := range p.reads[1:] {
		if data, err := readFile(rd.path); err != nil || !bytes.Equal(data, rd.data) {
			return nil
		}
	}
	return p.f
}

func (p *parsedIdentity) keep(reads []fileRead, f *File) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reads, p.f = reads, f
}

// Read reads the identity file.
func (r *Renewer) Read() (*File, error) { return r.read(r.Path) }

// record returns st's identity record, made when missing.
func record(st *state.State) *state.IdentityCert {
	if st.Identity == nil {
		st.Identity = &state.IdentityCert{}
	}
	return st.Identity
}

// Recover finishes or abandons a renewal a killed process left: it runs once per Renewer,
// before anything loads the identity to dial. The pending file decides, not state.json (a kill
// may fall between the file's write and the state's): if the controller accepts the pending
// certificate it was verified and replaces the identity; if it accepts only the current one,
// the pending certificate is verified now, or dropped when the controller no longer holds it.
// An unreachable controller leaves everything for the next tick.
func (r *Renewer) Recover(ctx context.Context, st *state.State, save func() error) error {
	return r.RecoverLoading(ctx, func() (*state.State, func() error) { return st, save })
}

// RecoverLoading is Recover for a caller that has not read the state yet: load runs only when
// this agent renews the identity (a box whose tunneller or proxy renews it reads nothing).
func (r *Renewer) RecoverLoading(ctx context.Context, load func() (*state.State, func() error)) error {
	r.recoverOnce.Do(func() {
		if r.Who.Decide(ctx, r.Path).Holds {
			st, save := load()
			r.recoverErr = r.recoverNow(ctx, st, save)
		}
	})
	return r.recoverErr
}

func (r *Renewer) recoverNow(ctx context.Context, st *state.State, save func() error) error {
	pending := r.PendingPath()
	if removed, err := atomicfile.RemoveLeftovers(pending); err != nil {
		r.Log.Warn("identity: temp files of a killed renewal could not be removed", "error", err.Error())
	} else if len(removed) > 0 {
		r.Log.Info("identity: removed temp files a killed renewal left", "removed", strings.Join(removed, ","))
	}
	rec := st.Identity
	_, err := os.Lstat(pending)
	if errors.Is(err, fs.ErrNotExist) {
		if rec != nil && rec.Renewal != nil && rec.Renewal.Step == state.RenewalPending {
			// Killed after the swap and before the state said so, or the file was removed by hand.
			if f, err := r.Read(); err == nil && f.Leaf().Fingerprint == rec.Renewal.NewFingerprint {
				r.finish(rec, f, "a killed renewal had already replaced the identity")
			} else {
				r.Log.Warn("identity: the pending renewal file is gone; the renewal starts over when due", "pending", pending)
				rec.Renewal.Step, rec.Renewal.NewFingerprint, rec.Renewal.NewNotAfter = "", "", nil
			}
			return r.saveQuietly(save)
		}
		return nil
	}
	if err != nil {
		r.Log.Warn("identity: cannot look at the pending renewal file", "pending", pending, "error", err.Error())
		return nil
	}
	forget := func() error {
		if rec != nil && rec.Renewal != nil {
			rec.Renewal.Step, rec.Renewal.NewFingerprint, rec.Renewal.NewNotAfter = "", "", nil
		}
		return r.saveQuietly(save)
	}
	raw, err := readPending(pending)
	var oldF, newF *File
	if err == nil {
		oldF, err = r.Read()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			// Removed by hand: nothing to compare the pending file with, and it may be all the box has.
			oldF = nil
		case err != nil:
			r.Log.Warn("identity: a renewal is half done and the identity file is unreadable", "error", err.Error())
			return r.saveQuietly(save)
		}
		newF, err = pendingOf(raw, oldF, r.ReadFile)
	}
	var foreign *errForeign
	switch {
	case errors.As(err, &foreign):
		r.setAside(pending, foreign)
		return forget()
	case errors.Is(err, fs.ErrPermission):
		// Its key may be the live one: it is kept for an operator, never removed unread.
		r.Log.Warn(fmt.Sprintf("identity: cannot read the pending renewal file %s: %v; fix: chown %s %s (it may hold the live key: do not remove it)",
			pending, unwrapPath(err), r.Perms.userName(uint32(r.Perms.euid())), pending))
		return r.saveQuietly(save)
	case err != nil:
		r.Log.Warn("identity: the pending renewal file is unreadable; removing it, the renewal starts over when due", "pending", pending, "error", err.Error())
		r.drop(pending)
		return forget()
	}
	rec = record(st)
	if rec.Renewal == nil || rec.Renewal.NewFingerprint != newF.Leaf().Fingerprint {
		rec.Renewal = &state.IdentityRenewal{StartedAt: r.now(), NewFingerprint: newF.Leaf().Fingerprint}
	}
	rec.Renewal.Step = state.RenewalPending
	na := newF.Leaf().NotAfter
	rec.Renewal.NewNotAfter = &na

	verified, err := r.probe(ctx, newF)
	switch {
	case err != nil:
		r.Log.Warn("identity: a renewal is half done and the controller cannot tell which certificate is live; the next tick finishes it",
			"pending", pending, "error", err.Error())
		return r.saveQuietly(save)
	case verified:
		if err := r.swap(); err != nil {
			r.fail(rec, "swap", err, "check the identity's directory: the pending file "+pending+" holds the live certificate")
			return r.saveQuietly(save)
		}
		r.finish(rec, newF, "finished the renewal a killed process left: the controller had verified the new certificate")
		return r.saveQuietly(save)
	}
	if oldF == nil {
		r.fail(rec, "recover", errors.New("the identity file is gone and the controller refuses the pending certificate"),
			"re-enrol this box (fleetctl onboard ENV --reissue, then install.sh --enrol-jwt); the pending file is kept: "+pending)
		return r.saveQuietly(save)
	}
	s, err := r.Controller.Open(ctx, oldF)
	switch {
	case errors.Is(err, ErrRefused):
		r.fail(rec, "recover", errors.New("the controller refuses both the identity's certificate and the pending one"),
			fmt.Sprintf("re-enrol this box (fleetctl onboard ENV --reissue, then install.sh --enrol-jwt); both files are kept: %s and %s", r.Path, pending))
		return r.saveQuietly(save)
	case err != nil:
		r.Log.Warn("identity: a renewal is half done and the controller cannot be reached; the next tick finishes it", "pending", pending, "error", err.Error())
		return r.saveQuietly(save)
	}
	defer s.Close(ctx)
	err = s.Verify(ctx, leafPEM(newF))
	if errors.Is(err, ErrRejected) {
		// Most often the controller no longer holds this certificate (another extension replaced
		// it); but a 4xx may also answer a verification that took effect: ask before dropping.
		live, perr := r.probe(ctx, newF)
		switch {
		case perr != nil:
			r.Log.Warn("identity: a renewal is half done and the controller cannot tell which certificate is live; the next tick finishes it",
				"pending", pending, "error", perr.Error())
			return r.saveQuietly(save)
		case !live:
			r.drop(pending)
			rec.Renewal.Step, rec.Renewal.NewFingerprint, rec.Renewal.NewNotAfter = "", "", nil
			r.fail(rec, "verify", err, "nothing to do: the identity keeps its certificate and the renewal starts over")
			return r.saveQuietly(save)
		}
		err = nil
	}
	switch {
	case err != nil:
		r.Log.Warn("identity: a renewal is half done and its verification did not go through; the next tick finishes it", "error", err.Error())
		return r.saveQuietly(save)
	}
	if err := r.swap(); err != nil {
		r.fail(rec, "swap", err, "check the identity's directory: the pending file "+pending+" holds the live certificate")
		return r.saveQuietly(save)
	}
	r.finish(rec, newF, "finished the renewal a killed process left: verified the new certificate")
	return r.saveQuietly(save)
}

// probe reports whether the controller accepts f's certificate (it has been verified).
func (r *Renewer) probe(ctx context.Context, f *File) (bool, error) {
	s, err := r.Controller.Open(ctx, f)
	switch {
	case errors.Is(err, ErrRefused):
		return false, nil
	case err != nil:
		return false, err
	}
	s.Close(ctx)
	return true, nil
}

// Renew renews the certificate when it is due, or when the controller asks (asked at most every
// AskEvery), and this process is its renewer; it always records the certificate's horizon.
func (r *Renewer) Renew(ctx context.Context, st *state.State, save func() error) (Outcome, error) {
	f, err := r.Read()
	if err != nil {
		// The transport says what is wrong with the identity; nothing here can mend it.
		r.Log.Debug("identity: not read; no renewal", "error", err.Error())
		return Outcome{}, nil
	}
	owner := r.Who.Decide(ctx, r.Path)
	if _, err := os.Lstat(r.PendingPath()); err == nil && owner.Holds {
		// A renewal of this process whose verification went unanswered: settle it first.
		return Outcome{Owner: owner}, r.recoverNow(ctx, st, save)
	}
	rec := record(st)
	leaf := f.Leaf()
	na := leaf.NotAfter
	changed := rec.NotAfter == nil || !rec.NotAfter.Equal(na) || rec.Fingerprint != leaf.Fingerprint
	rec.NotAfter, rec.Fingerprint = &na, leaf.Fingerprint
	o, err := r.renew(ctx, f, rec, renewal{Outcome: Outcome{Owner: owner}}, save)
	if err != nil {
		return o.Outcome, err
	}
	if changed || o.FailedAt != "" || o.Renewed || o.asked || o.cleared {
		err = r.saveQuietly(save)
	}
	return o.Outcome, err
}

// renewal is Outcome plus what the caller must save.
type renewal struct {
	Outcome
	asked   bool
	cleared bool // a hold of dueAgain's that no longer applies was dropped
}

func (r *Renewer) renew(ctx context.Context, f *File, rec *state.IdentityCert, o renewal, save func() error) (renewal, error) {
	if !o.Owner.Renews() {
		r.Log.Debug("identity: the agent does not renew this identity; it reports its expiry", "by", o.Owner.By, "why", o.Owner.Why)
		return o, nil
	}
	now := r.now()
	leaf := f.Leaf()
	left := leaf.NotAfter.Sub(now)
	window := r.Who.Window
	due := left <= window
	if left <= 0 {
		r.Log.Error(fmt.Sprintf("identity: certificate expired at %s; the controller refuses an expired certificate, so it cannot be renewed: "+
			"re-enrol this box (fleetctl onboard ENV --reissue on the operator side, then install.sh --enrol-jwt monky-host.ENV.jwt)", leaf.NotAfter.Format(time.RFC3339)),
			"identity", r.Path)
		o.FailedAt, o.Err = "expired", errors.New("certificate expired")
		if rec.Renewal == nil {
			rec.Renewal = &state.IdentityRenewal{StartedAt: now}
		}
		rec.Renewal.LastError = "expired: certificate expired at " + leaf.NotAfter.Format(time.RFC3339)
		return o, nil
	}
	if b := rec.Renewal; !due && b != nil && b.Failures == 0 && b.Step == "" && b.NextTryAt != nil {
		// dueAgain's hold, and the certificate is no longer within the window (it was lowered):
		// nothing is held back any more.
		rec.Renewal, o.cleared = nil, true
	}
	// A key an engine holds cannot authenticate from here: asking would only fail, every time.
	ask := !due && f.Key != nil && (rec.AskedAt == nil || now.Sub(*rec.AskedAt) >= r.askEvery() || rec.AskedAt.After(now))
	if !due && !ask {
		return o, nil
	}
	if b := rec.Renewal; b != nil && b.NextTryAt != nil && now.Before(*b.NextTryAt) && b.NextTryAt.Sub(now) <= maxRetry {
		r.Log.Debug("identity: renewal backing off after a failure", "next_try_at", b.NextTryAt.Format(time.RFC3339), "last_error", b.LastError)
		return o, nil
	}
	reason := fmt.Sprintf("expires in %s, within identity_renew_below_s (%s)", horizon.Days(left), horizon.Days(window))
	if due {
		if !f.Inline || f.Key == nil {
			r.Log.Warn("identity: cannot renew "+r.Path+": its certificate or key is not held in the file (a file reference or a hardware key), "+
				"and a renewal writes both inline: re-enrol with ziti-edge-tunnel enroll, which writes them inline", "expires", leaf.NotAfter.Format(time.RFC3339))
			o.FailedAt, o.Err = "inline", errors.New("certificate or key not inline")
			return o, nil
		}
		if err := r.Perms.CanReplace(r.Path); err != nil {
			var b *Blocked
			errors.As(err, &b)
			r.Log.Warn(fmt.Sprintf("identity: cannot renew %s: %s; fix: %s", r.Path, b.Reason, b.Fix),
				"expires", leaf.NotAfter.Format(time.RFC3339))
			o.FailedAt, o.Err = "permissions", err
			return o, nil
		}
	}

	s, err := r.Controller.Open(ctx, f)
	if err != nil {
		r.fail(rec, "authenticate", err, controllerFix(err))
		o.FailedAt, o.Err = "authenticate", err
		return o, nil
	}
	defer s.Close(ctx)
	info := s.Info()
	at := now
	rec.AskedAt, o.asked = &at, true // the session carried the controller's request flags
	if !due {
		switch {
		case info.KeyRollRequested:
			reason = "the controller requests a new key (key roll requested)"
		case info.ExtendRequested:
			reason = "the controller requests an extension"
		default:
			return o, nil
		}
		if !f.Inline || f.Key == nil {
			r.Log.Warn("identity: the controller requests a renewal, but the certificate or key of " + r.Path + " is not held in the file: re-enrol")
			return o, nil
		}
		if err := r.Perms.CanReplace(r.Path); err != nil {
			var b *Blocked
			errors.As(err, &b)
			r.Log.Warn(fmt.Sprintf("identity: the controller requests a renewal, but %s cannot be replaced: %s; fix: %s", r.Path, b.Reason, b.Fix))
			o.FailedAt, o.Err = "permissions", err
			return o, nil
		}
	}
	if !info.Extendable {
		err := errors.New("the controller says the certificate is not extendable (a third-party CA issued it)")
		r.fail(rec, "extend", err, fmt.Sprintf("issue a new certificate from that CA, or re-enrol the box with a one-time token before %s", leaf.NotAfter.Format(time.RFC3339)))
		o.FailedAt, o.Err = "extend", err
		return o, nil
	}
	return r.extend(ctx, f, s, rec, o, reason, save)
}

// extend runs the renewal's steps on an open session: extend, pending file, verify, swap.
func (r *Renewer) extend(ctx context.Context, f *File, s Session, rec *state.IdentityCert, o renewal, reason string, save func() error) (renewal, error) {
	now := r.now()
	fail := func(step string, err error, fix string) (renewal, error) {
		r.fail(rec, step, err, fix)
		o.FailedAt, o.Err = step, err
		return o, nil
	}
	key, csrPEM, keyPEM, err := newKeyAndCSR(f.Leaf().X509)
	if err != nil {
		return fail("key", err, "report this as a bug of monky-deployd")
	}
	chain, err := s.Extend(ctx, csrPEM)
	if err != nil {
		return fail("extend", err, sessionFix(err))
	}
	newCerts, err := horizon.ParsePEM(chain)
	if err != nil {
		return fail("extend", fmt.Errorf("the controller's certificate: %w", err), "report this to the controller's operators")
	}
	newLeaf := newCerts.Leaf()
	switch {
	case !KeyMatches(key, newLeaf.X509):
		return fail("extend", errors.New("the controller's certificate is not for the key the agent sent"), "report this to the controller's operators")
	case newLeaf.X509.Subject.CommonName != f.Leaf().X509.Subject.CommonName:
		return fail("extend", fmt.Errorf("the controller's certificate is for %q, not for this identity (%q)", newLeaf.X509.Subject.CommonName, f.Leaf().X509.Subject.CommonName),
			"report this to the controller's operators")
	case !newLeaf.NotAfter.After(f.Leaf().NotAfter):
		return fail("extend", fmt.Errorf("the controller's certificate ends %s, no later than the current one", newLeaf.NotAfter.Format(time.RFC3339)),
			"the controller's signing CA may expire before the certificate would: renew the network's CA")
	}
	if err := r.step(StepExtended); err != nil {
		return o, err
	}

	// Only the certificates that were checked are written, leaf first: nothing else the answer
	// held reaches the file the SDK loads.
	data, err := f.WithCredentials(encodeChain(newCerts), keyPEM)
	if err != nil {
		return fail("pending", err, "report this as a bug of monky-deployd")
	}
	newF, err := Parse(data, r.ReadFile)
	if err != nil {
		return fail("pending", err, "report this as a bug of monky-deployd")
	}
	if err := r.writePending(data); err != nil {
		return fail("pending", err, "free space or fix the permissions of "+filepath.Dir(r.Path))
	}
	na := newLeaf.NotAfter
	rec.Renewal = &state.IdentityRenewal{
		Step: state.RenewalPending, StartedAt: now, OldFingerprint: f.Leaf().Fingerprint,
		NewFingerprint: newLeaf.Fingerprint, NewNotAfter: &na,
		Failures: failures(rec.Renewal), NextTryAt: nextTry(rec.Renewal), LastError: lastError(rec.Renewal),
	}
	if err := save(); err != nil {
		// The pending file alone is enough for the next tick's recovery.
		r.Log.Warn("identity: state not saved; the pending file carries the renewal", "error", err.Error())
	}
	if err := r.step(StepPending); err != nil {
		return o, err
	}

	// The controller takes exactly one certificate to verify: the leaf.
	if err := s.Verify(ctx, leafPEM(newF)); err != nil {
		if !errors.Is(err, ErrRejected) {
			// The answer was lost: the next tick's recovery asks the controller which is live.
			return fail("verify", err, sessionFix(err))
		}
		// Most often a refusal; but a 4xx may also answer a verification that took effect (a
		// proxy's timeout): the new key is dropped only once the controller refuses it.
		switch live, perr := r.probe(ctx, newF); {
		case perr != nil:
			return fail("verify", err, "nothing: the next tick asks the controller which certificate is live")
		case !live:
			r.drop(r.PendingPath())
			rec.Renewal.Step, rec.Renewal.NewFingerprint, rec.Renewal.NewNotAfter = "", "", nil
			return fail("verify", err, controllerFix(err))
		}
	}
	if err := r.step(StepVerified); err != nil {
		return o, err
	}
	// The controller said yes; the file changes only once it takes the new certificate, or a
	// verification that did not take effect would leave the box with a certificate it refuses.
	switch live, err := r.probe(ctx, newF); {
	case err != nil:
		return fail("verify", err, "nothing: the next tick asks the controller which certificate is live")
	case !live:
		return fail("verify", errors.New("the controller answered the verification, yet refuses the new certificate"),
			"nothing: the pending file is kept and the next tick verifies it again")
	}
	if err := r.swap(); err != nil {
		return fail("swap", err, "check the identity's directory: the pending file "+r.PendingPath()+" holds the live certificate; the next tick retries the swap")
	}
	if err := r.step(StepSwapped); err != nil {
		return o, err
	}
	old := f.Leaf().NotAfter
	newF, err = r.Read()
	if err != nil {
		return fail("swap", err, "check "+r.Path)
	}
	r.finish(rec, newF, fmt.Sprintf("renewed because it %s; was valid until %s", reason, old.Format(time.RFC3339)))
	o.Renewed = true
	r.dueAgain(rec, newF)
	return o, nil
}

// dueAgain holds the next renewal back when the renewed certificate is itself within the window
// (the controller signs for less than identity_renew_below_s): else every tick would renew.
func (r *Renewer) dueAgain(rec *state.IdentityCert, f *File) {
	now := r.now()
	left := f.Leaf().NotAfter.Sub(now)
	if left > r.Who.Window {
		return
	}
	next := now.Add(min(left/2, maxRetry))
	rec.Renewal = &state.IdentityRenewal{StartedAt: now, NextTryAt: &next,
		LastError: "window: the controller signs for less than identity_renew_below_s (the renewed certificate ends in " + horizon.Days(left) + ")"}
	r.Log.Warn(fmt.Sprintf("identity: the renewed certificate is already within identity_renew_below_s (%s left, window %s): the controller signs for less than the window; "+
		"the next renewal waits until %s; fix: lower identity_renew_below_s below the controller's certificate life", horizon.Days(left), horizon.Days(r.Who.Window), next.Format(time.RFC3339)),
		"identity", r.Path)
}

// newKeyAndCSR makes a new P-256 key and a CSR for it naming the current certificate's subject.
func newKeyAndCSR(current *x509.Certificate) (*ecdsa.PrivateKey, []byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	subject := pkix.Name{}
	if current != nil {
		subject = current.Subject
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: subject}, key)
	if err != nil {
		return nil, nil, nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// writePending writes the pending file with the identity's mode, owner and group, fsynced.
func (r *Renewer) writePending(data []byte) error {
	var st Stat
	st, err := r.Perms.lstat(r.Path)
	if err != nil {
		return err
	}
	uid, gid := int(st.UID), int(st.GID)
	if r.Perms.euid() != 0 {
		uid = -1 // only root gives a file away; CanReplace made sure this process owns the identity
	}
	return atomicfile.WriteFileOwned(r.PendingPath(), data, st.Mode.Perm(), uid, gid)
}

// leafPEM is f's own certificate alone, PEM.
func leafPEM(f *File) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Leaf().X509.Raw})
}

// encodeChain is b's certificates, PEM, in order.
func encodeChain(b horizon.Bundle) []byte {
	var out []byte
	for _, c := range b {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.X509.Raw})...)
	}
	return out
}

// setAside moves a pending file this agent did not write out of the way, to RefusedSuffix, so
// it neither becomes the identity nor blocks the next renewal; nothing of it is deleted.
func (r *Renewer) setAside(pending string, why error) {
	aside := pending + RefusedSuffix
	if err := os.Rename(pending, aside); err != nil {
		r.Log.Warn(fmt.Sprintf("identity: the pending renewal file %s is not this agent's renewal (%v), and it cannot be moved aside: %v; fix: remove it",
			pending, why, unwrapPath(err)))
		return
	}
	_ = atomicfile.SyncDir(filepath.Dir(pending))
	r.Log.Warn(fmt.Sprintf("identity: the pending renewal file %s is not this agent's renewal (%v): moved to %s, not used; fix: find out who put it there, then remove it",
		pending, why, aside))
}

// swap renames the pending file over the identity and makes the rename durable.
func (r *Renewer) swap() error {
	if err := os.Rename(r.PendingPath(), r.Path); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(r.Path))
}

// drop removes a pending file that will never be live.
func (r *Renewer) drop(path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.Log.Warn("identity: cannot remove the pending renewal file", "pending", path, "error", err.Error())
		return
	}
	_ = atomicfile.SyncDir(filepath.Dir(path))
}

// finish records a renewal whose certificate is now the identity's, and forgets old sessions.
func (r *Renewer) finish(rec *state.IdentityCert, f *File, why string) {
	now := r.now()
	leaf := f.Leaf()
	na := leaf.NotAfter
	rec.NotAfter, rec.Fingerprint, rec.RenewedAt, rec.Renewal = &na, leaf.Fingerprint, &now, nil
	for _, p := range r.Forget {
		if err := os.Remove(p); err == nil {
			r.Log.Info("identity: removed a controller session opened with the old certificate", "path", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			r.Log.Warn("identity: cannot remove a controller session opened with the old certificate", "path", p, "error", err.Error())
		}
	}
	r.Log.Info(fmt.Sprintf("identity: certificate renewed: valid until %s; %s", na.Format(time.RFC3339), why), "identity", r.Path)
}

// fail records a failed step and logs the one line that names it and the fix.
func (r *Renewer) fail(rec *state.IdentityCert, step string, err error, fix string) {
	now := r.now()
	rec.Renewal = failedRenewal(rec.Renewal, now)
	rec.Renewal.LastError = step + ": " + err.Error()
	next := rec.Renewal.NextTryAt.Sub(now).Round(time.Minute)
	until := ""
	if rec.NotAfter != nil {
		until = " (valid until " + rec.NotAfter.Format(time.RFC3339) + ")"
	}
	r.Log.Warn(fmt.Sprintf("identity: renewal failed at %s: %v; the current certificate stays in use%s; next try in %s; fix: %s",
		step, err, until, next, fix), "identity", r.Path, "failures", rec.Renewal.Failures)
}

// failedRenewal counts one more failure of b (made when nil) and sets the next try.
func failedRenewal(b *state.IdentityRenewal, now time.Time) *state.IdentityRenewal {
	if b == nil {
		b = &state.IdentityRenewal{StartedAt: now}
	}
	b.Failures++
	d := firstRetry
	for i := 1; i < b.Failures && d < maxRetry; i++ {
		d *= 2
	}
	next := now.Add(min(d, maxRetry))
	b.NextTryAt = &next
	return b
}

func failures(b *state.IdentityRenewal) int {
	if b == nil {
		return 0
	}
	return b.Failures
}

func nextTry(b *state.IdentityRenewal) *time.Time {
	if b == nil {
		return nil
	}
	return b.NextTryAt
}

func lastError(b *state.IdentityRenewal) string {
	if b == nil {
		return ""
	}
	return b.LastError
}

// controllerFix names what to look at for a controller error.
func controllerFix(err error) string {
	switch {
	case errors.Is(err, ErrUnreachable):
		return "nothing on the box: the controller is down or unreachable; the agent retries"
	case errors.Is(err, ErrRefused):
		return "the controller no longer accepts this certificate: re-enrol this box (fleetctl onboard ENV --reissue, then install.sh --enrol-jwt)"
	}
	return "look at the controller's answer above; the agent retries"
}

// sessionFix is controllerFix for a call on a session the certificate has just opened: a 401 or
// 403 there ended the session, it did not refuse the certificate.
func sessionFix(err error) string {
	if errors.Is(err, ErrRefused) {
		return "nothing: the controller ended the API session the certificate had just opened; the agent retries, and a refused certificate would fail at authenticate"
	}
	return controllerFix(err)
}

func (r *Renewer) saveQuietly(save func() error) error {
	if err := save(); err != nil {
		r.Log.Warn("identity: state not saved", "error", err.Error())
	}
	return nil
}
