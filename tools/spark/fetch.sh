#!/usr/bin/env bash
# Fetches the jars Spark applications need beyond pyspark (tools/spark/pom.xml: the Kafka
# source, Delta Lake) from Maven Central into a cache
# outside the repository, ${KGROUPS_CACHE:-~/.cache/kgroups}/spark-jars-<version>/, and
# prints that directory. Idempotent: a stamp holding the pom's hash marks a complete set.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's|.*<spark.version>\(.*\)</spark.version>.*|\1|p' "$here/pom.xml")"
root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
jars="$root/spark-jars-$version"
command -v mvn >/dev/null || { echo "fetch.sh: 'mvn' is required" >&2; exit 2; }
mkdir -p "$root"
exec 9>"$root/.lock-spark-jars-$version"
flock 9
digest="$(sha256sum "$here/pom.xml" | cut -c1-16)"
if [ "$(cat "$jars/.complete" 2>/dev/null)" != "$digest" ]; then
  tmp="$(mktemp -d "$root/.spark-jars-$version.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  mvn -q -B -f "$here/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tmp/jars" >&2
  rm -rf "$jars"
  mv "$tmp/jars" "$jars"
  echo "$digest" >"$jars/.complete"
fi
echo "$jars"
