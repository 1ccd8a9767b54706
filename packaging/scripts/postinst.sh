#!/bin/sh
# postinst of monky-deployd. dpkg calls it as
#   configure [<old-version>]         after a fresh install (no old version) or an upgrade
#   abort-upgrade|abort-remove|abort-deconfigure ...   to roll back a failed operation
# It never enables the timer on a fresh install: install.sh / the ansible role do that once
# /etc/monky-deployd/config.yaml exists. It never disables anything.
set -e

AGENT=monky-deployd
ETC=/etc/monky-deployd
STATE=/var/lib/monky-deployd
CONFIG=$ETC/config.yaml
UPGRADE_MARKER=$STATE/.dpkg-upgrade-from   # written by preinst on `upgrade` only
TIMER=monky-deployd.timer
PROXY=monky-deployd-proxy.service
# The last version whose prerm ran `systemctl disable --now` on an upgrade (fixed in 0.1.9).
LAST_BROKEN_PRERM=0.1.8

say() { echo "monky-deployd: $*"; }

# logger reaches the journal where it exists; the echo reaches dpkg's output (an operator's
# terminal, ansible's log). Both, because the repair below must be visible after the fact.
record() {
  say "$*"
  if command -v logger >/dev/null 2>&1; then logger -t monky-deployd-postinst -- "$*" || true; fi
}

ensure_user() {
  if ! getent group "$AGENT" >/dev/null; then
    groupadd --system "$AGENT"
  fi
  if ! getent passwd "$AGENT" >/dev/null; then
    useradd --system --gid "$AGENT" --home-dir "$STATE" --no-create-home \
      --shell /usr/sbin/nologin --comment "Monky backend pull agent" "$AGENT"
  fi
  # docker: the agent drives docker compose as this user. ziti: the tunneller REWRITES the
  # identity file on every controller config update and the rewrite drops POSIX ACLs, so group
  # membership is the read grant that survives (env-dev-08 went from applied to failing six
  # minutes after such a refresh). Either group may appear later: install.sh repeats this.
  for g in docker ziti; do
    if getent group "$g" >/dev/null; then usermod -a -G "$g" "$AGENT"; fi
  done
}

ensure_dirs() {
  # 0770: the agent must be able to delete bootstrap.jwt after its first login. config.yaml
  # itself stays root-owned 0640 (install.sh writes it).
  if [ -d "$ETC" ]; then
    chgrp "$AGENT" "$ETC"
    chmod 0770 "$ETC"
  else
    mkdir -p "$ETC"
    chown "root:$AGENT" "$ETC"
    chmod 0770 "$ETC"
  fi
  mkdir -p "$STATE"
  # Only the directory itself: a state tree written by an older agent keeps its owners.
  chown "$AGENT:$AGENT" "$STATE"
  chmod 0700 "$STATE"
}

systemd_running() { [ -d /run/systemd/system ]; }

# A unit file that moved (the Python package's path differed) leaves the enablement symlink
# dangling: the timer would look enabled on disk yet never load after the next reboot.
repair_dangling_enablement() {
  for link in /etc/systemd/system/timers.target.wants/$TIMER /etc/systemd/system/multi-user.target.wants/$PROXY; do
    if [ -L "$link" ] && [ ! -e "$link" ]; then
      unit=${link##*/}
      systemctl reenable "$unit"
      record "re-linked $unit: its enablement pointed at a unit file the upgrade removed"
    fi
  done
}

# Versions <= 0.1.8 ran `systemctl disable --now` in their prerm on an UPGRADE too, and dpkg runs
# the OLD prerm before this script: by now the timer of a configured box has been switched off by
# this very upgrade. Turn it back on; without this the box goes silent while looking healthy.
heal_broken_prerm() {
  old=$1
  [ -n "$old" ] || return 0
  # A reinstall after `dpkg -r` also arrives as `configure <old>`; that box was switched off on
  # purpose by a removal, not by a broken upgrade, so only a recorded upgrade qualifies.
  [ "$upgraded_from" = "$old" ] || return 0
  dpkg --compare-versions "$old" le "$LAST_BROKEN_PRERM" || return 0
  if [ ! -e "$CONFIG" ]; then
    say "upgrade from $old on an unconfigured box: timer left off (install.sh enables it)"
    return 0
  fi
  # That prerm disabled the proxy unit as well; a proxy-transport box needs it for every tick.
  # (A grep, not a YAML parser: install.sh and the ansible role write this key at top level.)
  if grep -Eq '^transport:[[:space:]]*"?proxy"?[[:space:]]*(#.*)?$' "$CONFIG"; then
    systemctl enable --now "$PROXY"
    record "upgrade from $old (its prerm disabled the units): re-enabled and started $PROXY"
  fi
  systemctl enable --now "$TIMER"
  record "upgrade from $old (its prerm disabled the timer): re-enabled and started $TIMER"
}

case "$1" in
  configure)
    old=${2:-}
    upgraded_from=
    if [ -f "$UPGRADE_MARKER" ]; then
      upgraded_from=$(cat "$UPGRADE_MARKER")
      rm -f "$UPGRADE_MARKER"
    fi
    ensure_user
    ensure_dirs
    if systemd_running; then
      systemctl daemon-reload || say "warning: systemctl daemon-reload failed"
      if [ -n "$old" ]; then
        repair_dangling_enablement
        heal_broken_prerm "$old"
        # The proxy is long-lived: restart it onto the new binary. No-op when it is not running.
        systemctl try-restart "$PROXY" || say "warning: $PROXY did not restart; see: journalctl -u $PROXY"
      fi
    fi
    ;;
  abort-upgrade | abort-remove | abort-deconfigure)
    # Our prerm changed nothing on the paths that lead here, so there is nothing to undo.
    ;;
  *)
    echo "postinst called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
