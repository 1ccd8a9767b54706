#!/usr/bin/env bash
# Builds a real OpenBao server (v2.4.0) from the Go module proxy, for the integration tests and the
# demo, and prints its path. Cached beside the Go build cache: the first build takes minutes.
set -euo pipefail

PSEUDO="v0.0.0-20250828202315-f9407a27fbee"   # the commit of OpenBao's v2.4.0 release
CACHE="${MONKY_TOOL_CACHE:-$(go env GOCACHE)/../monky-tools}"
bin="$CACHE/bao-2.4.0"

if [ ! -x "$bin" ]; then
  mkdir -p "$CACHE"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "bao: building OpenBao 2.4.0 from the Go module proxy (several minutes the first time)" >&2
  (
    cd "$work"
    go mod init monky-tools/bao >/dev/null 2>&1
    go mod edit -require="github.com/openbao/openbao@$PSEUDO" \
      -require=github.com/openbao/openbao/api/v2@v2.4.0 \
      -require=github.com/openbao/openbao/sdk/v2@v2.4.0
    # go-kms-wrapping's module files are missing from the checksum database.
    export GONOSUMDB=github.com/openbao GOFLAGS=-mod=mod
    go build -trimpath -ldflags "-s -w" -o "$bin.tmp" github.com/openbao/openbao >&2
    mv "$bin.tmp" "$bin"
  )
fi
echo "$bin"
