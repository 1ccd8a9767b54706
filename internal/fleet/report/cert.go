package report

import (
	"fmt"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/verdict"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// CertHorizon is an env's identity certificate in the status document: when it expires, where
// that was read (the controller's cert authenticator, else the agent's check-in) and whole days
// left on tenancy's clock (negative once expired).
type CertHorizon struct {
	NotAfter string `json:"not_after"`
	Source   string `json:"source"`
	DaysLeft int64  `json:"days_left"`
}

// certOf is the identity certificate's horizon: the controller's, which is what it accepts,
// else the agent's last check-in; nil when neither has one.
func certOf(a protocol.AdminAgent, id *ziti.Identity, now time.Time) (*verdict.Cert, error) {
	if id != nil && id.Cert != nil && id.Cert.Err == nil && !id.Cert.NotAfter.IsZero() {
		return &verdict.Cert{NotAfter: id.Cert.NotAfter, Source: verdict.SourceController}, nil
	}
	at, err := optTime(a.EnvID, "identity_not_after", a.IdentityNotAfter)
	if err != nil || at == nil {
		return nil, err
	}
	return &verdict.Cert{NotAfter: *at, Source: verdict.SourceCheckin}, nil
}

func certHorizon(c *verdict.Cert, now time.Time) *CertHorizon {
	if c == nil {
		return nil
	}
	left := c.NotAfter.Sub(now)
	days := int64(left / (24 * time.Hour))
	if left < 0 && left%(24*time.Hour) != 0 {
		days-- // a day and a half ago is "expired 1d ago" in words, -2 whole days in numbers
	}
	return &CertHorizon{NotAfter: c.NotAfter.UTC().Format(time.RFC3339), Source: c.Source, DaysLeft: days}
}

// cert is the CERT cell: whole days left ("<1d", "expired"), marked when it is the agent's word.
func (e Env) cert() string {
	c := e.Cert
	if c == nil {
		return "-"
	}
	s := fmt.Sprintf("%dd", c.DaysLeft)
	switch {
	case c.DaysLeft < 0:
		s = "expired"
	case c.DaysLeft == 0:
		s = "<1d"
	}
	if c.Source == verdict.SourceCheckin {
		s += " (check-in)"
	}
	return s
}
