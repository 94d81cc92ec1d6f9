#!/usr/bin/env bash
# Installs an Apache Kafka broker and Java client (from Maven Central) and compiles the
# Java interop helpers (JavaMember, KafkaAdmin), into a cache outside the repository:
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/kafka-<version>/{libs,javamember}
# Idempotent and fast once done: a stamp holding the pom's hash marks a complete jar
# install, and the helpers are recompiled only when their sources change. A lock keeps
# concurrent runs (parallel tests) from racing. Prints the cache directory on success.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$here/pom.xml")"
root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
cache="$root/kafka-$version"
libs="$cache/libs"

for tool in java javac mvn; do
  command -v "$tool" >/dev/null || { echo "fetch.sh: '$tool' is required (Java 17 and Maven)" >&2; exit 2; }
done

mkdir -p "$root"
exec 9>"$root/.lock-kafka-$version"
flock 9

pom_digest="$(sha256sum "$here/pom.xml" | cut -c1-16)"
if [ "$(cat "$libs/.complete" 2>/dev/null)" != "$pom_digest" ]; then
  tmp="$(mktemp -d "$root/.kafka-$version.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DoutputDirectory="$tmp/libs" >&2
  mkdir -p "$cache"
  rm -rf "$libs"
  mv "$tmp/libs" "$libs"
  echo "$pom_digest" >"$libs/.complete"
  rm -rf "$cache/javamember"  # compiled against the old jars
fi

sources=("$here"/*.java)
src_digest="$(cat "${sources[@]}" | sha256sum | cut -c1-16)"
classes="$cache/javamember"
if [ ! -f "$classes/.$src_digest" ]; then
  rm -rf "$classes"
  mkdir -p "$classes"
  # Quiet unless it fails: JavaMember's sun.misc.Signal always draws "proprietary API" warnings.
  if ! out="$(javac -nowarn -d "$classes" -cp "$libs/*" "${sources[@]}" 2>&1)"; then
    echo "$out" >&2
    exit 1
  fi
  touch "$classes/.$src_digest"
fi
echo "$cache"
