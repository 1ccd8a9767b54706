package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// IdentityCert is the ziti identity's client certificate as the agent last read it, and the
// renewal internal/agent/identity runs on it (PROTOCOL section 2, "Identity renewal").
type IdentityCert struct {
	// NotAfter and Fingerprint (SHA-1 of the DER, as the controller names it) of the last read.
	NotAfter    *time.Time `json:"not_after,omitempty"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	// RenewedAt is when the agent last swapped in a certificate the controller had verified.
	RenewedAt *time.Time `json:"renewed_at,omitempty"`
	// AskedAt is when the controller was last asked whether it requests an extension.
	AskedAt *time.Time `json:"asked_at,omitempty"`
	// Renewal is a renewal under way or failing; nil when none is.
	Renewal *IdentityRenewal `json:"renewal,omitempty"`
}

// Steps of a renewal, as IdentityRenewal.Step records them.
const (
	// RenewalPending: the new key and certificate are in the pending file next to the identity;
	// the controller may or may not have verified the certificate yet.
	RenewalPending = "pending"
)

// IdentityRenewal is one renewal: where it stands and how it has failed so far.
type IdentityRenewal struct {
	// Step is RenewalPending while a pending file exists, "" when nothing is on disk.
	Step      string    `json:"step,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// OldFingerprint is the certificate being replaced; NewFingerprint and NewNotAfter the one
	// in the pending file.
	OldFingerprint string     `json:"old_fingerprint,omitempty"`
	NewFingerprint string     `json:"new_fingerprint,omitempty"`
	NewNotAfter    *time.Time `json:"new_not_after,omitempty"`
	// Failures counts failed attempts in a row; NextTryAt is when the next may ask the controller.
	Failures  int        `json:"failures,omitempty"`
	NextTryAt *time.Time `json:"next_try_at,omitempty"`
	// LastError is `STEP: what happened` of the last failure (never key material).
	LastError string `json:"last_error,omitempty"`
}

// decodeIdentity reads state.json's "identity", rejecting what no agent writes with the field named.
func decodeIdentity(v json.RawMessage) (*IdentityCert, error) {
	if v == nil || isNull(v) {
		return nil, nil
	}
	var c IdentityCert
	if err := json.Unmarshal(v, &c); err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	if r := c.Renewal; r != nil {
		switch {
		case r.Step != "" && r.Step != RenewalPending:
			return nil, fmt.Errorf("identity: renewal: step: %q is not %q or empty", r.Step, RenewalPending)
		case r.Failures < 0:
			return nil, errors.New("identity: renewal: failures: negative")
		case r.Step == RenewalPending && r.NewFingerprint == "":
			return nil, errors.New("identity: renewal: new_fingerprint: empty while a renewal is pending")
		}
	}
	return &c, nil
}
