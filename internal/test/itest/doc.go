//go:build integration

// Package itest starts the REAL parts the integration tests of monky-deployd drive — a docker
// engine with the compose v2 plugin, a password-protected local registry, a test image pushed to
// it, and an OpenBao server configured exactly like production's jwt-tenancy mount — and removes
// everything it made when the test ends.
//
// Every file but ci.go carries the `integration` build tag: run with
// `go test -tags integration ./internal/test/itest/...` after `scripts/integration-setup.sh`.
// A part that is missing skips the test on a workstation and FAILS it when CI is set (any value
// but "false" and "0", InCI), because CI promised the parts and a silently skipped integration
// suite proves nothing. ci.go's Unavailable is the same rule for anything else a test needs of
// the machine (root, setpriv), in unit tests too.
package itest
