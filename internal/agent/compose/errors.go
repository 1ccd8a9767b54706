package compose

import (
	"regexp"
	"strconv"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// CmdError is a failed docker command; Error() carries the output's last lines, the registry's own
// diagnosis (`rc=1` alone sent operators hunting, seed 0.1.7). Output is redacted when the error
// is made, before Error() cuts it: a cut through a secret leaves a part no redactor knows.
type CmdError struct {
	Op       string // e.g. "docker compose pull"
	ExitCode int
	Output   string // standard output then standard error, ANSI escapes removed, redacted
}

// MaxErrorTail bounds Error()'s output: a failed pull's last lines within a report detail.
const MaxErrorTail = 600

func (e *CmdError) Error() string {
	msg := e.Op + " failed (rc=" + strconv.Itoa(e.ExitCode) + "): "
	tail := Tail(e.Output, MaxErrorTail)
	if tail == "" {
		tail = "(no output)"
	}
	msg += tail
	if strings.Contains(e.Output, "is not a docker command") {
		// DOCKER_CONFIG moves the per-user plugin dir too, hiding ~/.docker/cli-plugins from the agent.
		msg += " (install the compose plugin system-wide, e.g. /usr/libexec/docker/cli-plugins: DOCKER_CONFIG hides ~/.docker/cli-plugins)"
	}
	return msg
}

func newCmdError(op string, res runner.Result, red *secret.Redactor) *CmdError {
	out := strings.TrimRight(string(res.Stdout), "\n")
	if errOut := strings.TrimRight(string(res.Stderr), "\n"); errOut != "" {
		if out != "" {
			out += "\n"
		}
		out += errOut
	}
	return &CmdError{Op: op, ExitCode: res.ExitCode, Output: red.Redact(ansi.ReplaceAllString(out, ""))}
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// Tail returns the last non-blank lines of out joined by " | ", at most limit bytes (or the end
// of the last line); a line redrawn with \r counts as its final state.
func Tail(out string, limit int) string {
	out = ansi.ReplaceAllString(out, "")
	var picked []string
	size := 0
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		if j := strings.LastIndexByte(strings.TrimRight(line, "\r"), '\r'); j >= 0 {
			line = line[j+1:]
		}
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		add := len(line)
		if len(picked) > 0 {
			add += len(" | ")
		}
		if size+add > limit {
			if len(picked) == 0 {
				picked = append(picked, "…"+clip.LastBytes(line, limit-len("…")))
			}
			break
		}
		picked = append(picked, line)
		size += add
	}
	for i, j := 0, len(picked)-1; i < j; i, j = i+1, j-1 {
		picked[i], picked[j] = picked[j], picked[i]
	}
	return strings.Join(picked, " | ")
}
