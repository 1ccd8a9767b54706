package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
)

// RefusedSuffix names where a pending file that is not this agent's renewal is set aside.
const RefusedSuffix = ".refused"

// errForeign is a pending file this agent did not write: it is set aside, never used or deleted.
type errForeign struct{ why string }

func (e *errForeign) Error() string { return e.why }

// openPending opens the pending file; tests make it fail.
var (
	unixOpen    = unix.Open
	openPending = unixOpen
)

// readPending reads the pending file as a regular file only: its directory is writable by group
// ziti, so a symlink planted there is not followed, and a FIFO or device not read.
func readPending(path string) ([]byte, error) {
	fd, err := openPending(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, &errForeign{why: "it is a symlink, which a renewal never writes"}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	raw, err := capread.Regular(f, maxFile, fmt.Errorf("larger than %d bytes", maxFile), nil)
	var notRegular *capread.NotRegularError
	if errors.As(err, &notRegular) {
		return nil, &errForeign{why: "it is " + err.Error()}
	}
	return raw, err
}

// pendingOf parses the pending file raw and checks it is a renewal of old: old's file but for an
// inline certificate and key, the key the certificate's, the certificate old's common name (old
// nil: the identity file is gone, only the pending file's own pair is checked). A damaged file
// is an error; one of another identity or enrolment an *errForeign.
func pendingOf(raw []byte, old *File, readFile func(string) ([]byte, error)) (*File, error) {
	var top struct {
		ID map[string]json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(raw, &top); err != nil || top.ID == nil {
		return nil, errors.New("not a ziti identity: not a JSON object with an id object")
	}
	if old != nil && !old.SameBut(raw) {
		return nil, &errForeign{why: "it is not the identity file with a new certificate and key (its other fields differ)"}
	}
	f, err := Parse(raw, readFile)
	if err != nil {
		return nil, err
	}
	switch {
	case !f.Inline || f.Key == nil:
		return nil, errors.New("its certificate and key are not inline")
	case !KeyMatches(f.Key, f.Leaf().X509):
		return nil, errors.New("its key does not belong to its certificate")
	case old != nil && f.Leaf().X509.Subject.CommonName != old.Leaf().X509.Subject.CommonName:
		return nil, &errForeign{why: fmt.Sprintf("its certificate is for %q, the identity's for %q",
			f.Leaf().X509.Subject.CommonName, old.Leaf().X509.Subject.CommonName)}
	}
	return f, nil
}
