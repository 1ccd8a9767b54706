#!/usr/bin/env bash
# Installs the docker compose v2 CLI plugin into a SYSTEM plugin directory.
#
# The agent runs every docker call with DOCKER_CONFIG=<state_dir>/docker, which also moves the
# user plugin directory (~/.docker/cli-plugins) out of sight: only a system plugin directory keeps
# `docker compose` visible to it. No public download is reachable here, so when the machine has no
# plugin we build it from the Go module proxy and cache the binary beside the Go build cache.
set -euo pipefail

VERSION="${COMPOSE_VERSION:-v2.40.3}"
PLUGIN_DIR="${COMPOSE_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}"
CACHE="${MONKY_TOOL_CACHE:-$(go env GOCACHE)/../monky-tools}"
bin="$CACHE/docker-compose-$VERSION"

have_v2() { docker compose version 2>/dev/null | grep -q 'v2\.'; }

if have_v2 && [ -x "$PLUGIN_DIR/docker-compose" ]; then
  echo "compose plugin: $(docker compose version) in $PLUGIN_DIR"
  exit 0
fi

if [ ! -x "$bin" ]; then
  mkdir -p "$CACHE"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "compose plugin: building $VERSION from the Go module proxy (several minutes the first time)"
  (
    cd "$work"
    go mod init monky-tools/compose >/dev/null 2>&1
    go mod edit -require="github.com/docker/compose/v2@$VERSION"
    # compose's own go.mod excludes broken versions; a consumer module must repeat them.
    GOFLAGS=-mod=mod go mod download "github.com/docker/compose/v2@$VERSION"
    src=$(GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' "github.com/docker/compose/v2" 2>/dev/null || true)
    if [ -z "$src" ]; then
      src="$(go env GOMODCACHE)/github.com/docker/compose/v2@$VERSION"
    fi
    awk '/^exclude \(/{p=1} p{print} p&&/^\)/{p=0}' "$src/go.mod" >> go.mod
    GOFLAGS=-mod=mod go get "github.com/docker/compose/v2/cmd@$VERSION" >/dev/null
    CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
      -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$VERSION" \
      -o "$bin.tmp" github.com/docker/compose/v2/cmd
    mv "$bin.tmp" "$bin"
  )
fi

install -d -m 0755 "$PLUGIN_DIR"
install -m 0755 "$bin" "$PLUGIN_DIR/docker-compose"
docker compose version
