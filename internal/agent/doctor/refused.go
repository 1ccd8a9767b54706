package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
)

// refusedToken shows the token a tick put aside after a 401: news to an operator, and it must
// stay readable by the agent's user alone.
func (c *checker) refusedToken(context.Context) Result {
	p := token.In(c.cfg()).Superseded
	fi, err := c.env.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ok("no token was refused by tenancy")
	case err != nil:
		return fail(fmt.Sprintf("cannot look at %s: %v", p, err), lookFix(p))
	case fi.Mode.Perm()&0o077 != 0:
		return fail(fmt.Sprintf("%s (a token tenancy refused, kept aside) is readable by others (%s)", p, c.describe(fi)),
			fmt.Sprintf("chmod 0600 %s, or delete it once looked at", p))
	}
	return ok("%s holds a token tenancy refused (AGENT_UNAUTHENTICATED: the kit was re-revealed or the env retired); it was revoked at OpenBao when that could be done (the journal says), and is kept as evidence: `monky-deployd status` says when; delete it once looked at", p)
}
