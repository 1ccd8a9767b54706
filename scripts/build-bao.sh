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

VERSION="2.4.0"
PSEUDO="v0.0.0-20250828202315-f9407a27fbee"   # the commit of OpenBao's v2.4.0 release
GO=${GO:-go}
CACHE="${MONKY_TOOL_CACHE:-$("$GO" env GOCACHE)/../monky-tools}"
bin="$CACHE/bao-$VERSION"

if [ ! -x "$bin" ]; then
  if [ "$build" = 0 ]; then
    echo "$bin"
    exit 1
  fi
  mkdir -p "$CACHE"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "bao: building OpenBao $VERSION from the Go module proxy (several minutes the first time)" >&2
  (
    cd "$work"
    "$GO" mod init monky-tools/bao >/dev/null 2>&1
    "$GO" mod edit -require="github.com/openbao/openbao@$PSEUDO" \
      -require="github.com/openbao/openbao/api/v2@v$VERSION" \
      -require="github.com/openbao/openbao/sdk/v2@v$VERSION"
    # go-kms-wrapping's module files are missing from the checksum database.
    export GONOSUMDB=github.com/openbao GOFLAGS=-mod=mod
    "$GO" build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/openbao/openbao >&2
    mv "$bin.tmp" "$bin"
  )
fi
echo "$bin"
