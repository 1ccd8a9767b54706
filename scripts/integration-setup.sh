#!/usr/bin/env bash
# Prepares a machine for `go test -tags integration ./...`: the real parts the integration tests
# drive (docker engine, docker compose v2 in a SYSTEM plugin dir, a local CNCF registry, an OpenBao
# server, the OpenZiti `ziti` CLI for a real controller and router, and the systemd "box" image
# the box tests install the package into). Idempotent; run by CI on a fresh machine. Fails loudly (non-zero) when a part cannot be
# had, because CI runs the integration tests with CI=true and they refuse to skip there.
#
# Bcrypt for the registry's htpasswd file is made by the tests in Go (golang.org/x/crypto/bcrypt),
# so apache2-utils is not needed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "integration-setup: FAILED: $*" >&2; exit 1; }
say() { echo "integration-setup: $*"; }
t0=$SECONDS
step() { say "$1 ($((SECONDS - t0))s elapsed)"; }

command -v go >/dev/null || fail "go is not on PATH"
command -v docker >/dev/null || fail "the docker CLI is not on PATH"

# 1. The docker engine answers (before anything slow: without it nothing else matters).
if ! server=$(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})' 2>&1); then
  fail "the docker engine does not answer: $server"
fi
step "docker engine $server answers"

# 2. The CNCF registry from Debian (no public registry is reachable, so images are pushed here).
if [ -x /usr/bin/docker-registry ]; then
  step "docker-registry already installed: $(/usr/bin/docker-registry --version 2>&1 | sed -n 1p)"
else
  command -v apt-get >/dev/null || fail "docker-registry is missing and there is no apt-get to install it"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing docker-registry with apt-get"
  # Other jobs on a CI machine may hold the dpkg lock for a while: wait for it instead of failing.
  lock=(-o DPkg::Lock::Timeout=600)
  $sudo apt-get "${lock[@]}" update -q >/dev/null || fail "apt-get update"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock[@]}" install -y -q --no-install-recommends docker-registry >/dev/null \
    || fail "apt-get install docker-registry"
  # The package starts a system registry on :5000; the tests run their own, so stop it to keep
  # the port free and the machine quiet. Absent systemd (containers) there is nothing to stop.
  if command -v systemctl >/dev/null && systemctl is-active --quiet docker-registry 2>/dev/null; then
    $sudo systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
  [ -x /usr/bin/docker-registry ] || fail "docker-registry installed but /usr/bin/docker-registry is absent"
  step "installed docker-registry: $(/usr/bin/docker-registry --version 2>&1 | sed -n 1p)"
fi

# 3. docker compose v2 in a system plugin dir (the agent runs with its own DOCKER_CONFIG).
"$here/build-compose-plugin.sh" || fail "scripts/build-compose-plugin.sh"
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
if ! DOCKER_CONFIG="$empty" docker compose version 2>/dev/null | grep -q ' v2\.'; then
  fail "docker compose v2 is not visible with an empty DOCKER_CONFIG (plugin not in a system dir)"
fi
step "compose: $(DOCKER_CONFIG="$empty" docker compose version) visible with an empty DOCKER_CONFIG"

# 4. The OpenBao server binary (the tests find it with the same script, or MONKY_BAO_BIN).
bao=$("$here/build-bao.sh") || fail "scripts/build-bao.sh"
bao=$(realpath "$bao")
[ -x "$bao" ] || fail "build-bao.sh printed $bao, which is not executable"
"$bao" version >/dev/null 2>&1 || fail "$bao does not run"
step "openbao: $("$bao" version 2>&1 | sed -n 1p) at $bao (export MONKY_BAO_BIN=$bao to skip the script in tests)"

# 5. The OpenZiti CLI: controller, router and admin commands in one binary (the mesh tests run
# `ziti edge quickstart` on loopback; the tests find it with the same script, or MONKY_ZITI_BIN).
ziti=$("$here/build-ziti.sh") || fail "scripts/build-ziti.sh"
ziti=$(realpath "$ziti")
"$ziti" --version >/dev/null 2>&1 || fail "$ziti does not run"
step "ziti: $("$ziti" --version 2>&1 | sed -n 1p) at $ziti (export MONKY_ZITI_BIN=$ziti to skip the script in tests)"

# 6. The box image: Debian with systemd as PID 1, for the box tests (packaging/boxtest). Made
# with mmdebstrap from Debian's packages; rebuilt only when scripts/build-box-image.sh changes.
if ! command -v mmdebstrap >/dev/null; then
  command -v apt-get >/dev/null || fail "mmdebstrap is missing and there is no apt-get to install it"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing mmdebstrap with apt-get"
  $sudo apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null || fail "apt-get update"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends mmdebstrap >/dev/null \
    || fail "apt-get install mmdebstrap"
fi
box=$("$here/build-box-image.sh") || fail "scripts/build-box-image.sh"
step "box image: $box"

say "ready in $((SECONDS - t0))s: go test -tags integration ./internal/test/itest/..."
