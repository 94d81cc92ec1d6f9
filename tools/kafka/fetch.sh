#!/usr/bin/env bash
# Installs an Apache Kafka broker and Java client (from Maven Central) and compiles the
# Java interop member, into a cache outside the repository:
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/kafka-<version>/{libs,javamember}
# Idempotent and fast once done (a stamp file marks a complete install; the member is
# recompiled only when its source changes). Prints the cache directory.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's|.*<kafka.version>\(.*\)</kafka.version>.*|\1|p' "$here/pom.xml")"
cache="${KGROUPS_CACHE:-$HOME/.cache/kgroups}/kafka-$version"
libs="$cache/libs"

for tool in java javac mvn; do
  command -v "$tool" >/dev/null || { echo "fetch.sh: '$tool' is required (Java 17 and Maven)" >&2; exit 2; }
done

if [ ! -f "$libs/.complete" ]; then
  tmp="$(mktemp -d "${cache}.tmp.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$cache")"; mktemp -d "${cache}.tmp.XXXXXX"; })"
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DoutputDirectory="$tmp/libs" >&2
  mkdir -p "$cache"
  rm -rf "$libs"
  mv "$tmp/libs" "$libs"
  rmdir "$tmp"
  touch "$libs/.complete"
fi

source="$here/JavaMember.java"
digest="$(sha256sum "$source" | cut -c1-16)"
member="$cache/javamember"
if [ ! -f "$member/.$digest" ]; then
  rm -rf "$member"
  mkdir -p "$member"
  javac -nowarn -d "$member" -cp "$libs/*" "$source" >&2
  touch "$member/.$digest"
fi
echo "$cache"
