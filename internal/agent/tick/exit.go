package tick

import (
	"errors"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
)

// Exit codes of `monky-deployd tick` (PROTOCOL.md): the timer and the operators read them.
const (
	ExitOK        = 0
	ExitFailed    = 1  // failed, refused, or the install kit must be re-run
	ExitTemporary = 75 // EX_TEMPFAIL: network, 5xx, lease rate-limited with no token
	ExitConfig    = 78 // EX_CONFIG: bad config, or the token belongs to another env
)

// ExitCode decides the process exit code from a tick's error. It is the only place that does.
func ExitCode(err error) int {
	var cerr *config.Error
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &cerr), errors.Is(err, ErrEnvMismatch):
		return ExitConfig
	case errors.Is(err, ErrTemporary):
		return ExitTemporary
	default:
		return ExitFailed
	}
}
