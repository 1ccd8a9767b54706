#!/bin/sh
# preinst of monky-deployd:  install [<old>]  |  upgrade <old>  |  abort-upgrade <new>
# dpkg calls it after the OLD package's prerm. It only records whether this is an UPGRADE, for
# postinst: `postinst configure <old>` looks the same after an upgrade and after a reinstall of a
# package that was removed (but not purged) — and only an upgrade from a version whose prerm
# disabled the timer may switch the timer back on.
#
# The record holds the version postinst will be handed, which is NOT always preinst's <old>:
# dpkg passes preinst `upgrade <installed version>` but postinst `configure <last version
# successfully configured>` (Config-Version). After a failed configure of X (upgraded from
# 0.1.8), an upgrade to Y runs `preinst upgrade X` and then `postinst configure 0.1.8`.
#
# The record lives in a root-owned directory: /var/lib/monky-deployd belongs to the agent's
# account, which could plant a symlink there for root to write through.
#
# This package is built as a .deb only; rpm's numeric arguments (1 install, 2 upgrade) are
# accepted and do nothing — the repair it records is dpkg-only (see docs/OPERATIONS.md).
set -e

AGENT=monky-deployd
PKG_STATE=/var/lib/monky-deployd-package   # root:root 0755, made here or by postinst; purge removes it
MARKER=$PKG_STATE/upgrade-from
LEGACY_MARKER=/var/lib/monky-deployd/.dpkg-upgrade-from   # 0.2.0 pre-releases kept it here

case "${1:-}" in
  upgrade)
    old=$(dpkg-query -W -f='${Config-Version}' "$AGENT" 2>/dev/null || true)
    [ -n "$old" ] || old=${2:-}
    mkdir -p "$PKG_STATE"
    chown root:root "$PKG_STATE"
    chmod 0755 "$PKG_STATE"
    tmp=$(mktemp "$PKG_STATE/.upgrade-from.XXXXXX")
    printf '%s\n' "$old" >"$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$MARKER"
    rm -f "$LEGACY_MARKER"
    ;;
  install)
    rm -f "$MARKER" "$LEGACY_MARKER"
    ;;
  abort-upgrade | [0-9]*)
    ;;
  *)
    echo "preinst called with unknown argument '${1:-}'" >&2
    exit 1
    ;;
esac
exit 0
