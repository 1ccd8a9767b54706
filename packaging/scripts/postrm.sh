#!/bin/sh
# postrm of monky-deployd:
#   remove | purge | upgrade <new> | failed-upgrade <old> <new> | abort-install [<old>] |
#   abort-upgrade <old> | disappear <overwriter> <version>
# purge deletes the agent's configuration and state. It does NOT stop the application's
# containers (`docker compose -p monky-<env> down` does that) and keeps the system user, whose
# uid may still own files elsewhere.
set -e

case "${1:-}" in
  purge)
    rm -rf /var/lib/monky-deployd /etc/monky-deployd
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
    ;;
  remove)
    if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
    ;;
  upgrade | failed-upgrade | abort-install | abort-upgrade | disappear)
    ;;
  *)
    echo "postrm called with unknown argument '${1:-}'" >&2
    exit 1
    ;;
esac
exit 0
