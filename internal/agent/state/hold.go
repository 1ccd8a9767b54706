package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Hold is a human's "wait": who asked, why, since when and until when.
type Hold struct {
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
}

// Hold bounds: a hold lasts DefaultHold unless told otherwise and never more than MaxHold, so a
// forgotten one ends by itself; its text is an operator's, shown on one line everywhere, and
// fleetctl reads it by the same rules (protocol.CheckHoldText).
const (
	DefaultHold   = 4 * time.Hour
	MaxHold       = 7 * 24 * time.Hour
	MaxHoldReason = protocol.MaxHoldReason // runes
	MaxHoldBy     = protocol.MaxHoldBy     // runes
)

// CheckHoldText refuses a reason or name no line can carry: empty, too long, a control or format
// character.
func CheckHoldText(field, v string, maxRunes int) error {
	if err := protocol.CheckHoldText(v, maxRunes); err != nil {
		return fmt.Errorf("%s: %w", field, err)
	}
	return nil
}

// Check refuses a hold no `monky-deployd hold` writes, naming the field.
func (h *Hold) Check() error {
	if err := CheckHoldText("hold: reason", h.Reason, MaxHoldReason); err != nil {
		return err
	}
	if err := CheckHoldText("hold: by", h.By, MaxHoldBy); err != nil {
		return err
	}
	switch {
	case h.Since.IsZero():
		return errors.New("hold: since: missing")
	case !h.Until.After(h.Since):
		return errors.New("hold: until: not after since")
	case h.Until.Sub(h.Since) > MaxHold:
		return fmt.Errorf("hold: until: %s after since, at most %s", h.Until.Sub(h.Since), MaxHold)
	}
	return nil
}

// MinHold is the shortest hold `monky-deployd hold` writes: its times are kept to the second, and
// one shorter would be no wait at all.
const MinHold = time.Minute

// holdClockSlack is how far ahead of the box's clock a hold's since may be before the hold is
// known to come from a clock that ran ahead (the box's own `hold` writes its own now).
const holdClockSlack = time.Minute

// Active reports whether the hold still runs at now. A hold that lapsed (TooFar) does not.
func (h *Hold) Active(now time.Time) bool { return h != nil && now.Before(h.Until) && !h.TooFar(now) }

// TooFar reports whether the hold could not have been written by this clock: it begins in the
// future, or ends further ahead than MaxHold. It came from a clock that ran ahead or a hand edit;
// held, it would stop every apply for as long, and MonkyHoldOverdue (age from since) would never
// fire. Such a hold has lapsed.
func (h *Hold) TooFar(now time.Time) bool {
	return h != nil && (h.Until.Sub(now) > MaxHold || h.Since.Sub(now) > holdClockSlack)
}

// Note is the hold on one line, as the journal, the report and status show it:
// `held by alice until 2026-12-02T14:00:00Z: debugging the db`.
func (h *Hold) Note() string {
	return fmt.Sprintf("held by %s until %s: %s", h.By, h.Until.UTC().Format(time.RFC3339), h.Reason)
}

// Deferral is a change of the running release waiting for the next apply window.
type Deferral struct {
	// Action is what waits: apply (of Sha) or down.
	Action string    `json:"action"`
	Sha    string    `json:"sha,omitempty"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
}

// DriftMemory is what drift correction knows of release Sha: the config hash compose labelled
// each service's containers with when the agent's own `compose up` of the release made them
// (`docker compose config --hash` of compose 2.40 hashes env_file services otherwise than up
// does), and the backoff of a correction that did not end healthy.
type DriftMemory struct {
	Sha string `json:"sha"`
	// Services maps each service to its containers' config hash and count; empty while unknown.
	Services map[string]ServiceHash `json:"services,omitempty"`
	// Correct is the release's bundle agent.drift_correction (nil: the config's decides).
	Correct *bool `json:"drift_correction,omitempty"`
	// Attempts counts corrections in a row that did not end healthy (or were refused);
	// NextAttemptAt is when the next may run.
	Attempts      int        `json:"attempts,omitempty"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	// Refused is why the release was not run at the last correction (read-back or judgement).
	Refused string `json:"refused,omitempty"`
}

// ServiceHash is one service of a release as its own `compose up` left it.
type ServiceHash struct {
	ConfigHash string `json:"config_hash"`
	Containers int    `json:"containers"`
}

// IsConfigHash reports whether h looks like compose's config hash (hex SHA-256):
// `^[0-9a-f]{64}$`, checked by hand (a regexp compiled at init cost every process).
func IsConfigHash(h string) bool {
	if len(h) != 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// MemoryFor is the drift memory of release sha, nil when none is kept for it.
func (s *State) MemoryFor(sha string) *DriftMemory {
	if d := s.Drift; d != nil && sha != "" && d.Sha == sha {
		return d
	}
	return nil
}

// BackingOff says whether a correction waits (2 min doubling to an hour, as the deploy backoff);
// a next try more than MaxBackoff ahead came from a clock set back and is due.
func (d *DriftMemory) BackingOff(now time.Time) bool {
	return d != nil && d.NextAttemptAt != nil && now.Before(*d.NextAttemptAt) && d.NextAttemptAt.Sub(now) <= MaxBackoff
}

func decodeIssue22(raw map[string]json.RawMessage, n *State) error {
	if v, ok := raw["hold"]; ok && !isNull(v) {
		n.Hold = &Hold{}
		if err := json.Unmarshal(v, n.Hold); err != nil {
			return fmt.Errorf("hold: %w", err)
		}
		if err := n.Hold.Check(); err != nil {
			return err
		}
	}
	if v, ok := raw["deferred"]; ok && !isNull(v) {
		n.Deferred = &Deferral{}
		if err := json.Unmarshal(v, n.Deferred); err != nil {
			return fmt.Errorf("deferred: %w", err)
		}
		switch d := n.Deferred; {
		case d.Action != "apply" && d.Action != "down":
			return fmt.Errorf("deferred: action: %q is not apply or down", d.Action)
		case d.Until.IsZero():
			return errors.New("deferred: until: missing")
		}
	}
	if v, ok := raw["drift"]; ok && !isNull(v) {
		n.Drift = &DriftMemory{}
		if err := json.Unmarshal(v, n.Drift); err != nil {
			return fmt.Errorf("drift: %w", err)
		}
		if err := checkDrift(n.Drift); err != nil {
			return err
		}
	}
	return nil
}

// checkDrift refuses a drift memory no agent writes, naming the field.
func checkDrift(d *DriftMemory) error {
	if d.Sha == "" {
		return errors.New("drift: sha: empty")
	}
	if d.Attempts < 0 {
		return errors.New("drift: attempts: negative")
	}
	for svc, h := range d.Services {
		switch {
		case svc == "" || strings.IndexFunc(svc, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) >= 0:
			return fmt.Errorf("drift: services: %q is no service name", svc)
		case !IsConfigHash(h.ConfigHash):
			return fmt.Errorf("drift: services.%s.config_hash: not a hex SHA-256", svc)
		case h.Containers < 1:
			return fmt.Errorf("drift: services.%s.containers: want at least 1", svc)
		}
	}
	return nil
}
