#!/usr/bin/env bash
# Installs, with apt, what the metrics and alert tests use: Debian's prometheus (the server and
# promtool, for `promtool check rules` / `promtool test rules` and a real rule evaluation) and
# prometheus-node-exporter (its textfile collector reads the agent's monky_deployd.prom).
# Idempotent, and quiet when both are there. The packages' own services are not wanted here: the
# tests start their own processes on loopback, so any the packages started are stopped again.
set -euo pipefail

declare -A PROBE=(
  [prometheus]=/usr/bin/promtool
  [prometheus-node-exporter]=/usr/bin/prometheus-node-exporter
)
missing=()
for pkg in "${!PROBE[@]}"; do
  [ -x "${PROBE[$pkg]}" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "prometheus-deps: missing ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "prometheus-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update && apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "prometheus-deps: apt-get failed" >&2
  exit 1
fi
if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
  systemctl disable --now prometheus.service prometheus-node-exporter.service >/dev/null 2>&1 || true
fi
for pkg in "${missing[@]}"; do
  [ -x "${PROBE[$pkg]}" ] || { echo "prometheus-deps: $pkg installed but ${PROBE[$pkg]} is missing" >&2; exit 1; }
done
echo "prometheus-deps: $(promtool --version 2>&1 | head -1)"
