#!/usr/bin/env bash
# The fuzz stage of CI, before and after issue 24, side by side in one run: `make fuzz
# FUZZTIME=1x` with the Makefile of the tree before (one instrumented build per target) and with
# this tree's (one per package), on the same build cache (MONKY_BENCH_COLD=1: each on an empty
# one of its own, what a fresh CI machine pays; much longer). The "before" recipe runs first, so
# a cold shared cache would favour the "after" one: make bench runs this after the Go benchmarks
# have built everything. Prints each one's wall time, its builds and the machine's load.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${MONKY_BENCH_BEFORE:-ad3e423}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
git show "$before:Makefile" >"$work/Makefile.before"
run() { # NAME MAKEFILE
  local start=$SECONDS
  local cache
  cache=$(go env GOCACHE)
  if [ "${MONKY_BENCH_COLD:-}" = 1 ]; then cache="$work/cache-$1"; fi
  if ! GOCACHE="$cache" make -f "$2" fuzz FUZZTIME=1x >"$work/$1.log" 2>&1; then
    tail -20 "$work/$1.log" >&2
    echo "bench-fuzz: the $1 recipe failed" >&2
    exit 1
  fi
  echo $((SECONDS - start))
}
echo "bench-fuzz: load $(cut -d' ' -f1-3 /proc/loadavg)"
b=$(run before "$work/Makefile.before")
a=$(run after Makefile)
echo "bench-fuzz: load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '| make fuzz FUZZTIME=1x | before (%s) | after |\n|---|---|---|\n| wall | %ds (%d builds) | %ds (%d builds) |\n' \
  "$before" "$b" "$(grep -c '^fuzz \./' "$work/before.log")" "$a" "$(grep -c '^fuzz: build' "$work/after.log")"
