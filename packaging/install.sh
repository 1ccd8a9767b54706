#!/usr/bin/env bash
# install.sh — install and configure the Monky backend pull agent (monky-deployd) on one box.
#
# Run by the install kit (fleetctl onboard writes the exact command into install.sh.cmd):
#
#   read -rs MONKY_DEPLOYD_TOKEN && export MONKY_DEPLOYD_TOKEN   # the read-only deploy token
#   printf 'DEPLOY-TOKEN: %s\n' "$MONKY_DEPLOYD_TOKEN" | curl -sSfL --max-redirs 0 -H @- \
#     https://scm.tikali.ai/api/v4/projects/tikali%2Fapplications%2Fmonky%2Fmonky-deployd/packages/generic/monky-deployd/<version>/install.sh \
#     | sudo --preserve-env=MONKY_DEPLOYD_TOKEN bash -s -- --env env-qa-02 --site cbs \
#         --bootstrap-file bootstrap.jwt --enrol-jwt monky-host.env-qa-02.jwt
#
# Flags (the Python installer's, unchanged):
#   --env ENV_ID              required, e.g. env-qa-02
#   --site SITE               required, e.g. cbs
#   --token TOKEN             deploy token for the download; prefer MONKY_DEPLOYD_TOKEN or
#                             --token-file, which keep it out of the process list
#   --token-file FILE         read the deploy token from FILE
#   --bootstrap-file FILE     the kit's bootstrap deploy grant, staged 0600 for the first login
#   --enrol-jwt FILE          the ziti enrolment JWT of monky-host.<env>; skipped when enrolled
#   --transport sdk|proxy|system                             [sdk]
#   --version VERSION         the agent version to install  [the version this script ships with]
#   --docker-data-root DIR    docker's data-root (written to /etc/docker/daemon.json if unset)
#   --laptop                  laptop_mode: an unreachable tenancy exits 0 quietly
#   --bao-ca FILE             CA certificate of OpenBao, installed as openbao-ca.pem
#   --source gitlab|gitea     download from the GitLab package registry (primary) or the Gitea
#                             mirror (no token needed)                          [gitlab]
#   --enable-timer            enable the timer even on a box switched off on purpose (one that
#                             carries /etc/monky-deployd/timer.disabled-by-operator), and remove
#                             that file; without it such a box keeps its timer (and proxy) as is
# Agent config the kit carries (fleetctl onboard passes tenancy's values):
#   --tenancy-service NAME    ziti service of tenancy's agent API        [monky.tenancy.deploy]
#   --tenancy-port PORT       its intercept port                         [443]
#   --bao-addr URL            OpenBao's address    [https://bao.cbs.tikali.net:8200]
#   --bao-auth-mount MOUNT    JWT auth mount of the deploy grant         [jwt-tenancy]
#   --bao-role ROLE           role at that mount                         [see-env]
# Environment: MONKY_DEPLOYD_TOKEN (the deploy token), MONKY_DEPLOYD_BASE_URL (replaces the
# download base URL of the chosen source; the .deb is fetched from BASE/<version>/<file> for
# gitlab and BASE/v<version>/<file> for gitea), MONKY_DEPLOYD_OPENZITI_KEY_URL (where OpenZiti's
# apt key is fetched; whatever it serves must carry the pinned fingerprint).
#
# The config: /etc/monky-deployd/config.yaml. This script owns only the keys it writes (env_id,
# site, transport, identity, laptop_mode, tenancy.service/port, bao.addr/auth_mount/role); every
# other key and comment an operator put there survives a re-run (monky-deployd config merge).
# A re-run of the same kit changes nothing: no file is rewritten and no unit restarted.
#
# This installs the agent's package, monky-deployd. fleetctl and its exporter are in
# monky-fleetctl, for the operator's host, not for a box.
#
# The token is never printed, traced or passed on a command line by this script.
set +x
set -euo pipefail
umask 077

# Stamped with the release version by `make deb` (dist/install.sh); unstamped, --version is needed.
DEFAULT_VERSION="@VERSION@"

GITLAB_BASE="https://scm.tikali.ai/api/v4/projects/tikali%2Fapplications%2Fmonky%2Fmonky-deployd/packages/generic/monky-deployd"
GITEA_BASE="https://gitea.cbs.tikali.net/tikali/monky-deployd/releases/download"

AGENT=monky-deployd
ETC=/etc/monky-deployd
STATE=/var/lib/monky-deployd
CONFIG=$ETC/config.yaml
OPT_OUT=$ETC/timer.disabled-by-operator
IDENTITY_DIR=/opt/openziti/etc/identities
# Root's own record of which bootstrap grant was staged (the ansible role keeps the same one).
PKG_STATE=/var/lib/monky-deployd-package
GRANT_RECORD=$PKG_STATE/bootstrap-grant.sha256

