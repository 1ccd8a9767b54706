package tick

import (
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Observed is what one tick saw that the box's metrics show and state.json does not keep.
type Observed struct {
	// ReportResult is the last report's result ("" for none); ReportDelivered, whether it was accepted.
	ReportResult    string
	ReportDelivered bool
	// Containers are what that report carried; nil when the tick looked at none.
	Containers []protocol.Container
}

func (a *Agent) observe(r protocol.Report, delivered bool) {
	a.observed.ReportResult, a.observed.ReportDelivered = r.Result, delivered
	if len(r.Containers) > 0 {
		a.observed.Containers = r.Containers
	}
}

// Observed returns what the last tick saw.
func (a *Agent) Observed() Observed { return a.observed }

// State returns the state the last tick left (nil when it could not read it).
func (a *Agent) State() *state.State { return a.st }
