#!/bin/sh
# postinst of monky-deployd. dpkg calls it as
#   configure [<old-version>]   after a fresh install (no old version) or an upgrade; <old-version>
#                               is the last version SUCCESSFULLY CONFIGURED (Config-Version), which
#                               after a failed configure is not the version preinst was told about
#   abort-upgrade <new>         we are the old package and the new one failed: our prerm did nothing
#   abort-remove [in-favour <pkg> <version>]   a removal was rolled back: our prerm had disabled the
#                               units and recorded which were enabled; they are switched back on
#   abort-deconfigure ...       our prerm did nothing for `deconfigure`: nothing to undo
#   rpm: 1 (install) / >= 2 (upgrade): user and directories only. Built as a .deb only; see prerm.
# It never enables the timer on a fresh install: install.sh / the ansible role do that once
# /etc/monky-deployd/config.yaml exists. It never disables anything.
#
# Units are enabled with deb-systemd-helper and started with deb-systemd-invoke, Debian's
# convention (they work where systemd is not running, and honour policy-rc.d); systemctl only
# reloads systemd.
set -e

AGENT=monky-deployd
ETC=/etc/monky-deployd
STATE=/var/lib/monky-deployd
CONFIG=$ETC/config.yaml
# Root-owned 0755 (made by preinst or here, removed on purge). Root writes nothing in the
# agent-owned $STATE except upgraded-from, which is built here and renamed into place (a rename
# replaces a planted symlink instead of following it).
PKG_STATE=/var/lib/monky-deployd-package
UPGRADE_MARKER=$PKG_STATE/upgrade-from       # written by preinst on `upgrade` only
LEGACY_MARKER=$STATE/.dpkg-upgrade-from       # where 0.2.0 pre-releases kept it
RUN_STATE=/run/monky-deployd-package
REMOVE_RECORD=$RUN_STATE/enabled-before-remove   # written by prerm `remove`
# The old version of the last upgrade, one line ("0.1.9\n"), root 0644, for the agent to report
# as upgraded_from: the Python agent's state.json records no version of its own.
UPGRADED_FROM=$STATE/upgraded-from
# An operator who switched the timer off on purpose creates this file; the repair below then
# leaves the timer alone (so do install.sh and the ansible role).
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

# loud: a line an operator must not miss (the timer switched back on): a warning in the journal,
# framed with NOTICE on dpkg's output.
loud() {
  say "NOTICE: $*"
  if command -v logger >/dev/null 2>&1; then logger -t monky-deployd-postinst -p daemon.warning -- "NOTICE: $*" || true; fi
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
  mkdir -p "$PKG_STATE"
  chown root:root "$PKG_STATE"
  chmod 0755 "$PKG_STATE"
  mkdir -p "$STATE"
  chown "$AGENT:$AGENT" "$STATE"
  chmod 0700 "$STATE"
  reown_state
}

# A tick run by hand as root by an agent before 0.2.0 left root's state.json, releases and
# docker/config.json in $STATE: every later tick of the agent failed on them. The agent gives
# root's files there back to its account (`monky-deployd reown`): it opens every entry without
# following a symlink and changes the owner of what it opened, so nothing can be swapped in
# between (a shell's find -exec chown cannot promise that); a file with a second name (a hard
# link to a file elsewhere) keeps its owner and is named; other owners' files (a container's in a
# bind mount) and upgraded-from (root's by design) stay as they are. A failure is a warning: it
# must not stop the timer repair.
reown_state() {
  monky-deployd reown --dir "$STATE" ||
    record "warning: could not give everything under $STATE back to $AGENT; see: monky-deployd doctor (state-owner)"
}

