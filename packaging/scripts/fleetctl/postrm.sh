#!/bin/sh
# postrm of monky-fleetctl: remove | purge | upgrade | failed-upgrade | abort-install |
# abort-upgrade | disappear. debhelper's convention for a unit: a removed package masks its unit
# (its enablement, if any, stays for a reinstall, whose postinst unmasks it); a purge forgets it.
set -e

EXPORTER=fleetctl-exporter.service

case "$1" in
  remove)
    if [ -d /run/systemd/system ]; then
      systemctl --system daemon-reload >/dev/null || true
    fi
    if command -v deb-systemd-helper >/dev/null; then
      deb-systemd-helper mask "$EXPORTER" >/dev/null || true
    fi
    ;;
  purge)
    if command -v deb-systemd-helper >/dev/null; then
      deb-systemd-helper purge "$EXPORTER" >/dev/null || true
      deb-systemd-helper unmask "$EXPORTER" >/dev/null || true
    fi
    ;;
  upgrade | failed-upgrade | abort-install | abort-upgrade | disappear)
    ;;
  *)
    echo "postrm called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
