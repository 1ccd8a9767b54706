#!/usr/bin/env bash
# Builds the "box" image the box tests (packaging/boxtest) run: a Debian bookworm root with
# systemd as PID 1, made by mmdebstrap from Debian's packages (no public image registry is
# reachable) and `docker import`ed. Prints the image's name.
#
#   build-box-image.sh [--print-name]    build if missing, print the image name
#   build-box-image.sh --print-name --no-build
#                                        print the name; exit 0 when the image exists, 1 when not
#   build-box-image.sh --prune           also remove the images and tarballs of other recipes
#
# Cached twice: the root filesystem tarball beside the Go build cache (minutes to make; survives
# `docker system prune`), and the imported image in the engine. Both are named by a hash of this
# script, so changing the recipe below is what rebuilds them; an unchanged recipe costs nothing.
# Other recipes' images and tarballs are left alone: other checkouts of the project (branches,
# worktrees on the same machine) may run their box tests on them at the same time. --prune
# removes them when that is known not to be so (an image a container still uses stays).
#
# The box gets only what a Debian server has before our installer runs, plus what the tests need
# to drive it: curl (install.sh downloads with it), acl (setfacl), gpg (install.sh and the role
# check the OpenZiti apt key's fingerprint with it), python3 and python3-apt
# (ansible's modules run on the box; its apt and package_facts modules need python3-apt), and
# passwd/adduser. No docker engine: the tests mount the host's socket and
# copy in the host's static docker CLI and compose plugin.
set -euo pipefail

usage() {
  echo "usage: $0 [--print-name [--no-build]]" >&2
  exit 2
}

build=1 prune=0
for arg in "$@"; do
  case "$arg" in
    --print-name) ;;
    --no-build) build=0 ;;
    --prune) prune=1 ;;
    *) usage ;;
  esac
done

SUITE=bookworm
INCLUDE=systemd,systemd-sysv,dbus,ca-certificates,curl,acl,gpg,python3,python3-apt,passwd,adduser,procps,iproute2
GO=${GO:-go}
CACHE="${MONKY_TOOL_CACHE:-$("$GO" env GOCACHE)/../monky-tools}"
# The recipe is this file: any change to it names a new image.
recipe=$(sha256sum "$0" | cut -c1-12)
image="monky-box:$recipe"
rootfs="$CACHE/box-rootfs-$recipe.tar"

prune_others() {
  [ "$prune" = 1 ] || return 0
  for old in "$CACHE"/box-rootfs-*.tar; do
    [ "$old" = "$rootfs" ] || rm -f "$old"
  done
  for tag in $(docker image ls monky-box --format '{{.Tag}}'); do
    [ "monky-box:$tag" = "$image" ] || docker image rm "monky-box:$tag" >/dev/null 2>&1 || true
  done
}

if docker image inspect "$image" >/dev/null 2>&1; then
  prune_others
  echo "$image"
  exit 0
fi
if [ "$build" = 0 ]; then
  echo "$image"
  exit 1
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.box-image.lock"
flock 9
if [ ! -s "$rootfs" ]; then
  command -v mmdebstrap >/dev/null || {
    echo "build-box-image: mmdebstrap is missing (apt-get install mmdebstrap)" >&2
    exit 1
  }
  echo "box image: building a $SUITE root with systemd (mmdebstrap, about a minute)" >&2
  # --mode=root: this runs as root in CI; unshare mode needs user namespaces a container may lack.
  mmdebstrap --quiet --mode=root --format=tar --variant=minbase --include="$INCLUDE" \
    --customize-hook='echo monky-box >"$1/etc/hostname"' \
    --customize-hook='rm -f "$1/etc/machine-id"; : >"$1/etc/machine-id"' \
    "$SUITE" "$rootfs.tmp" >&2
  mv "$rootfs.tmp" "$rootfs"
fi
if ! docker image inspect "$image" >/dev/null 2>&1; then
  docker import -c 'CMD ["/sbin/init"]' "$rootfs" "$image" >/dev/null
fi
prune_others
echo "$image"