# record_upgraded_from OLD: leave the old version where the agent reads it (see UPGRADED_FROM).
# Not on a reinstall of the same version. A failure is a warning: it is telemetry.
# $STATE belongs to the agent's account, which could plant a symlink at any name in it. So the
# file is made in the root-owned $PKG_STATE (mktemp: O_EXCL, never through a symlink) and renamed
# over the target: rename(2) replaces whatever sits at that name and follows nothing. A rename
# needs one filesystem; across two the file is not written (mv would fall back to a copy).
record_upgraded_from() {
  new=$(dpkg-query -W -f='${Version}' "$AGENT" 2>/dev/null || true)
  [ "$1" != "$new" ] || return 0
  if [ "$(stat -c %d "$PKG_STATE" 2>/dev/null)" != "$(stat -c %d "$STATE" 2>/dev/null)" ]; then
    say "warning: $UPGRADED_FROM not written: $STATE and $PKG_STATE are on different filesystems"
    return 0
  fi
  if tmp=$(mktemp "$PKG_STATE/.upgraded-from.XXXXXX"); then
    if printf '%s\n' "$1" >"$tmp" && chown root:root "$tmp" && chmod 0644 "$tmp" &&
      mv -fT "$tmp" "$UPGRADED_FROM"; then
      return 0
    fi
    rm -f "$tmp"
  fi
  say "warning: could not write $UPGRADED_FROM"
}

systemd_running() { [ -d /run/systemd/system ]; }
have_systemctl() { command -v systemctl >/dev/null 2>&1; }

# enable_unit UNIT: enable it and, where systemd runs, start it (elsewhere — a chroot, an image
# build — the next boot starts it). deb-systemd-helper enables a unit it has no record of yet
# (every box before 0.3.0: nothing recorded the units with it) through `systemctl preset`; a
# leftover link from a unit file that moved is removed first, or it would count as enabled.
# A unit it HAS recorded and whose links are gone (`systemctl disable`, a broken prerm, on a box
# whose units a package recorded) is one it never relinks, neither on enable nor on reenable: it
# takes that for the operator's choice. The callers decided otherwise (not masked, no opt-out),
# so such a record is forgotten first (purge: its links and its state) and enable runs as on a
# first install.
enable_unit() {
  for l in /etc/systemd/system/*.wants/"$1"; do
    if [ -L "$l" ] && [ ! -e "$l" ]; then rm -f "$l"; fi
  done
  if deb-systemd-helper debian-installed "$1"; then
    deb-systemd-helper purge "$1" || return 1
  fi
  deb-systemd-helper enable "$1" || return 1
  [ "$(unit_state "$1")" = enabled ] || return 1
  if systemd_running; then deb-systemd-invoke start "$1"; fi
}
enabled_how() {
  if systemd_running; then echo "re-enabled and started"; else echo "re-enabled (systemd is not running here: it starts at the next boot)"; fi
}

# A unit file that moved (the Python package's path differed) leaves the enablement symlink
# dangling: the timer would look enabled on disk yet never load after the next reboot. Failing
# to re-link the timer fails the configure (the upgrade marker stays for the re-run); the proxy
# only warns.
repair_dangling_enablement() {
  for link in /etc/systemd/system/timers.target.wants/$TIMER /etc/systemd/system/multi-user.target.wants/$PROXY; do
    if [ -L "$link" ] && [ ! -e "$link" ]; then
      unit=${link##*/}
      rm -f "$link"
      if deb-systemd-helper enable "$unit" && [ -e "$link" ]; then
        record "re-linked $unit: its enablement pointed at a unit file the upgrade removed"
      elif [ "$unit" = "$TIMER" ]; then
        record "error: could not re-link $unit (deb-systemd-helper enable $unit); run: systemctl enable $unit, then: dpkg --configure -a"
        return 1
      else
        record "warning: could not re-link $unit; run: systemctl enable $unit"
      fi
    fi
  done
}

# unit_state UNIT: "masked" or "masked-runtime" (a link to /dev/null where systemd looks first,
# the operator's explicit "never"), "enabled" (every link its [Install] asks for is in /etc, as
# deb-systemd-helper judges it) or "disabled" — which covers a runtime-only enablement, gone at
# the next reboot. Read from the files, as deb-systemd-helper reads them, so it means the same
# where systemd does not run.
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