# OpenZiti's package signing key: "OpenZiti Developers <developers@openziti.org>", the key
# get.openziti.io/tun/package-repos.gpg serves (OpenZiti's install docs fetch it from there; the
# openziti/ziti-tunnel-sdk-c repository keeps it as package-repos.gpg, e.g. at commit 226064c).
# Its primary key's fingerprint, as `gpg --show-keys` prints it, is pinned here: a key with
# another fingerprint is never trusted, whatever the download served (a renewed expiry keeps
# the fingerprint; a new key is a deliberate change of this line and of the ansible role's).
OPENZITI_KEY_FPR=34CBCF18427D8814B5BDBB0DDE3623EF08C996E5
OPENZITI_KEY_URL=${MONKY_DEPLOYD_OPENZITI_KEY_URL:-https://get.openziti.io/tun/package-repos.gpg}

ACTIONS=()
say() { printf 'install.sh: %s\n' "$*"; }
did() {
  ACTIONS+=("$*")
  say "$*"
}
warn() { printf 'install.sh: warning: %s\n' "$*" >&2; }
die() {
  printf 'install.sh: error: %s\n' "$*" >&2
  exit 1
}
usage() {
  sed -n '2,/^# The token is never/p' "$0" 2>/dev/null | sed 's/^# \{0,1\}//' >&2 || true
  exit 2
}

ENV_ID="" SITE="" TOKEN="" TOKEN_FILE="" BOOTSTRAP_FILE="" ENROL_JWT="" TRANSPORT=sdk
VERSION="" DOCKER_DATA_ROOT="" LAPTOP=false BAO_CA="" SOURCE=gitlab ENABLE_TIMER=false
TENANCY_SERVICE=monky.tenancy.deploy TENANCY_PORT=443
BAO_ADDR=https://bao.cbs.tikali.net:8200 BAO_AUTH_MOUNT=jwt-tenancy BAO_ROLE=see-env

value() { # flag, remaining-arg-count
  [ "$2" -ge 2 ] || die "$1 needs a value"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --env) value "$1" $#; ENV_ID=$2; shift 2 ;;
    --site) value "$1" $#; SITE=$2; shift 2 ;;
    --token) value "$1" $#; TOKEN=$2; shift 2 ;;
    --token-file) value "$1" $#; TOKEN_FILE=$2; shift 2 ;;
    --bootstrap-file) value "$1" $#; BOOTSTRAP_FILE=$2; shift 2 ;;
    --enrol-jwt | --enroll-jwt) value "$1" $#; ENROL_JWT=$2; shift 2 ;;
    --transport) value "$1" $#; TRANSPORT=$2; shift 2 ;;
    --version) value "$1" $#; VERSION=$2; shift 2 ;;
    --docker-data-root) value "$1" $#; DOCKER_DATA_ROOT=$2; shift 2 ;;
    --laptop) LAPTOP=true; shift ;;
    --enable-timer) ENABLE_TIMER=true; shift ;;
    --bao-ca) value "$1" $#; BAO_CA=$2; shift 2 ;;
    --source) value "$1" $#; SOURCE=$2; shift 2 ;;
    --tenancy-service) value "$1" $#; TENANCY_SERVICE=$2; shift 2 ;;
    --tenancy-port) value "$1" $#; TENANCY_PORT=$2; shift 2 ;;
    --bao-addr) value "$1" $#; BAO_ADDR=$2; shift 2 ;;
    --bao-auth-mount) value "$1" $#; BAO_AUTH_MOUNT=$2; shift 2 ;;
    --bao-role) value "$1" $#; BAO_ROLE=$2; shift 2 ;;
    -h | --help) usage ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

# --- 0. arguments ---------------------------------------------------------------------------------
# env and site end up in file names and YAML: keep them to the characters tenancy issues.
[[ $ENV_ID =~ ^[a-z0-9][a-z0-9-]{0,62}$ ]] || die "--env: '$ENV_ID' is not an env id like env-qa-02"
[[ $SITE =~ ^[a-z0-9][a-z0-9-]{0,62}$ ]] || die "--site: '$SITE' is not a site name like cbs"
case "$TRANSPORT" in sdk | proxy | system) ;; *) die "--transport: '$TRANSPORT' is not sdk, proxy or system" ;; esac
case "$SOURCE" in gitlab | gitea) ;; *) die "--source: '$SOURCE' is not gitlab or gitea" ;; esac
# These go into config.yaml unquoted: only characters that cannot change its YAML.
[[ $TENANCY_SERVICE =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$ ]] ||
  die "--tenancy-service: '$TENANCY_SERVICE' is not a ziti service name like monky.tenancy.deploy"
if ! [[ $TENANCY_PORT =~ ^[1-9][0-9]{0,4}$ ]] || [ "$TENANCY_PORT" -gt 65535 ]; then
  die "--tenancy-port: '$TENANCY_PORT' is not a port (1-65535)"
