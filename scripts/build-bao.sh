#!/usr/bin/env bash
# Builds a real OpenBao server (v2.4.0) from the Go module proxy, for the integration tests and the
# demo, and prints its path. Cached beside the Go build cache: the first build takes minutes.
#
#   build-bao.sh [--print-path]       build if not cached, print the binary's path
#   build-bao.sh --print-path --no-build
#                                     print the path the binary has when built; exit 0 when it
#                                     is there, 1 when it is not (nothing is built)
#
# The path is this script's alone to know: callers ask it rather than spell the version.
# The cache, the lock and the arguments are scripts/lib/gotool.sh's.
set -euo pipefail
# shellcheck source=lib/gotool.sh
. "$(dirname "$0")/lib/gotool.sh"

VERSION="2.4.0"
PSEUDO="v0.0.0-20250828202315-f9407a27fbee"   # the commit of OpenBao's v2.4.0 release

gotool_build() {
  "$GO" mod edit -require="github.com/openbao/openbao@$PSEUDO" \
    -require="github.com/openbao/openbao/api/v2@v$VERSION" \
    -require="github.com/openbao/openbao/sdk/v2@v$VERSION"
  # go-kms-wrapping's module files are missing from the checksum database.
  export GONOSUMDB=github.com/openbao GOFLAGS=-mod=mod
  "$GO" build -trimpath -ldflags "-s -w" -o "$1" github.com/openbao/openbao >&2
}

gotool_main bao "$VERSION" "OpenBao $VERSION" "$@"
