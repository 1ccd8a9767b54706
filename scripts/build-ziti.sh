#!/usr/bin/env bash
# Builds the OpenZiti `ziti` CLI (controller, router and admin commands in one binary) from the Go
# module proxy, for the mesh and box integration tests and the demo, and prints its path. Cached
# beside the Go build cache: the first build takes minutes, later calls print the path at once.
#
#   build-ziti.sh [--print-path]      build if not cached, print the binary's path
#   build-ziti.sh --print-path --no-build
#                                     print the path the binary has when built; exit 0 when it
#                                     is there, 1 when it is not (nothing is built)
#
# `go install github.com/openziti/ziti/ziti@v1.7.2` is refused (the proxy does not serve the
# module's version list) and a wrapper module does not inherit ziti's own `replace` of pfxlog, so
# the wrapper repeats it. Some openziti modules are not in the checksum database (GONOSUMDB).
# The path is this script's alone to know: callers ask it rather than spell the version.
# The cache, the lock and the arguments are scripts/lib/gotool.sh's.
set -euo pipefail
# shellcheck source=lib/gotool.sh
. "$(dirname "$0")/lib/gotool.sh"

VERSION="1.7.2"
PFXLOG="v0.6.10"   # ziti v1.7.2's go.mod: replace github.com/michaelquigley/pfxlog => ...@v0.6.10

gotool_build() {
  export GONOSUMDB=github.com/openziti GOFLAGS=-mod=mod
  "$GO" mod edit -require="github.com/openziti/ziti@v$VERSION" \
    -replace="github.com/michaelquigley/pfxlog=github.com/michaelquigley/pfxlog@$PFXLOG"
  "$GO" build -trimpath -ldflags "-s -w" -o "$1" github.com/openziti/ziti/ziti >&2
}

gotool_main ziti "$VERSION" "OpenZiti $VERSION" "$@"
