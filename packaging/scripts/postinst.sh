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
# The old version of the last upgrade, one line ("0.1.9\n"), root 0644, for the agent to report
# as upgraded_from: the Python agent's state.json records no version of its own.
UPGRADED_FROM=$STATE/upgraded-from
# An operator who switched the timer off on purpose creates this file; the repair below then
# leaves the timer alone.
OPT_OUT=$ETC/timer.disabled-by-operator
TIMER=monky-deployd.timer
PROXY=monky-deployd-proxy.service
# The last version whose prerm ran `systemctl disable --now` on an upgrade (fixed in 0.1.9).
LAST_BROKEN_PRERM=0.1.8
# Every version before the Go agent (0.2.0, its pre-releases included): a box upgraded from one
# of them may carry a timer an earlier upgrade from <= 0.1.8 switched off.
FIRST_GO_VERSION=0.2.0~

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
  # A failure is a warning: it must not stop the timer repair below.
  for g in docker ziti; do
    if getent group "$g" >/dev/null; then
      usermod -a -G "$g" "$AGENT" || record "warning: could not add $AGENT to group $g (usermod -a -G $g $AGENT)"
    fi
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

# record_upgraded_from OLD: leave the old version where the agent reads it (see UPGRADED_FROM).
# Not on a reinstall of the same version. A failure is a warning: it is telemetry.
record_upgraded_from() {
  new=$(dpkg-query -W -f='${Version}' "$AGENT" 2>/dev/null || true)
  [ "$1" != "$new" ] || return 0
  if printf '%s\n' "$1" >"$UPGRADED_FROM.new" && chown root:root "$UPGRADED_FROM.new" &&
    chmod 0644 "$UPGRADED_FROM.new" && mv -f "$UPGRADED_FROM.new" "$UPGRADED_FROM"; then
    return 0
  fi
  rm -f "$UPGRADED_FROM.new"
  say "warning: could not write $UPGRADED_FROM"
}

systemd_running() { [ -d /run/systemd/system ]; }

# A unit file that moved (the Python package's path differed) leaves the enablement symlink
# dangling: the timer would look enabled on disk yet never load after the next reboot. Failing
# to re-link the timer fails the configure (the upgrade marker stays for the re-run); the proxy
# only warns.
repair_dangling_enablement() {
  for link in /etc/systemd/system/timers.target.wants/$TIMER /etc/systemd/system/multi-user.target.wants/$PROXY; do
    if [ -L "$link" ] && [ ! -e "$link" ]; then
      unit=${link##*/}
      if systemctl reenable "$unit"; then
        record "re-linked $unit: its enablement pointed at a unit file the upgrade removed"
      elif [ "$unit" = "$TIMER" ]; then
        record "error: could not re-link $unit (systemctl reenable $unit); run: dpkg --configure -a"
        return 1
      else
        record "warning: could not re-link $unit; run: systemctl reenable $unit"
      fi
    fi
  done
}

# unit_state UNIT: what `systemctl is-enabled` says ("enabled", "disabled", "masked", ...).
unit_state() {
  systemctl is-enabled "$1" 2>/dev/null || true
}

# Versions <= 0.1.8 ran `systemctl disable --now` in their prerm on an UPGRADE too, and dpkg runs
# the OLD prerm before this script: by now the timer of a configured box has been switched off by
# this very upgrade. And a box that went 0.1.8 -> 0.1.9 lost its timer on THAT upgrade and is
# still off now. So, on an upgrade from any version before the Go agent, turn a disabled timer
# back on; without this the box goes silent while looking healthy. The timer comes first; a
# proxy that will not start is a warning, never the reason the timer stays off.
heal_broken_prerm() {
  old=$1
  [ -n "$old" ] || return 0
  # A reinstall after `dpkg -r` also arrives as `configure <old>`; that box was switched off on
  # purpose by a removal, not by a broken upgrade, so only a recorded upgrade qualifies.
  [ "$upgraded_from" = "$old" ] || return 0
  dpkg --compare-versions "$old" lt "$FIRST_GO_VERSION" || return 0
  if [ ! -e "$CONFIG" ]; then
    say "upgrade from $old on an unconfigured box: timer left off (install.sh enables it)"
    return 0
  fi
  if [ -e "$OPT_OUT" ]; then
    record "upgrade from $old: $TIMER left as it is ($OPT_OUT exists)"
    return 0
  fi
  if dpkg --compare-versions "$old" le "$LAST_BROKEN_PRERM"; then
    why="its prerm disabled the timer"
  else
    why="the timer was disabled, most likely by the 0.1.8 prerm of an earlier upgrade"
  fi
  case "$(unit_state "$TIMER")" in
    enabled | enabled-runtime | static | indirect | generated | alias | linked | linked-runtime) ;;
    masked | masked-runtime)
      record "upgrade from $old: $TIMER is masked; left as it is (systemctl unmask $TIMER to run the agent)"
      return 0
      ;;
    *)
      systemctl enable --now "$TIMER"
      record "upgrade from $old ($why): re-enabled and started $TIMER"
      ;;
  esac
  # Those prerms disabled the proxy unit as well; a proxy-transport box needs it for every tick.
  # (A grep, not a YAML parser: install.sh and the ansible role write this key at top level.)
  if grep -Eq '^transport:[[:space:]]*"?proxy"?[[:space:]]*(#.*)?$' "$CONFIG"; then
    case "$(unit_state "$PROXY")" in
      enabled | enabled-runtime | masked | masked-runtime) ;;
      *)
        if systemctl enable --now "$PROXY"; then
          record "upgrade from $old: re-enabled and started $PROXY"
        else
          record "warning: upgrade from $old: $PROXY did not start; the timer runs regardless, see: journalctl -u $PROXY"
        fi
        ;;
    esac
  fi
}

case "$1" in
  configure)
    old=${2:-}
    upgraded_from=
    if [ -f "$UPGRADE_MARKER" ]; then
      upgraded_from=$(cat "$UPGRADE_MARKER")
    fi
    ensure_user
    ensure_dirs
    if systemd_running; then
      systemctl daemon-reload || say "warning: systemctl daemon-reload failed"
      if [ -n "$old" ]; then
        repair_dangling_enablement
        heal_broken_prerm "$old"
      fi
    fi
    # The marker goes only once the repair is done: a configure that failed before this point
    # is re-run by `dpkg --configure -a`, which must still know that this was an upgrade.
    rm -f "$UPGRADE_MARKER"
    if [ -n "$old" ]; then
      record_upgraded_from "$old"
      if systemd_running; then
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
