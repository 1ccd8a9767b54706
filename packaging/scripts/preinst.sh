#!/bin/sh
# preinst of monky-deployd:  install [<old>]  |  upgrade <old>  |  abort-upgrade <new>
# dpkg calls it after the OLD package's prerm. It only records whether this is an UPGRADE, for
# postinst: `postinst configure <old>` looks the same after an upgrade and after a reinstall of a
# package that was removed (but not purged) — and only an upgrade from a version whose prerm
# disabled the timer may switch the timer back on.
set -e

MARKER_DIR=/var/lib/monky-deployd
MARKER=$MARKER_DIR/.dpkg-upgrade-from

case "${1:-}" in
  upgrade)
    mkdir -p "$MARKER_DIR"
    printf '%s\n' "${2:-}" >"$MARKER"
    ;;
  install)
    rm -f "$MARKER"
    ;;
  abort-upgrade)
    ;;
  *)
    echo "preinst called with unknown argument '${1:-}'" >&2
    exit 1
    ;;
esac
exit 0