fi
[[ $BAO_ADDR =~ ^https?://[A-Za-z0-9.-]+(:[1-9][0-9]{0,4})?/?$ ]] ||
  die "--bao-addr: '$BAO_ADDR' is not an address like https://bao.cbs.tikali.net:8200"
if ! [[ $BAO_AUTH_MOUNT =~ ^[A-Za-z0-9]([A-Za-z0-9._/-]{0,126}[A-Za-z0-9._-])?$ ]]; then
  die "--bao-auth-mount: '$BAO_AUTH_MOUNT' is not an auth mount like jwt-tenancy"
fi
[[ $BAO_ROLE =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ ]] || die "--bao-role: '$BAO_ROLE' is not a role name like see-env"
if [ -z "$VERSION" ]; then
  [ "$DEFAULT_VERSION" != "@VERSION@" ] || die "--version: this install.sh is unstamped; pass --version"
  VERSION=$DEFAULT_VERSION
fi
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+([~.+-][0-9A-Za-z.~+-]+)?$ ]] || die "--version: '$VERSION' is not a version"
if [ -n "$TOKEN_FILE" ]; then
  [ -r "$TOKEN_FILE" ] || die "--token-file: cannot read $TOKEN_FILE"
  TOKEN=$(tr -d '[:space:]' <"$TOKEN_FILE")
fi
if [ -z "$TOKEN" ] && [ -n "${MONKY_DEPLOYD_TOKEN:-}" ]; then TOKEN=$MONKY_DEPLOYD_TOKEN; fi
# Nothing this script starts (dpkg, apt, maintainer scripts) needs the token.
unset MONKY_DEPLOYD_TOKEN
[[ $TOKEN =~ ^[A-Za-z0-9._~+/=-]*$ ]] || die "the deploy token has characters a token never has (not shown)"
readable() { # flag, path
  if [ -n "$2" ] && [ ! -r "$2" ]; then die "$1: cannot read $2"; fi
}
readable --bootstrap-file "$BOOTSTRAP_FILE"
readable --enrol-jwt "$ENROL_JWT"
readable --bao-ca "$BAO_CA"
if [ -n "$BOOTSTRAP_FILE" ]; then
  # A JWT is three base64url segments; checked without ever printing it.
  grant=$(tr -d '[:space:]' <"$BOOTSTRAP_FILE")
  [[ $grant =~ ^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$ ]] ||
    die "--bootstrap-file: $BOOTSTRAP_FILE does not hold a JWT"
  unset grant
