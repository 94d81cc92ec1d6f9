#!/usr/bin/env bash
# Installs Apache Kafka's command-line tools (kafka-tools, from Maven Central) and their
# runtime dependencies into a cache outside the repository:
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/kafka-tools-<version>/libs
# Idempotent and fast once done: a stamp holding the pom's hash marks a complete install.
# A lock keeps concurrent runs (parallel tests) from racing. Prints the cache directory as
# its last line of stdout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$here/pom.xml")"
root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
cache="$root/kafka-tools-$version"
libs="$cache/libs"

for tool in java mvn; do
  command -v "$tool" >/dev/null || { echo "fetch.sh: '$tool' is required (Java 17 and Maven)" >&2; exit 2; }
done

mkdir -p "$root"
exec 9>"$root/.lock-kafka-tools-$version"
flock 9

pom_digest="$(sha256sum "$here/pom.xml" | cut -c1-16)"
if [ "$(cat "$libs/.complete" 2>/dev/null)" != "$pom_digest" ]; then
  tmp="$(mktemp -d "$root/.kafka-tools-$version.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DoutputDirectory="$tmp/libs" >&2
  mkdir -p "$cache"
  rm -rf "$libs"
  mv "$tmp/libs" "$libs"
  echo "$pom_digest" >"$libs/.complete"
fi
echo "$cache"
