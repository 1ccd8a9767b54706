#!/bin/sh
# prerm of monky-fleetctl: remove | upgrade <new> | failed-upgrade <old> <new> | deconfigure ...
# Only a removal stops the exporter; an upgrade leaves it running and postinst restarts it onto
# the new binary (debhelper's --restart-after-upgrade convention).
set -e

EXPORTER=fleetctl-exporter.service

case "$1" in
  remove)
    if [ -d /run/systemd/system ]; then
      deb-systemd-invoke stop "$EXPORTER" >/dev/null || true
    fi
    ;;
  upgrade | failed-upgrade | deconfigure)
    ;;
  *)
    echo "prerm called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