fi
if [ -n "$DOCKER_DATA_ROOT" ] && [[ $DOCKER_DATA_ROOT != /* ]]; then
  die "--docker-data-root: '$DOCKER_DATA_ROOT' is not an absolute path"
fi

# --- 1. preconditions -----------------------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "run as root (sudo)"
command -v dpkg >/dev/null || die "dpkg not found: this installer is for Debian and Ubuntu"
command -v docker >/dev/null || die "docker is not installed: install the docker engine first"
SYSTEMD=false
if [ -d /run/systemd/system ]; then SYSTEMD=true; fi

WORK=$(mktemp -d)
STAGE="" # a root-only directory next to $ETC, made in step 5
trap 'rm -rf "$WORK" ${STAGE:+"$STAGE"}' EXIT

# --- 2. the package -------------------------------------------------------------------------------
DEB="${AGENT}_${VERSION}_amd64.deb"
case "$SOURCE" in
  gitlab) URL="${MONKY_DEPLOYD_BASE_URL:-$GITLAB_BASE}/$VERSION/$DEB" ;;
  gitea) URL="${MONKY_DEPLOYD_BASE_URL:-$GITEA_BASE}/v$VERSION/$DEB" ;;
esac

APT_UPDATED=false
apt_install() { # one package, or alternatives: the first that installs wins
  local p
  if ! $APT_UPDATED; then
    apt-get update -qq || warn "apt-get update failed; trying the package lists as they are"
    APT_UPDATED=true
  fi
  for p in "$@"; do
    if apt-get install -y -qq "$p"; then return 0; fi
  done
  return 1
}

installed_version() {
  dpkg-query -W -f='${db:Status-Abbrev}${Version}' "$AGENT" 2>/dev/null | sed -n 's/^ii *//p'
}

# url_origin URL: scheme://host[:port] in lower case, or nothing for a URL that is not http(s).
url_origin() {
  local o
  [[ $1 =~ ^([A-Za-z][A-Za-z0-9+.-]*://[^/?#]*) ]] || return 0
  o=${BASH_REMATCH[1],,}
  case "$o" in https://* | http://*) printf '%s' "$o" ;; esac
}

# download URL OUT [TOKEN]: the deploy token only ever goes to the origin (scheme, host, port) of
# URL. GitLab answers a package download with a redirect to its object storage, and curl -L would
# send every -H header to wherever a redirect points (see `man curl`, --header: "headers set with
# this option will be set in all HTTP requests - even after redirects"). So curl follows nothing
# itself: each redirect is read here and followed with the header only while it stays on that
# origin. An https URL is never followed onto http.
download() {
  local url=$1 out=$2 token=${3:-} origin proto hdr res code next hop
  origin=$(url_origin "$url")
  [ -n "$origin" ] || die "download: '$url' is not an http(s) URL"
  proto='=https'
  if [[ $origin == http://* ]]; then proto='=https,http'; fi
  command -v curl >/dev/null || die "curl not found (apt-get install curl)"
  hdr="$WORK/headers"
  for hop in 0 1 2 3 4 5 6 7 8 9 10; do
    : >"$hdr"
    # The header goes through a 0600 file (umask 077), never through curl's argv.
    if [ -n "$token" ] && [ "$(url_origin "$url")" = "$origin" ]; then
      printf 'DEPLOY-TOKEN: %s\n' "$token" >"$hdr"
    fi
    res=$(curl -sS --proto "$proto" --retry 3 --connect-timeout 20 -H @"$hdr" \
      -o "$out" -w '%{http_code} %{redirect_url}' "$url") || die "download of $1 failed (curl exit $?)"
    code=${res%% *} next=${res#* }
    case "$code" in
      301 | 302 | 303 | 307 | 308)
        [ -n "$next" ] || die "download of $1: HTTP $code without a Location"
        [ "$hop" -lt 10 ] || die "download of $1: more than 10 redirects"
        url=$next
        continue
        ;;
    esac
    break
  done
  rm -f "$hdr"
  case "$code" in
    200) ;;
    401 | 403)
      if [ "$(url_origin "$url")" = "$origin" ]; then
        die "download of $1 refused (HTTP $code): the deploy token is missing, revoked or lacks read_package_registry"
      fi
      die "download of $1 refused (HTTP $code) by $(url_origin "$url"), where the registry redirected it"
      ;;
    404) die "download of $1: not found (HTTP 404): is $VERSION published on $SOURCE?" ;;
    *) die "download of $1 failed (HTTP $code)" ;;
  esac
}

PKG_CHANGED=false
if [ "$(installed_version)" = "$VERSION" ]; then
  say "$AGENT $VERSION is already installed; not downloading it again"
else
  PKG_CHANGED=true
  if [ "$SOURCE" = gitlab ] && [ -z "$TOKEN" ]; then
    die "the GitLab package registry is private: pass the deploy token (MONKY_DEPLOYD_TOKEN or --token-file)"
  fi
  say "downloading $URL"
  download "$URL" "$WORK/$DEB" "$TOKEN"
  dpkg-deb --field "$WORK/$DEB" Package >/dev/null 2>&1 || die "$URL is not a Debian package"
  dpkg -i "$WORK/$DEB" || die "dpkg -i $DEB failed"
  did "installed $AGENT $VERSION ($SOURCE)"
fi
getent passwd "$AGENT" >/dev/null || die "the package did not create the $AGENT user"

# --- 3. docker ------------------------------------------------------------------------------------
# in_group GROUP: whether the agent's account is a member (usermod -a rewrites /etc/group even
# when it is, so it runs only when needed).
in_group() {
  id -nG "$AGENT" 2>/dev/null | tr ' ' '\n' | grep -qx "$1"
}
if getent group docker >/dev/null; then
  if in_group docker; then
    say "$AGENT is in group docker"
  else
    usermod -a -G docker "$AGENT"
    did "$AGENT is in group docker"
  fi
else
  die "group docker does not exist: the agent runs the docker CLI as $AGENT through that group"
fi
if ! docker compose version >/dev/null 2>&1; then
  say "docker compose v2 plugin missing: installing it"
  apt_install docker-compose-plugin docker-compose || die "could not install docker compose v2: add Docker's apt repository (download.docker.com/linux/debian) for docker-compose-plugin, or use a Debian release whose own docker-compose is v2 (13 trixie and later; bookworm's is v1)"
  docker compose version >/dev/null 2>&1 || die "docker compose v2 still not available after installing it: add Docker's apt repository (download.docker.com/linux/debian) for docker-compose-plugin, or use a Debian release whose own docker-compose is v2 (13 trixie and later; bookworm's is v1)"
  did "installed the docker compose plugin"
fi
if [ -n "$DOCKER_DATA_ROOT" ]; then
  daemon_json=/etc/docker/daemon.json
  if [ -f "$daemon_json" ] && grep -q '"data-root"' "$daemon_json"; then
    grep -Fq "\"$DOCKER_DATA_ROOT\"" "$daemon_json" ||
      die "--docker-data-root: $daemon_json already sets another data-root; change it by hand (moving it strands every image)"
    say "docker data-root is already $DOCKER_DATA_ROOT"
  elif [ -f "$daemon_json" ] && [ -s "$daemon_json" ]; then
    die "--docker-data-root: $daemon_json exists; add \"data-root\": \"$DOCKER_DATA_ROOT\" to it by hand"
  else
    install -d -m 0711 "$DOCKER_DATA_ROOT"
    install -d -m 0755 /etc/docker
    printf '{\n  "data-root": "%s"\n}\n' "$DOCKER_DATA_ROOT" >"$WORK/daemon.json"
    install -m 0644 "$WORK/daemon.json" "$daemon_json"
    did "set docker's data-root to $DOCKER_DATA_ROOT in $daemon_json (takes effect when docker restarts)"
  fi
fi

# --- 4. the ziti identity -------------------------------------------------------------------------
# primary_fingerprints FILE: the fingerprint of every primary key in an OpenPGP key file, one a
# line (gpg in a throw-away home: nothing is imported anywhere).
primary_fingerprints() {
  local home
  home=$(mktemp -d "$WORK/gnupg.XXXXXX")
  # gpg fails on a file that holds no key (a captive portal's page): that is "no fingerprint",
  # which the caller names, not an exit of the whole script under set -e and pipefail.
  { gpg --batch --quiet --homedir "$home" --show-keys --with-colons "$1" 2>/dev/null || true; } |
    awk -F: '$1 == "pub" { want = 1; next } $1 == "fpr" && want { print $10; want = 0 }'
}
if ! command -v ziti-edge-tunnel >/dev/null; then
  say "ziti-edge-tunnel missing: installing it from the OpenZiti apt repository"
  if ! command -v gpg >/dev/null; then
    apt_install gpg || die "could not install gpg, which checks the OpenZiti key's fingerprint"
  fi
  download "$OPENZITI_KEY_URL" "$WORK/openziti.asc"
  # apt trusts every key in a signed-by file: the file must hold the pinned key and no other.
  got=$(primary_fingerprints "$WORK/openziti.asc" | tr '\n' ' ' | sed 's/ $//')
  if [ "$got" != "$OPENZITI_KEY_FPR" ]; then
    die "the OpenZiti apt key from $OPENZITI_KEY_URL has the fingerprint ${got:-(none: not an OpenPGP key)}, not the pinned $OPENZITI_KEY_FPR: it is not trusted and nothing was added to apt. Check the download (a proxy, a mirror); if OpenZiti really changed its key, update OPENZITI_KEY_FPR in install.sh"
  fi
  say "the OpenZiti apt key has the pinned fingerprint $OPENZITI_KEY_FPR"
  # A box without debian-archive-keyring (a minimal chroot) has no /usr/share/keyrings yet.
  install -d -m 0755 /usr/share/keyrings /etc/apt/sources.list.d
  install -m 0644 "$WORK/openziti.asc" /usr/share/keyrings/openziti.asc
  # The packages are built for Ubuntu jammy; that suite is the one that installs on Debian too.
  printf 'deb [signed-by=/usr/share/keyrings/openziti.asc] https://packages.openziti.org/zitipax-openziti-deb-stable jammy main\n' \
    >"$WORK/openziti.list"
  install -m 0644 "$WORK/openziti.list" /etc/apt/sources.list.d/openziti.list
  APT_UPDATED=false # the new repository's lists
  apt_install ziti-edge-tunnel || die "could not install ziti-edge-tunnel"
  did "installed ziti-edge-tunnel"
fi
IDENTITY="$IDENTITY_DIR/monky-host.$ENV_ID.json"
# The identity directory is writable by group ziti, and the agent's own account is a member: any
# member can plant a symlink at the identity's name (or, where a parent is theirs, at the
# directory's), and root's chown, chmod and setfacl below would act on what it points at
# (/etc/shadow made readable by group ziti). A symlink there is refused, not followed; the
# tunneller writes a regular file. A root-owned symlink on the directory path was put there by
# root and is accepted.
not_planted() {
  if [ -L "$1" ] && [ "$(stat -c %u "$1")" != 0 ]; then
    die "$1 is a symlink (owned by uid $(stat -c %u "$1")) where $2 belongs: a member of group ziti can plant one to make root change another file. Remove it (rm $1) and re-run"
  fi
}
for d in /opt/openziti /opt/openziti/etc "$IDENTITY_DIR"; do not_planted "$d" "a directory"; done
# The directory the group and ACL grants go on: root's own symlink there is resolved once, here.
ID_DIR_REAL=$IDENTITY_DIR
if [ -L "$IDENTITY_DIR" ]; then ID_DIR_REAL=$(readlink -f "$IDENTITY_DIR"); fi
if [ -L "$IDENTITY" ]; then
  die "$IDENTITY is a symlink: a member of group ziti can plant one to make root change another file. Remove it (rm $IDENTITY), re-enrol if needed (--enrol-jwt), and re-run"
fi
if [ -s "$IDENTITY" ]; then
  say "identity $IDENTITY already enrolled"
elif [ -n "$ENROL_JWT" ]; then
  install -d -m 0770 "$IDENTITY_DIR"
  ziti-edge-tunnel enroll --jwt "$ENROL_JWT" --identity "$IDENTITY" >"$WORK/enroll.log" 2>&1 ||
    {
      cat "$WORK/enroll.log" >&2
      die "enrolment of monky-host.$ENV_ID failed (a used or expired JWT needs a new kit: fleetctl onboard --reissue)"
    }
  did "enrolled ziti identity monky-host.$ENV_ID at $IDENTITY"
  if $SYSTEMD; then
    systemctl try-restart ziti-edge-tunnel.service || warn "ziti-edge-tunnel did not restart; it loads the identity at its next start"
  fi
else
  die "no ziti identity at $IDENTITY: pass --enrol-jwt with the kit's monky-host.$ENV_ID.jwt"
fi

# The tunneller REWRITES the identity file on every controller config update and the rewrite
# drops POSIX ACLs: the group is the grant that survives (env-dev-08 failed every tick six minutes
# after such a refresh). The explicit ACLs cover a file of another group until the next rewrite;
# the default ACL on the directory carries the grant onto a freshly written file.
# Every change is made only where it is needed (a re-run on a configured box changes nothing),
# without following a symlink where the tool can (chown -h, setfacl -P), and right after a
# fresh look where it cannot (chmod on Linux always follows): the window a member of group ziti
# could race is the one between that look and the chmod, on a first run only.
if [ -L "$IDENTITY" ] || [ ! -f "$IDENTITY" ]; then
  die "$IDENTITY is not a regular file; remove it and re-run with --enrol-jwt"
fi
chmod_unplanted() { # MODE PATH: PATH must not be a symlink by now
  if [ -L "$2" ]; then die "$2 became a symlink while install.sh ran: someone in group ziti is planting them; stop and investigate"; fi
  chmod "$1" "$2"
}
if getent group ziti >/dev/null; then
  owner=root
  if getent passwd ziti >/dev/null; then owner=ziti; fi
  # Transports sdk and proxy: the agent is the identity's user and renews its certificate
  # (identity_renew_below_s), replacing the file with one of the same owner, group and mode: it
  # must own the file and create files in its directory (PROTOCOL section 3).
  dir_mode=g+rx
  case "$TRANSPORT" in sdk | proxy) owner=$AGENT dir_mode=g+rwx ;; esac
  granted=false
  if [ "$(stat -c %U:%G "$IDENTITY")" != "$owner:ziti" ]; then chown -h "$owner:ziti" "$IDENTITY"; granted=true; fi
  if [ "$(stat -c %a "$IDENTITY")" != 640 ]; then chmod_unplanted 0640 "$IDENTITY"; granted=true; fi
  if [ "$(stat -c %G "$ID_DIR_REAL")" != ziti ]; then chgrp -h ziti "$ID_DIR_REAL"; granted=true; fi
  case "$dir_mode:$(stat -c %A "$ID_DIR_REAL")" in g+rx:????r?x* | g+rwx:????rwx*) ;; *) chmod_unplanted "$dir_mode" "$ID_DIR_REAL"; granted=true ;; esac
  if ! in_group ziti; then usermod -a -G ziti "$AGENT"; granted=true; fi
  if $granted; then
    did "$AGENT is in group ziti; $IDENTITY is $owner:ziti 0640"
  else
    say "$AGENT is in group ziti; $IDENTITY is $owner:ziti 0640"
  fi
