package verdict

import (
	"cmp"
	"fmt"
	"time"
)

// DefaultExpiringWithin is later than the agent's own renewal window (30 days): a certificate
// this close has missed nine days of renewals, which is a failure to look at, not a schedule.
const DefaultExpiringWithin = 21 * 24 * time.Hour

// Where a certificate's horizon came from.
const (
	// SourceController: the identity's cert authenticator on the controller, the one it accepts.
	SourceController = "controller"
	// SourceCheckin: the agent's last check-in (identity_not_after), when the controller had none.
	SourceCheckin = "checkin"
)

// Cert is an identity certificate's horizon and where it was read.
type Cert struct {
	NotAfter time.Time
	Source   string
}

// expired: the certificate has passed its NotAfter; only re-enrolment brings the box back.
func expired(in Input, a *Agent, now time.Time) (string, bool) {
	c := in.Cert
	if c == nil || c.NotAfter.After(now) {
		return "", false
	}
	return fmt.Sprintf("identity certificate expired %s ago (%s, %s): the box cannot authenticate to the mesh; re-enrol: fleetctl onboard %s --site %s --reissue, then install.sh --enrol-jwt monky-host.%s.jwt on the box",
		Human(now.Sub(c.NotAfter)), c.NotAfter.UTC().Format(time.DateOnly), c.Source, a.EnvID, cmp.Or(a.Site, "SITE"), a.EnvID), true
}

// expiring: the certificate ends within the threshold, so the renewal that should have run failed.
func expiring(in Input, a *Agent, now time.Time, within time.Duration) (string, bool) {
	c := in.Cert
	if within <= 0 {
		within = DefaultExpiringWithin
	}
	if c == nil || !c.NotAfter.After(now) || c.NotAfter.Sub(now) > within {
		return "", false
	}
	what := fmt.Sprintf("identity certificate expires in %s (%s, %s)", Human(c.NotAfter.Sub(now)), c.NotAfter.UTC().Format(time.DateOnly), c.Source)
	if a.Transport == "system" {
		return what + ": ziti-edge-tunnel renews it and has not: journalctl -u ziti-edge-tunnel on the box, or re-enrol (fleetctl onboard " + a.EnvID + " --reissue)", true
	}
	return what + ": the agent's renewal is failing: on the box, monky-deployd doctor (identity-cert) and journalctl -u monky-deployd | grep identity: name the step and the fix", true
}
