//go:build integration

// Package e2e proves the agent and fleetctl work together: the real monky-deployd and fleetctl
// binaries against the dev stack (internal/dev/devstack) — tenancy's agent and admin API fakes fed
// only by what the agents really send, the ziti management fake, a real OpenBao dev server, a
// password-protected registry, the docker engine and compose v2. Boxes are onboarded with
// `fleetctl onboard`, and every verdict is fleetctl's own reading of the agents' check-ins.
//
// Every file carries the `integration` build tag: run with
// `CI=true go test -tags integration ./internal/test/e2e/...` after scripts/integration-setup.sh.
// A missing part fails the tests under CI=true (itest.Require), and every container, network,
// volume and image they make is removed.
package e2e
