#!/usr/bin/env bash
# `make demo`: builds the agent, fleetctl, the dev stack and the demo app, then runs
# `devstack demo` (internal/dev/devstack/demo): a local control plane on loopback, five agents
# deploying an example app, one gone silent on a live host, one refused a privileged bundle,
# and `fleetctl status` catching both; `fleetctl exporter` serves the same verdicts to a
# Prometheus on loopback, which raises MonkyAgentSilent from the package's alert rules. Needs Go;
# uses docker when an engine answers (else the agents report that they cannot deploy),
# docker-registry, a built OpenBao and a built ziti (the real OpenZiti controller and router, the
# agents on the mesh through their own proxies) when present (`make integration-setup` installs
# them; MONKY_DEMO_ZITI=off keeps the fake controller), and
# Debian's prometheus when installed (`make prometheus-deps`). Leaves nothing running, Ctrl-C included.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

work=$(mktemp -d "${TMPDIR:-/tmp}/monky-demo.XXXXXX")
chmod 700 "$work"

# The safety net behind devstack's own clean-up, for when it was killed before it could run:
# the servers it started (by the pids it recorded), the demo's compose projects and images, the
# work directory.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -s "$work/stack/stack/pids" ]; then
    while read -r pid; do
      kill -TERM "$pid" 2>/dev/null || true
    done <"$work/stack/stack/pids"
  fi
  if docker version >/dev/null 2>&1; then
    for project in $(docker ps -a --filter label=com.docker.compose.project \
        --format '{{.Label "com.docker.compose.project"}}' | grep '^monky-env-demo-' | sort -u); do
      echo "demo: removing leftover compose project $project" >&2
      docker compose -p "$project" down -v --remove-orphans --timeout 5 >/dev/null 2>&1 || true
    done
    for image in $(docker image ls --format '{{.Repository}}:{{.Tag}}' | grep -E '(^|/)monky-demo/hello:' || true); do
      docker image rm "$image" >/dev/null 2>&1 || true
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
mkdir -p "$work/bin" "$work/stack"
# The dev stack first: its preflight runs monky-deployd doctor's docker and compose checks before
# anything else is built, so a box without compose v2 stops in seconds with the fix.
echo "demo: building the dev stack"
# The release version, as `make build` links it: the kits fleetctl writes name that package.
"$GO" build -ldflags "-X scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version.Version=$(cat VERSION)" \
  -o "$work/bin/devstack" ./internal/dev/cmd/devstack
echo "demo: preflight: monky-deployd doctor's docker and compose checks, as the agents will run docker"
"$work/bin/devstack" preflight --dir "$work/stack"
echo "demo: building bin/monky-deployd, bin/fleetctl and the demo app"
make --no-print-directory build >/dev/null
CGO_ENABLED=0 GOOS=linux "$GO" build -trimpath -ldflags "-s -w -X main.version=1" -o "$work/bin/demoapp" ./internal/dev/cmd/demoapp

# OpenBao: the real dev server when a bao binary is at hand (MONKY_BAO_BIN, or the one
# scripts/build-bao.sh caches, whose path only that script knows), never built here — that
# takes minutes; else the in-process fake.
bao=${MONKY_BAO_BIN:-}
if [ -z "$bao" ]; then
  if cached=$(GO=$GO scripts/build-bao.sh --print-path --no-build); then
    bao=$cached
  else
    echo "demo: no OpenBao binary built yet (scripts/build-bao.sh builds one, in minutes): OpenBao is the in-process fake"
  fi
fi
# OpenZiti: the real controller and edge router (`ziti edge quickstart` on loopback) when a ziti
# binary is at hand (MONKY_ZITI_BIN, or the one scripts/build-ziti.sh caches), never built here;
# else the in-process fake management API. MONKY_DEMO_ZITI=off forces the fake.
ziti=
case ${MONKY_DEMO_ZITI:-auto} in
  off) echo "demo: MONKY_DEMO_ZITI=off: the ziti controller is the in-process fake" ;;
  auto)
    ziti=${MONKY_ZITI_BIN:-}
    if [ -z "$ziti" ]; then
      if cached=$(GO=$GO scripts/build-ziti.sh --print-path --no-build); then
        ziti=$cached
      else
        echo "demo: no ziti binary built yet (scripts/build-ziti.sh builds one, in minutes): the ziti controller is the in-process fake"
      fi
    fi ;;
  *) echo "demo: MONKY_DEMO_ZITI=$MONKY_DEMO_ZITI: want off or auto" >&2; exit 2 ;;
esac
echo "demo: built in $((SECONDS - t0))s"
echo

"$work/bin/devstack" demo --dir "$work/stack" --no-preflight \
  --agent-bin bin/monky-deployd --fleetctl-bin bin/fleetctl \
  --app-bin "$work/bin/demoapp" ${bao:+--bao-bin "$bao"} ${ziti:+--ziti-bin "$ziti"}
