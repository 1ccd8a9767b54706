#!/bin/sh
# postinst of monky-fleetctl: configure [<old-version>] | abort-upgrade | abort-deconfigure |
# abort-remove. fleetctl-exporter.service ships disabled: it belongs on the one host whose
# Prometheus watches the fleet, and the operator switches it on there. This is debhelper's
# convention for such a unit (dh_installsystemd --no-enable --restart-after-upgrade), by hand:
# an exporter the operator switched on keeps its links, and one that runs is restarted onto the
# new binary. That includes the first install of this package on a host that ran the exporter
# from monky-deployd 0.2.0, which shipped it before the split: restart (not try-restart) starts an
# enabled exporter that is down and restarts a running one; a disabled, stopped one stays so.
set -e

EXPORTER=fleetctl-exporter.service

case "$1" in
  configure | abort-upgrade | abort-deconfigure | abort-remove)
    if deb-systemd-helper debian-installed "$EXPORTER"; then
      # Removes the mask postrm `remove` set, never an operator's own.
      deb-systemd-helper unmask "$EXPORTER" >/dev/null || true
      if deb-systemd-helper --quiet was-enabled "$EXPORTER"; then
        deb-systemd-helper enable "$EXPORTER" >/dev/null || true
      fi
    fi
    deb-systemd-helper update-state "$EXPORTER" >/dev/null || true
    if [ -d /run/systemd/system ]; then
      systemctl --system daemon-reload >/dev/null || true
      deb-systemd-invoke restart "$EXPORTER" >/dev/null ||
        echo "monky-fleetctl: warning: $EXPORTER did not restart; see: journalctl -u $EXPORTER" >&2
    fi
    ;;
  *)
    echo "postinst called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
