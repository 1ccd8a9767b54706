# shellcheck shell=bash
# Shared by the scripts that build a tool from the Go module proxy into the tool cache and print
# its path (build-bao.sh, build-ziti.sh). A caller defines gotool_build OUT (runs in an empty
# wrapper module's directory, `go mod init` done; writes the binary to OUT, output to stderr) and
# then runs:
#
#   gotool_main NAME VERSION "WHAT (the build message)" "$@"
#
# Its command line, for the caller's users:
#   SCRIPT [--print-path]             build if not cached, print the binary's path
#   SCRIPT --print-path --no-build    print the path the binary has when built; exit 0 when it
#                                     is there, 1 when it is not (nothing is built)
# The binary is $CACHE/NAME-VERSION, CACHE being MONKY_TOOL_CACHE or monky-tools beside the Go
# build cache; two callers at once build once (the second waits for the first's lock).

gotool_usage() {
  echo "usage: $0 [--print-path [--no-build]]" >&2
  exit 2
}

gotool_main() {
  local name=$1 version=$2 what=$3
  shift 3
  local build=1 arg
  for arg in "$@"; do
    case "$arg" in
      --print-path) ;;  # what the script always does; accepted so callers can say so
      --no-build) build=0 ;;
      *) gotool_usage ;;
    esac
  done
  GO=${GO:-go}
  local cache bin
  cache="${MONKY_TOOL_CACHE:-$("$GO" env GOCACHE)/../monky-tools}"
  bin="$cache/$name-$version"
  if [ ! -x "$bin" ]; then
    if [ "$build" = 0 ]; then
      echo "$bin"
      exit 1
    fi
    mkdir -p "$cache"
    exec 9>"$cache/.$name.lock"
    flock 9
  fi
  if [ ! -x "$bin" ]; then
    gotool_work=$(mktemp -d)
    trap 'rm -rf "$gotool_work"' EXIT
    echo "$name: building $what from the Go module proxy (several minutes the first time)" >&2
    (
      cd "$gotool_work" || exit 1
      "$GO" mod init "monky-tools/$name" >/dev/null 2>&1
      gotool_build "$bin.tmp"
      mv "$bin.tmp" "$bin"
    )
  fi
  echo "$bin"
}
