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
set -euo pipefail

usage() {
  echo "usage: $0 [--print-path [--no-build]]" >&2
  exit 2
}

build=1
for arg in "$@"; do
  case "$arg" in
    --print-path) ;;  # what the script always does; accepted so callers can say so
    --no-build) build=0 ;;
    *) usage ;;
  esac
done

VERSION="1.7.2"
PFXLOG="v0.6.10"   # ziti v1.7.2's go.mod: replace github.com/michaelquigley/pfxlog => ...@v0.6.10
GO=${GO:-go}
CACHE="${MONKY_TOOL_CACHE:-$("$GO" env GOCACHE)/../monky-tools}"
bin="$CACHE/ziti-$VERSION"

if [ ! -x "$bin" ]; then
  if [ "$build" = 0 ]; then
    echo "$bin"
    exit 1
  fi
  mkdir -p "$CACHE"
  # Two callers at once (CI steps, engineers) build once: the second waits for the first.
  exec 9>"$CACHE/.ziti.lock"
  flock 9
fi
if [ ! -x "$bin" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "ziti: building OpenZiti $VERSION from the Go module proxy (several minutes the first time)" >&2
  (
    cd "$work"
    "$GO" mod init monky-tools/ziti >/dev/null 2>&1
    export GONOSUMDB=github.com/openziti GOFLAGS=-mod=mod
    "$GO" mod edit -require="github.com/openziti/ziti@v$VERSION" \
      -replace="github.com/michaelquigley/pfxlog=github.com/michaelquigley/pfxlog@$PFXLOG"
    "$GO" build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/openziti/ziti/ziti >&2
    mv "$bin.tmp" "$bin"
  )
fi
echo "$bin"