else
  warn "no ziti group: the agent's read on the identity rests on ACLs, which a tunneller rewrite drops"
fi
if ! command -v setfacl >/dev/null; then
  apt_install acl || warn "could not install acl (setfacl)"
fi
# has_acl [-d] PATH PERMS: whether PATH's (default, with -d) ACL already grants the agent PERMS
# (r--, r-x, rwx, --x), so that a re-run sets nothing it has.
has_acl() {
  local d=""
  if [ "$1" = -d ]; then d=-d; shift; fi
  command -v getfacl >/dev/null || return 1
  getfacl -cpP $d "$1" 2>/dev/null | grep -qx "user:$AGENT:$2"
}
if command -v setfacl >/dev/null; then
  acl_ok=true acl_set=false
  # -P: a symlink argument is skipped, never followed.
  if ! has_acl "$IDENTITY" r--; then setfacl -P -m "u:$AGENT:r" "$IDENTITY" || acl_ok=false; acl_set=true; fi
  if ! has_acl "$ID_DIR_REAL" r-x; then setfacl -P -m "u:$AGENT:rx" "$ID_DIR_REAL" || acl_ok=false; acl_set=true; fi
  if ! has_acl -d "$ID_DIR_REAL" r--; then setfacl -P -d -m "u:$AGENT:r" "$ID_DIR_REAL" || acl_ok=false; acl_set=true; fi
  for d in /opt/openziti/etc /opt/openziti; do
    if [ -d "$d" ] && ! has_acl "$d" --x; then setfacl -P -m "u:$AGENT:x" "$d" || acl_ok=false; acl_set=true; fi
  done
  if ! $acl_ok; then
    warn "some ACLs could not be set (filesystem without ACL support?); the ziti group grant remains"
  elif $acl_set; then
    did "granted $AGENT read on $IDENTITY by ACL (explicit, and default on $IDENTITY_DIR)"
  else
    say "$AGENT has read on $IDENTITY by ACL"
  fi
