#!/bin/sh
# postrm of monky-deployd:
#   remove | purge | upgrade <new> | failed-upgrade <old> <new> | abort-install [<old>] |
#   abort-upgrade <old> | disappear <overwriter> <version>
#   rpm: 0 on erase (as remove), >= 1 on upgrade (nothing). Built as a .deb only; see prerm.
# purge deletes the agent's configuration and state. It does NOT stop the application's
# containers (`docker compose -p monky-<env> down` does that) and keeps the system user, whose
# uid may still own files elsewhere.
# Units are enabled with deb-systemd-helper and started with deb-systemd-invoke (Debian's
# convention); systemctl only reloads systemd.
set -e

ETC=/etc/monky-deployd
CONFIG=$ETC/config.yaml
OPT_OUT=$ETC/timer.disabled-by-operator
PKG_STATE=/var/lib/monky-deployd-package
UPGRADE_MARKER=$PKG_STATE/upgrade-from
RUN_STATE=/run/monky-deployd-package
TIMER=monky-deployd.timer
PROXY=monky-deployd-proxy.service
LAST_BROKEN_PRERM=0.1.8

say() { echo "monky-deployd: $*"; }
record() {
  say "$*"
  if command -v logger >/dev/null 2>&1; then logger -t monky-deployd-postrm -p daemon.warning -- "$*" || true; fi
}
systemd_running() { [ -d /run/systemd/system ]; }
# unit_state UNIT: masked, masked-runtime, enabled or disabled, read as postinst reads it.
unit_state() {
  if [ "$(readlink "/etc/systemd/system/$1" 2>/dev/null)" = /dev/null ]; then
    echo masked
  elif [ "$(readlink "/run/systemd/system/$1" 2>/dev/null)" = /dev/null ]; then
    echo masked-runtime
  elif deb-systemd-helper --quiet is-enabled "$1" 2>/dev/null; then
    echo enabled
  else
    echo disabled
  fi
}
# is_on UNIT: enabled in a way that survives a reboot, or masked (then left alone).
is_on() {
  case "$(unit_state "$1")" in
    enabled | masked | masked-runtime) return 0 ;;
  esac
  return 1
}

# enable_unit UNIT: enable, and start when systemd runs (else it starts at the next boot). The
# old package's units were never recorded with deb-systemd-helper, so its enable goes through
# `systemctl preset`, which switches them on.
enable_unit() {
  deb-systemd-helper enable "$1" || return 1
  [ "$(unit_state "$1")" = enabled ] || return 1
  if systemd_running; then deb-systemd-invoke start "$1"; fi
}
how() {
  if systemd_running; then echo "re-enabled and started"; else echo "re-enabled (systemd is not running: it starts at the next boot)"; fi
}

# abort-upgrade <old>: this package's unpack (or preinst) failed and dpkg is putting <old> back.
# When <old> is 0.1.8 or older its prerm has ALREADY disabled the timer and its own postinst
# (run next, `abort-upgrade`) does not switch it back on: without this the box stays on the old
# version with the agent off — the 0.1.8 outage again. Nothing here may fail the rollback.
abort_upgrade() {
  old=$1
  # Keep the upgrade record only when the package dpkg returns to is still half-configured (its
  # postinst will run `configure <Config-Version>` and needs it); otherwise it is stale.
  cfgv=$(dpkg-query -W -f='${Config-Version}' monky-deployd 2>/dev/null || true)
  if [ -z "$cfgv" ] || [ "$cfgv" = "$old" ]; then rm -f "$UPGRADE_MARKER"; fi
  [ -n "$old" ] || return 0
  dpkg --compare-versions "$old" le "$LAST_BROKEN_PRERM" || return 0
  [ -e "$CONFIG" ] || return 0
  if [ -e "$OPT_OUT" ]; then
    record "failed upgrade from $old rolled back: $TIMER left as it is ($OPT_OUT exists)"
    return 0
  fi
  if ! command -v deb-systemd-helper >/dev/null 2>&1; then
    record "warning: failed upgrade from $old rolled back: no deb-systemd-helper here, $TIMER not checked"
    return 0
  fi
  if ! is_on "$TIMER"; then
    if enable_unit "$TIMER"; then
      record "failed upgrade from $old rolled back (its prerm had disabled the timer): $(how) $TIMER; if this box is switched off on purpose: systemctl disable --now $TIMER && touch $OPT_OUT"
    else
      record "error: failed upgrade from $old rolled back and $TIMER could not be re-enabled: the agent is OFF; run: systemctl enable --now $TIMER"
    fi
  fi
  if grep -Eq '^transport:[[:space:]]*"?proxy"?[[:space:]]*(#.*)?$' "$CONFIG" && ! is_on "$PROXY"; then
    if enable_unit "$PROXY"; then
      record "failed upgrade from $old rolled back: $(how) $PROXY"
    else
      record "warning: failed upgrade from $old rolled back: $PROXY could not be re-enabled; run: systemctl enable --now $PROXY"
    fi
  fi
}

case "${1:-}" in
  purge)
    # deb-systemd-helper forgets the units and removes any link still recorded for them.
    if command -v deb-systemd-helper >/dev/null; then
      deb-systemd-helper purge "$TIMER" "$PROXY" >/dev/null || true
    fi
    rm -rf /var/lib/monky-deployd "$ETC" "$PKG_STATE" "$RUN_STATE"
    if systemd_running; then systemctl --system daemon-reload || true; fi
    ;;
  remove | 0)
    # The removal went through: prerm's record of the enabled units is no longer needed.
    rm -rf "$RUN_STATE"
    if systemd_running; then systemctl --system daemon-reload || true; fi
    ;;
  abort-upgrade)
    abort_upgrade "${2:-}"
    ;;
  upgrade | failed-upgrade | abort-install | disappear | [1-9]*)
    ;;
  *)
    echo "postrm called with unknown argument '${1:-}'" >&2
    exit 1
    ;;
esac
exit 0
