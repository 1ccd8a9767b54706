#!/bin/sh
# prerm of monky-deployd. dpkg runs the OLD package's prerm on an upgrade as well as on a removal.
# 0.1.8's prerm disabled the timer unconditionally and every upgraded box went silent
# (env-dev-01, env-dev-08). So: nothing at all for any shape of upgrade, and only a real removal
# stops and disables the units.
#   dpkg: remove [in-favour <pkg> <version>] | upgrade <new> | failed-upgrade <old> <new> |
#         deconfigure in-favour ...
#   rpm : 0 on erase, >= 1 on upgrade. This package is built as a .deb only; the numeric
#         arguments are accepted by all four scripts so that an rpm built from them can never
#         switch the agent off on an upgrade (docs/OPERATIONS.md, "Maintainer scripts").
# A removal can be rolled back (`remove in-favour` of a conflicting package whose own install
# then fails: dpkg runs our `postinst abort-remove`). So before disabling, the units that were
# enabled are recorded in a root-owned runtime directory; postinst abort-remove re-enables them
# and postrm remove clears the record.
# Units are stopped with deb-systemd-invoke and disabled with deb-systemd-helper (Debian's
# convention); postinst recorded their links with it, whoever enabled them.
set -e

RUN_STATE=/run/monky-deployd-package
REMOVE_RECORD=$RUN_STATE/enabled-before-remove
TIMER=monky-deployd.timer
PROXY=monky-deployd-proxy.service

record_enabled_units() {
  mkdir -p "$RUN_STATE"
  chmod 0755 "$RUN_STATE"
  tmp=$(mktemp "$RUN_STATE/.enabled-before-remove.XXXXXX")
  for u in "$TIMER" "$PROXY"; do
    if deb-systemd-helper --quiet is-enabled "$u"; then echo "$u" >>"$tmp"; fi
  done
  chmod 0644 "$tmp"
  mv -f "$tmp" "$REMOVE_RECORD"
}

case "${1:-}" in
  upgrade | failed-upgrade | deconfigure | [1-9]*)
    exit 0
    ;;
  remove | 0)
    record_enabled_units || echo "monky-deployd: warning: could not record the enabled units; a rolled-back removal leaves them off" >&2
    if [ -d /run/systemd/system ]; then
      # A tick already running is left to finish: killing it mid-apply helps nobody.
      deb-systemd-invoke stop "$TIMER" "$PROXY" || true
    fi
    # The record is brought up to date first: disable removes the links it lists.
    deb-systemd-helper update-state "$TIMER" "$PROXY" || true
    deb-systemd-helper disable "$TIMER" "$PROXY" || true
    ;;
  *)
    echo "prerm called with unknown argument '${1:-}'" >&2
    exit 1
    ;;
esac
exit 0
