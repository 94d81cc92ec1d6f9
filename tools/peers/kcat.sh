#!/usr/bin/env bash
# Makes sure kcat (librdkafka's command-line client, Debian's package `kcat`) is installed
# and prints its path as the last line of stdout. The client matrix (tests/matrix/test_kcat.py,
# tests/integration/kcat_member.py) runs it as a peer.
#
# Nothing is downloaded when kcat is already on PATH. Otherwise it installs Debian's package
# non-interactively: straight from the package lists the machine has, and if that fails
# (lists missing or stale on a fresh machine) after one `apt-get update`. Needs root (or
# sudo without a password). A lock keeps concurrent runs (parallel tests) from racing.
set -euo pipefail

if path="$(command -v kcat)"; then
  echo "$path"
  exit 0
fi

fail() { echo "kcat.sh: $*" >&2; exit 2; }

command -v apt-get >/dev/null ||
  fail "kcat is not on PATH and this is no Debian/Ubuntu system (no apt-get): install kcat by hand"
sudo=()
if [ "$(id -u)" != 0 ]; then
  sudo -n true 2>/dev/null ||
    fail "kcat is not on PATH and installing it needs root: run 'apt-get install -y kcat' as root"
  sudo=(sudo -n)
fi

root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
mkdir -p "$root"
exec 9>"$root/.lock-kcat"
flock 9

if ! command -v kcat >/dev/null; then  # another run may have installed it meanwhile
  export DEBIAN_FRONTEND=noninteractive
  apt=("${sudo[@]}" apt-get -q -y -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install --no-install-recommends kcat >&2; then
    "${apt[@]}" update >&2 || fail "'apt-get update' failed (see above)"
    "${apt[@]}" install --no-install-recommends kcat >&2 ||
      fail "'apt-get install kcat' failed (see above): no package kcat for this system?"
  fi
fi
command -v kcat || fail "kcat was installed but is not on PATH"
