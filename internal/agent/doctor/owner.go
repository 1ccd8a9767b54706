package doctor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
)

// stateOwner lists files under state_dir the agent does not own, with the chown that gives them
// back (a tick run by hand as root left such files). The root-owned upgraded-from is expected.
func (c *checker) stateOwner(context.Context) Result {
	a := c.env.Agent
	if a == nil {
		return fail("cannot judge without the agent's user (see user)", firstFix("user"))
	}
	dir := c.cfg().StateDir
	list := c.env.ForeignFiles
	if list == nil {
		list = state.ForeignFiles
	}
	files, truncated, err := list(dir, a.UID)
	if err != nil {
		return fail(fmt.Sprintf("cannot look at everything under %s: %v", dir, err), fmt.Sprintf("run doctor as root: sudo monky-deployd doctor --user %s", a.Name))
	}
	if len(files) == 0 {
		return ok("everything under %s belongs to %s", dir, a.Name)
	}
	names := make([]string, len(files))
	paths := make([]string, len(files))
	for i, f := range files {
		rel, err := filepath.Rel(dir, f.Path)
		if err != nil || rel == "." {
			rel = f.Path
		}
		names[i] = fmt.Sprintf("%s (%s)", rel, c.userName(f.UID))
		paths[i] = shellQuote(f.Path)
	}
	detail := fmt.Sprintf("%d entries under %s do not belong to %s, which can neither read nor replace them: %s", len(files), dir, a.Name, strings.Join(names, ", "))
	fix := fmt.Sprintf("chown -h %s: %s", a.Name, strings.Join(paths, " "))
	if truncated {
		detail = fmt.Sprintf("more than %d entries under %s do not belong to %s, among them: %s", len(files), dir, a.Name, strings.Join(names, ", "))
		fix = fmt.Sprintf("chown -hR %s: %s", a.Name, shellQuote(dir))
	}
	return fail(detail, fix+" (a tick run as root by hand leaves such files; `sudo monky-deployd tick` now runs as the owner of state_dir)")
}

// shellQuote quotes p for a command line an operator pastes, when it needs it.
func shellQuote(p string) string {
	if p != "" && strings.IndexFunc(p, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+:@", r))
	}) < 0 {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}
