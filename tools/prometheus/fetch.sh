#!/usr/bin/env bash
# Fetches Prometheus and promtool (Debian's package `prometheus`) into a cache outside the
# repository, ${KGROUPS_CACHE:-~/.cache/kgroups}/prometheus-<version>/, and prints the
# directory holding both binaries. The observability tests run them: a real Prometheus
# scrapes kgroups and checks the dashboards' PromQL, promtool unit-tests the alerting rules.
#
# The package is downloaded (`apt-get download`, from the mirror apt is configured with) and
# unpacked (`dpkg-deb -x`): nothing is installed on the system and no service starts. The
# version is the candidate apt knows; when its package lists are missing, one
# `apt-get update` fetches them (needs root or sudo without a password). Offline, the newest
# complete cached version is used. Idempotent and fast once done; a lock keeps concurrent
# runs (parallel tests) from racing, and a rename makes a version appear whole or not at all.
set -euo pipefail

fail() { echo "prometheus/fetch.sh: $*" >&2; exit 2; }

for tool in apt-get apt-cache dpkg-deb flock; do
  command -v "$tool" >/dev/null ||
    fail "'$tool' is required (a Debian/Ubuntu system): install Prometheus 2.x by hand"
done

root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
mkdir -p "$root"
exec 9>"$root/.lock-prometheus"
flock 9

candidate() { apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }

sudo=()
[ "$(id -u)" = 0 ] || sudo=(sudo -n)
version="$(candidate)"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  "${sudo[@]}" apt-get -q update >&2 || echo "prometheus/fetch.sh: 'apt-get update' failed" >&2
  version="$(candidate)"
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  newest="$(ls -d "$root"/prometheus-*/.complete 2>/dev/null | sort -V | tail -n 1 || true)"
  [ -n "$newest" ] || fail "apt knows no package 'prometheus' and nothing is cached"
  dirname "$newest" | sed 's|$|/usr/bin|'
  exit 0
fi

cache="$root/prometheus-$version"
if [ ! -f "$cache/.complete" ]; then
  tmp="$(mktemp -d "$root/.prometheus-$version.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  mkdir "$tmp/deb" "$tmp/tree"
  # apt drops root to _apt for downloads; that user cannot write to a private directory.
  sandbox=()
  [ "$(id -u)" != 0 ] || sandbox=(-o APT::Sandbox::User=root)
  (cd "$tmp/deb" && apt-get -q "${sandbox[@]}" download "prometheus=$version" >&2) ||
    fail "'apt-get download prometheus=$version' failed (see above)"
  dpkg-deb -x "$tmp"/deb/prometheus_*.deb "$tmp/tree"
  "$tmp/tree/usr/bin/prometheus" --version >&2 ||
    fail "the unpacked prometheus does not run"
  touch "$tmp/tree/.complete"
  rm -rf "$cache"
  mv "$tmp/tree" "$cache"
fi
echo "$cache/usr/bin"
