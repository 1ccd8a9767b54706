#!/bin/sh
# prerm of monky-deployd. dpkg runs the OLD package's prerm on an upgrade as well as on a removal;
# rpm passes the number of instances that will remain. 0.1.8's prerm disabled the timer
# unconditionally and every upgraded box went silent (env-dev-01, env-dev-08). So: nothing at all
# for any shape of upgrade, and only a real removal stops and disables the units.
#   dpkg: remove | upgrade <new> | failed-upgrade <old> <new> | deconfigure in-favour ...
#   rpm : 0 on erase, >= 1 on upgrade
set -e

case "${1:-}" in
  upgrade | failed-upgrade | deconfigure | [1-9]*)
    exit 0
    ;;
  remove | 0)
    if [ -d /run/systemd/system ]; then
      # A tick already running is left to finish: killing it mid-apply helps nobody.
      systemctl disable --now monky-deployd.timer || true
      systemctl disable --now monky-deployd-proxy.service || true
    fi
    ;;
  *)
    echo "prerm called with unknown argument '${1:-}'" >&2
    exit 1
    ;;
esac
exit 0