fi
# node_exporter's textfile directory (Debian's prometheus-node-exporter, root's 0755): the agent
# writes monky_deployd.prom there after every tick, for the alert rules. Absent: no node_exporter.
TEXTFILE_DIR=/var/lib/prometheus/node-exporter
if [ -d "$TEXTFILE_DIR" ]; then
  if has_acl "$TEXTFILE_DIR" rwx; then
    say "$AGENT has write on $TEXTFILE_DIR by ACL"
  elif command -v setfacl >/dev/null && setfacl -m "u:$AGENT:rwx" "$TEXTFILE_DIR"; then
    did "granted $AGENT write on $TEXTFILE_DIR by ACL (its metrics textfile)"
  else
    warn "could not grant $AGENT write on $TEXTFILE_DIR: its metrics textfile will not be written (setfacl -m u:$AGENT:rwx $TEXTFILE_DIR)"
  fi
fi

# --- 5. config, OpenBao CA, bootstrap grant -------------------------------------------------------
install -d -m 0770 -o root -g "$AGENT" "$ETC"
install -d -m 0700 -o "$AGENT" -g "$AGENT" "$STATE"
# $ETC is writable by the agent's group (the agent deletes bootstrap.jwt), so the agent's account
# can plant a symlink, or swap one in for a temp file, at any name in it. Root therefore never
# opens a path in $ETC for writing: each file is made complete (content, owner, mode) in STAGE,
# a root-only directory in /etc (root-owned, so nothing else can touch it; the same filesystem as
# $ETC), and renamed into place with mv -T: rename(2) replaces whatever sits at the name, a
# symlink included, and follows nothing.
STAGE=$(mktemp -d /etc/.monky-deployd-install.XXXXXX)
# place FILE NAME: move the staged FILE to $ETC/NAME.
place() {
  mv -fT "$1" "$ETC/$2" || die "could not move $2 into $ETC"
}
# The kit's keys: only these are this script's; monky-deployd (the package just installed)
# merges them into the box's config.yaml and keeps every other key and comment.
cat >"$WORK/kit.yaml" <<EOF
# Written by install.sh for $ENV_ID. Re-running the install kit sets only its own keys (env_id,
# site, transport, identity, laptop_mode, tenancy.service and .port, bao.addr, .auth_mount and
# .role) and keeps every other key and comment: tune the agent here.
# Every key and its default: /usr/share/doc/monky-deployd/config.example.yaml