# needs_enabling STATE: whether a unit in this state must be enabled to run at boot; masked is
# the operator's explicit "never" and is handled by the caller.
needs_enabling() {
  case "$1" in
    enabled | masked | masked-runtime) return 1 ;;
    *) return 0 ;;
  esac
}

# Versions <= 0.1.8 ran `systemctl disable --now` in their prerm on an UPGRADE too, and dpkg runs
# the OLD prerm before this script: by now the timer of a configured box has been switched off by
# this very upgrade. And a box that went 0.1.8 -> 0.1.9 lost its timer on THAT upgrade and is
# still off now. So, on an upgrade from any version before the Go agent, turn a disabled timer
# back on; without this the box goes silent while looking healthy. A box switched off ON PURPOSE
# must carry $OPT_OUT before the upgrade (docs/OPERATIONS.md); the repair line says so, loudly.
# The timer comes first; a proxy that will not start is a warning, never the reason the timer
# stays off.
heal_broken_prerm() {
  old=$1
  [ -n "$old" ] || return 0
  # A reinstall after `dpkg -r` also arrives as `configure <old>`; that box was switched off on
  # purpose by a removal, not by a broken upgrade, so only a recorded upgrade qualifies.
  [ "$upgraded_from" = "$old" ] || return 0
  dpkg --compare-versions "$old" lt "$FIRST_GO_VERSION" || return 0
  if [ ! -e "$CONFIG" ]; then
    record "upgrade from $old on an unconfigured box: timer left off (install.sh enables it)"
    return 0
  fi
  if [ -e "$OPT_OUT" ]; then
    record "upgrade from $old: $TIMER left as it is ($OPT_OUT exists)"
    return 0
  fi
  if ! have_systemctl; then
    record "warning: upgrade from $old: no systemctl here; $TIMER not checked (enable it where systemd runs)"
    return 0
  fi
  if dpkg --compare-versions "$old" le "$LAST_BROKEN_PRERM"; then
    why="its prerm disabled the timer"
  else
    why="the timer was disabled, most likely by the 0.1.8 prerm of an earlier upgrade"
  fi
  state=$(unit_state "$TIMER")
  case "$state" in
    masked | masked-runtime)
      record "upgrade from $old: $TIMER is masked; left as it is (systemctl unmask $TIMER to run the agent)"
      return 0
      ;;
  esac
  if needs_enabling "$state"; then
    if ! enable_unit "$TIMER"; then
      record "error: upgrade from $old ($why): could not re-enable $TIMER (enabling or starting it failed, it was ${state:-disabled}); the agent stays off; fix it, then run: dpkg --configure -a"
      exit 1
    fi
    loud "upgrade from $old ($why): $(enabled_how) $TIMER (it was ${state:-disabled}). If this box is switched off ON PURPOSE, switch it off again: systemctl disable --now $TIMER && touch $OPT_OUT — upgrades, install.sh and the ansible role then leave it off"
  fi
  # Those prerms disabled the proxy unit as well; a proxy-transport box needs it for every tick.
  # (A grep, not a YAML parser: install.sh and the ansible role write this key at top level.)
  if grep -Eq '^transport:[[:space:]]*"?proxy"?[[:space:]]*(#.*)?$' "$CONFIG"; then
    if needs_enabling "$(unit_state "$PROXY")"; then
      if enable_unit "$PROXY"; then
        record "upgrade from $old: $(enabled_how) $PROXY"
      else
        record "warning: upgrade from $old: $PROXY did not start; the timer runs regardless, see: journalctl -u $PROXY"
      fi
    fi
  fi
}

# abort-remove: prerm `remove` disabled the units after recording which were enabled; the
# removal was rolled back and the package stays installed, so they go back on. deb-systemd-helper
# enable leaves alone a unit it recorded and that is off (it takes that for the operator's
# choice); reenable puts its links back.
restore_after_aborted_remove() {
  [ -f "$REMOVE_RECORD" ] || return 0
  while read -r unit; do
    case "$unit" in "$TIMER" | "$PROXY") ;; *) continue ;; esac
    if deb-systemd-helper reenable "$unit" && { ! systemd_running || deb-systemd-invoke start "$unit"; }; then
      record "removal rolled back: $(enabled_how) $unit"
    else
      record "error: removal rolled back but $unit could not be re-enabled; run: systemctl enable --now $unit"
    fi
  done <"$REMOVE_RECORD"
  rm -f "$REMOVE_RECORD"
}

