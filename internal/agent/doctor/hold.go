package doctor

import (
	"context"
	"fmt"
	"time"
)

// hold shows a human's hold as a WARN: the box reports but changes nothing until it ends, which
// is news to whoever debugs why a deploy does not land.
func (c *checker) hold(context.Context) Result {
	st := c.agentState()
	h := st.Hold
	now := c.now()
	if !h.Active(now) {
		return ok("not held")
	}
	left := h.Until.Sub(now).Round(time.Minute)
	return Result{Status: Warn,
		Detail: fmt.Sprintf("%s (since %s, %s left): ticks report but apply, retire, revert and correct nothing", h.Note(), h.Since.UTC().Format(time.RFC3339), left),
		Fix:    "monky-deployd unhold, once whoever holds it is done"}
}