env_id: $ENV_ID
site: $SITE
transport: $TRANSPORT
identity: $IDENTITY
laptop_mode: $LAPTOP
tenancy:
  service: $TENANCY_SERVICE
  port: $TENANCY_PORT
bao:
  addr: $BAO_ADDR
  auth_mount: $BAO_AUTH_MOUNT
  role: $BAO_ROLE
EOF
if [ -L "$CONFIG" ]; then
  die "$CONFIG is a symlink: the agent's account can plant one there to make root read another file. Remove it (rm $CONFIG) and re-run"
fi
monky-deployd --config "$CONFIG" config merge --kit "$WORK/kit.yaml" >"$WORK/config.yaml" 2>"$WORK/merge.log" || {
  cat "$WORK/merge.log" >&2
  die "could not merge the kit's keys into $CONFIG (see above): fix the file or move it away, then re-run"
}
CONFIG_CHANGED=false
if [ -f "$CONFIG" ] && cmp -s "$WORK/config.yaml" "$CONFIG"; then
  say "$CONFIG unchanged"
else
  CONFIG_CHANGED=true
  if [ -f "$CONFIG" ]; then
    # -P: a symlink is copied as a symlink, never read through; -p keeps owner and mode.
    cp -P -p "$CONFIG" "$STAGE/config.yaml.prev"
    place "$STAGE/config.yaml.prev" config.yaml.prev
    did "kept the previous config as $CONFIG.prev"
  fi
  install -m 0640 -o root -g "$AGENT" "$WORK/config.yaml" "$STAGE/config.yaml"
  place "$STAGE/config.yaml" config.yaml
  did "wrote $CONFIG (env $ENV_ID, site $SITE, transport $TRANSPORT): $(sed -n 's/^config merge: //p' "$WORK/merge.log")"
