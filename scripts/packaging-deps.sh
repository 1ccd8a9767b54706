#!/usr/bin/env bash
# Installs, with apt, every tool the packaging tests use (go -C packaging test -tags integration ./...):
# the real dpkg, busybox-static for the throw-away chroot, shellcheck, ansible and ansible-lint,
# systemd-analyze, lintian (make deb-check), make, curl, and the binaries copied into the chroot
# (gpg, getfacl, perl with deb-systemd-helper and deb-systemd-invoke). Idempotent, and quiet when everything is already there.
set -euo pipefail

# package -> a file it installs, to tell "installed" without asking apt.
declare -A PROBE=(
  [dpkg]=/usr/bin/dpkg
  [busybox-static]=/bin/busybox
  [shellcheck]=/usr/bin/shellcheck
  [ansible]=/usr/bin/ansible-playbook
  [ansible-lint]=/usr/bin/ansible-lint
  [systemd]=/usr/bin/systemd-analyze
  [lintian]=/usr/bin/lintian
  [gpg]=/usr/bin/gpg
  [acl]=/usr/bin/getfacl
  [init-system-helpers]=/usr/bin/deb-systemd-helper
  [perl-base]=/usr/bin/perl
  [make]=/usr/bin/make
  [curl]=/usr/bin/curl
  [bash]=/bin/bash
  [tar]=/bin/tar
  [coreutils]=/usr/bin/install
  [diffutils]=/usr/bin/cmp
  [libc-bin]=/sbin/ldconfig
)

missing=()
for pkg in "${!PROBE[@]}"; do
  [ -x "${PROBE[$pkg]}" ] || missing+=("$pkg")
done
# busybox (the dynamic one) and busybox-static conflict; the chroot needs the static one.
if [ -x /bin/busybox ] && ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then
  missing+=(busybox-static)
fi
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "packaging-deps: missing ${missing[*]}; run as root to install them" >&2
  exit 1
fi
echo "packaging-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "packaging-deps: apt-get failed" >&2
  exit 1
fi
for pkg in "${missing[@]}"; do
  [ -x "${PROBE[$pkg]}" ] || { echo "packaging-deps: $pkg installed but ${PROBE[$pkg]} is missing" >&2; exit 1; }
done
