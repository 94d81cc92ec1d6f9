#!/usr/bin/env bash
# Makes sure Debian's PostgreSQL server programs are installed and prints the directory of
# initdb, pg_ctl and postgres as the last line of stdout. The tests run their own
# PostgreSQL servers from it (tests/postgres.py: initdb and pg_ctl in a temporary
# directory, on loopback), and the PostgreSQL store's benchmark does too.
#
# Nothing is downloaded when they are already there. Otherwise it installs the package
# `postgresql` non-interactively: from the package lists the machine has, and if that
# fails (lists missing or stale on a fresh machine) after one `apt-get update`. The
# package's own cluster is not created (we never use it). Needs root (or sudo without a
# password). A lock keeps concurrent runs (parallel tests) from racing.
set -euo pipefail

fail() { echo "postgresql/install.sh: $*" >&2; exit 2; }

bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

if dir="$(bindir)"; then
  echo "$dir"
  exit 0
fi

command -v apt-get >/dev/null ||
  fail "PostgreSQL's server programs are not installed and this is no Debian/Ubuntu system: install PostgreSQL by hand"
sudo=()
if [ "$(id -u)" != 0 ]; then
  sudo -n true 2>/dev/null ||
    fail "installing PostgreSQL needs root: run 'apt-get install -y postgresql' as root"
  sudo=(sudo -n)
fi

root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
mkdir -p "$root"
exec 9>"$root/.lock-postgresql"
flock 9

if ! bindir >/dev/null; then  # another run may have installed it meanwhile
  export DEBIAN_FRONTEND=noninteractive
  # No "main" cluster: tests and benchmarks start their own servers.
  "${sudo[@]}" mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" |
    "${sudo[@]}" tee /etc/postgresql-common/createcluster.d/kgroups.conf >/dev/null
  apt=("${sudo[@]}" apt-get -q -y -o DPkg::Lock::Timeout=300)
  if ! "${apt[@]}" install --no-install-recommends postgresql >&2; then
    "${apt[@]}" update >&2 || fail "'apt-get update' failed (see above)"
    "${apt[@]}" install --no-install-recommends postgresql >&2 ||
      fail "'apt-get install postgresql' failed (see above)"
  fi
fi
bindir || fail "postgresql was installed but no /usr/lib/postgresql/*/bin/initdb is there"