fi
if [ -n "$BAO_CA" ]; then
  if [ -f "$ETC/openbao-ca.pem" ] && [ ! -L "$ETC/openbao-ca.pem" ] && cmp -s "$BAO_CA" "$ETC/openbao-ca.pem"; then
    say "the OpenBao CA is installed already"
  else
    install -m 0644 -o root -g root "$BAO_CA" "$STAGE/openbao-ca.pem"
    place "$STAGE/openbao-ca.pem" openbao-ca.pem
    did "installed the OpenBao CA as $ETC/openbao-ca.pem"
  fi
fi
if [ -n "$BOOTSTRAP_FILE" ]; then
  # The agent deletes the grant after its first login, and a kit keeps it: staging it on every
  # re-run would hand a spent grant back to the agent. A grant is staged once — root's record of
  # its hash says which one was — and a new one (a reissued kit) is staged again.
  grant_sum=$(tr -d '[:space:]' <"$BOOTSTRAP_FILE" | sha256sum | cut -d' ' -f1)
  if [ -f "$GRANT_RECORD" ] && [ "$(cat "$GRANT_RECORD")" = "$grant_sum" ]; then
    say "this kit's bootstrap grant was staged before (the agent deletes it after its first login): not staged again"
  else
    install -m 0600 -o "$AGENT" -g "$AGENT" "$BOOTSTRAP_FILE" "$STAGE/bootstrap.jwt"
    place "$STAGE/bootstrap.jwt" bootstrap.jwt
    install -d -m 0755 -o root -g root "$PKG_STATE"
    printf '%s\n' "$grant_sum" >"$WORK/grant.sha256"
    install -m 0600 -o root -g root "$WORK/grant.sha256" "$GRANT_RECORD"
    did "staged the bootstrap grant at $ETC/bootstrap.jwt (0600; the agent deletes it after its first login)"
  fi
fi

# --- 6. start -------------------------------------------------------------------------------------
# A box switched off on purpose carries $OPT_OUT: the package's upgrade repair leaves its timer
# alone, and so does this script unless --enable-timer says otherwise.
OPTED_OUT=false
if [ -e "$OPT_OUT" ] || [ -L "$OPT_OUT" ]; then
  if $ENABLE_TIMER; then
    rm -f "$OPT_OUT"
    did "removed $OPT_OUT (--enable-timer): this box is no longer marked as switched off on purpose"
  else
    did "NOT enabling monky-deployd.timer (nor the proxy unit): $OPT_OUT exists, this box was switched off on purpose; to run the agent, re-run with --enable-timer (or remove that file and run: systemctl enable --now monky-deployd.timer)"
    OPTED_OUT=true
  fi
fi
# on UNIT: enabled and active already (nothing to do).
on() { systemctl is-enabled --quiet "$1" 2>/dev/null && systemctl is-active --quiet "$1" 2>/dev/null; }
if $OPTED_OUT; then
  : # left as they are
elif $SYSTEMD; then
  if $PKG_CHANGED; then systemctl daemon-reload; fi
  if [ "$TRANSPORT" = proxy ]; then
    if ! on monky-deployd-proxy.service; then
      systemctl enable --now monky-deployd-proxy.service
      did "enabled and started monky-deployd-proxy.service"
    elif $CONFIG_CHANGED; then
      # The proxy reads the config once, at its start. (A package upgrade restarted it already.)
      systemctl try-restart monky-deployd-proxy.service
      did "restarted monky-deployd-proxy.service (its config changed)"
    else
      say "monky-deployd-proxy.service is enabled and running"
    fi
  elif systemctl is-enabled monky-deployd-proxy.service >/dev/null 2>&1; then
    systemctl disable --now monky-deployd-proxy.service
    did "disabled monky-deployd-proxy.service (transport $TRANSPORT does not use it)"
  fi
  if on monky-deployd.timer; then
    say "monky-deployd.timer is enabled and running"
  else
    systemctl enable --now monky-deployd.timer
    did "enabled and started monky-deployd.timer"
  fi
else
  warn "systemd is not running: enable monky-deployd.timer yourself once it is"
fi

if [ ${#ACTIONS[@]} -eq 0 ]; then
  say "done. Nothing changed: this box already was as the kit describes it (no file rewritten, no unit restarted)."
  say "next: monky-deployd doctor; journalctl -u monky-deployd.service -f"
  exit 0
fi
say "done. What this run did:"
for a in "${ACTIONS[@]}"; do printf '  - %s\n' "$a"; done
say "next: monky-deployd doctor; journalctl -u monky-deployd.service -f"