# Up to 0.2.0 this package shipped fleetctl and its exporter unit; they are monky-fleetctl's now,
# which an upgrade of this package alone does not install. A host that ran the exporter hears it
# here (the unit and binary are gone once this upgrade is done; a running exporter runs on until
# it stops).
warn_exporter_moved() {
  if [ -L /etc/systemd/system/multi-user.target.wants/fleetctl-exporter.service ] && [ ! -e /usr/bin/fleetctl ]; then
    loud "fleetctl and fleetctl-exporter.service moved to the package monky-fleetctl, and the exporter is enabled on this host: install it (apt-get install monky-fleetctl, or dpkg -i monky-fleetctl_<version>_amd64.deb) to keep the exporter"
  fi
}

# record_units: debhelper's snippet for units a package ships disabled (dh_installsystemd
# --no-enable): units the operator switched on keep every link, and deb-systemd-helper's record
# of them is brought up to date. Never a failure: it is bookkeeping.
record_units() {
  for unit in "$TIMER" "$PROXY"; do
    if deb-systemd-helper debian-installed "$unit"; then
      if deb-systemd-helper --quiet was-enabled "$unit"; then
        deb-systemd-helper enable "$unit" >/dev/null || true
      fi
    fi
    deb-systemd-helper update-state "$unit" >/dev/null || true
  done
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
      systemctl --system daemon-reload || say "warning: systemctl daemon-reload failed"
    fi
    if [ -n "$old" ]; then
      if have_systemctl; then repair_dangling_enablement; fi
      # Before the repair: re-enabling the timer starts a tick at once (its OnBootSec is long
      # past), and that first tick of the new agent must find the old version to report it.
      record_upgraded_from "$old"
      heal_broken_prerm "$old"
    fi
    if [ -n "$old" ]; then warn_exporter_moved; fi
    # After the repair (its enable must still find the units unrecorded): deb-systemd-helper
    # records the units' links, so that a purge removes them whoever made them, and creates the
    # links a changed [Install] adds to units that are on. It enables nothing that is off.
    record_units
    # The marker goes only once the repair is done: a configure that failed before this point
    # is re-run by `dpkg --configure -a`, which must still know that this was an upgrade.
    rm -f "$UPGRADE_MARKER" "$LEGACY_MARKER" "$REMOVE_RECORD"
    if [ -n "$old" ]; then
      if systemd_running; then
        # The proxy is long-lived: restart it onto the new binary. No-op when it is not running.
        deb-systemd-invoke try-restart "$PROXY" || say "warning: $PROXY did not restart; see: journalctl -u $PROXY"
      fi
    fi
    ;;
  abort-remove)
    restore_after_aborted_remove
    ;;
  triggered)
    # dockerd was installed (or upgraded) after this package: its postinst has created group
    # docker by now, and the agent's account joins it (ensure_user says nothing when it is in
    # already). Nothing else runs on a trigger.
    if getent group docker >/dev/null && ! getent group docker | cut -d: -f4 | tr ',' '\n' | grep -qx "$AGENT"; then
      ensure_user
      record "docker was installed: $AGENT joined group docker; its next tick can use docker"
    fi
    ;;
  abort-upgrade | abort-deconfigure)
    # Our prerm does nothing for `upgrade`, `failed-upgrade` and `deconfigure`: nothing to undo.
    ;;
  [0-9]*)
    # rpm: no old version is passed, so no repair (there never was a Python-era rpm).
    ensure_user
    ensure_dirs
    if systemd_running; then systemctl --system daemon-reload || say "warning: systemctl daemon-reload failed"; fi
    ;;
  *)
    echo "postinst called with unknown argument '$1'" >&2
    exit 1
    ;;
esac
exit 0
