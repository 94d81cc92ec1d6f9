#!/usr/bin/env bash
# Every image the cluster needs, built on this machine with no image registry:
#   bash e2e/cluster/images.sh [base|python|kgroups|clients|spark|postgresql|all|names]...
#   (default: all)
# Needs a running dockerd (e2e/cluster/runtime.sh up; DOCKER_HOST is taken from it), except
# for `names`.
#
#  * kgroups/debian:bookworm   a minimal Debian root filesystem made by debootstrap from
#                              the mirror apt on this machine is configured with (read from
#                              its sources, never written here), imported as an image;
#  * kgroups/python:3.11       Debian's python3 (3.11) on it: the stand-in for
#                              python:3.11-slim, which no registry can give us;
#  * kgroups:dev               the project's own Dockerfile on that base, installing wheels
#                              built on the host (pip inside a build cannot reach PyPI), also
#                              tagged ghcr.io/kgroups/kgroups:<the chart's appVersion>, the
#                              name the chart and examples/k8s use;
#  * ghcr.io/kgroups/kgroups-clients:<appVersion>
#                              examples/k8s/Dockerfile.clients: the example members of
#                              examples/k8s/apps, with kafka-python and confluent-kafka at
#                              the versions pyproject.toml's dev extra pins;
#  * ghcr.io/kgroups/kgroups-spark:<appVersion>
#                              examples/k8s/Dockerfile.spark: kgroups[spark], Java 17 from
#                              Debian's mirror, Spark's Kafka source jars (tools/spark/fetch.sh);
#  * ghcr.io/kgroups/kgroups-postgresql:<appVersion>
#                              examples/k8s/Dockerfile.postgresql: Debian's postgresql on the
#                              Debian base, the single database pod of
#                              examples/k8s/postgresql.yaml (coordinator replicas on kind).
# `all` builds the last four. `names` prints the images a cluster needs loaded for the
# chart and examples/k8s to run unmodified, one a line.
#
# The root filesystem tarball and the wheels are cached outside the repository, keyed by
# suite and by the project's dependency pins; an image already present is not rebuilt
# unless its inputs changed (a label carries their digest). Prints nothing but errors and
# progress on stderr (and the names, for `names`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
cache="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
images="$cache/cluster-images"
SUITE=bookworm
BASE=kgroups/debian:$SUITE
PYTHON=kgroups/python:3.11
PROJECT="${KGROUPS_IMAGE:-kgroups:dev}"
VERSION="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$root/charts/kgroups/Chart.yaml")"
RELEASE=ghcr.io/kgroups/kgroups:$VERSION
CLIENTS=ghcr.io/kgroups/kgroups-clients:$VERSION
SPARK=ghcr.io/kgroups/kgroups-spark:$VERSION
POSTGRESQL=ghcr.io/kgroups/kgroups-postgresql:$VERSION

say() { echo "images: $*" >&2; }
fail() { say "$*"; exit 1; }
label() { docker image inspect -f "{{ index .Config.Labels \"kgroups.inputs\" }}" "$1" 2>/dev/null || true; }
[ -n "$VERSION" ] || fail "no appVersion in charts/kgroups/Chart.yaml"
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

daemon() {  # the runtime's socket, and one build at a time on this machine
  if [ -z "${DOCKER_HOST:-}" ]; then
    local socket
    socket="$(bash "$here/runtime.sh" up)"
    export DOCKER_HOST="unix://$socket"
  fi
  mkdir -p "$images"
  exec 9>"$images/.lock"
  flock 9
}

mirror() {  # the Debian mirror apt uses here: deb822 sources first, then sources.list
  local uri
  uri="$(grep -hs -A3 '^Types: deb' /etc/apt/sources.list.d/*.sources |
    awk '/^URIs:/ {print $2}' | grep -v -- '-security' | head -1)"
  [ -n "$uri" ] || uri="$(awk '$1 == "deb" && $3 ~ /^'"$SUITE"'$/ {print $2; exit}' \
    /etc/apt/sources.list 2>/dev/null)"
  [ -n "$uri" ] || fail "no Debian mirror found in apt's sources"
  echo "$uri"
}

base() {
  local tarball="$images/debian-$SUITE-minbase.tar"
  if [ ! -f "$tarball" ]; then
    local rootfs
    rootfs="$(mktemp -d "$images/.rootfs.XXXXXX")"
    scratch+=("$rootfs")
    say "debootstrap $SUITE (minbase) from $(mirror)"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$(mirror)" >&2
    # apt inside builds uses the same mirror, as the host's apt does.
    rm -rf "$rootfs/var/cache/apt/archives/"*.deb "$rootfs/var/lib/apt/lists/"*
    tar -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
  fi
  local digest
  digest="$(sha256sum "$tarball" | cut -c1-16)"
  if [ "$(label "$BASE")" != "$digest" ]; then
    say "importing $BASE"
    docker import -c "LABEL kgroups.inputs=$digest" -c 'CMD ["bash"]' "$tarball" "$BASE" >/dev/null
  fi
}

python() {
  base
  local digest
  digest="$(printf '%s' "$(label "$BASE")" "$(cat "$here/python.Dockerfile")" | sha256sum | cut -c1-16)"
  if [ "$(label "$PYTHON")" != "$digest" ]; then
    say "building $PYTHON"
    docker build -q -t "$PYTHON" --build-arg "BASE=$BASE" --label "kgroups.inputs=$digest" \
      -f "$here/python.Dockerfile" "$here" >/dev/null
  fi
}

pin() {  # pin NAME: NAME==VERSION, as pyproject.toml pins it
  local spec
  spec="$(grep -o "\"$1==[^\"]*\"" "$root/pyproject.toml" | head -1 | tr -d '"')"
  [ -n "$spec" ] || fail "pyproject.toml pins no version of $1"
  echo "$spec"
}

wheels() {  # wheels SPEC...: SPECs and their dependencies as wheels, built on the host by
  # `pip wheel SPEC...` in the repository ("." is the project), cached by the project's
  # pins and the SPECs; prints the directory
  local key dir
  key="$( (cat "$root/pyproject.toml"; printf '%s\n' "$@") | sha256sum | cut -c1-16)"
  dir="$images/wheels-$key"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"; mkdir -p "$dir"
    say "building wheels on the host: $*"
    (cd "$root" && .venv/bin/python -m pip wheel -q --wheel-dir "$dir" "$@") >&2
    touch "$dir/.complete"
  fi
  echo "$dir"
}

contents() {  # contents PATH: the names and digests of the files under PATH (or of PATH)
  if [ -d "$1" ]; then
    (cd "$1" && find . -type f ! -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z |
      xargs -0 -r sha256sum)
  else
    sha256sum <"$1"
  fi
}

image() {  # image NAME[,TAG...] DOCKERFILE WHEELS [DEST=SOURCE]...
  # Builds NAME (tagged TAGs too) from DOCKERFILE (a path in the repository) on $PYTHON, in
  # a context of deps/ (the cached WHEELS directory's dependencies), wheels/ (this tree's
  # own kgroups wheel)
  # and each SOURCE (a file or directory) at DEST, unless NAME's label says its inputs are
  # unchanged. What a build leaves behind goes: the image it replaced (unless a container
  # or another tag still holds it) and its install stage's image (`LABEL kgroups.stage`).
  local names name tag dockerfile="$2" wheelhouse="$3" digest context pair old started=$SECONDS
  IFS=, read -ra names <<<"$1"; name="${names[0]}"; shift 3
  # The project wheel changes with the sources even when the pins do not.
  digest="$( (label "$PYTHON"; basename "$wheelhouse"; contents "$root/$dockerfile"
    contents "$root/src"; for pair in "$@"; do echo "${pair%%=*}"; contents "${pair#*=}"; done
  ) | sha256sum | cut -c1-16)"
  if [ "$(label "$name")" != "$digest" ]; then
    context="$(mktemp -d)"
    scratch+=("$context")
    # deps/: the dependencies' wheels (the same while the pins are: the image's layer that
    # installs them is built once); wheels/: this tree's own wheel, installed on top.
    mkdir "$context/deps" "$context/wheels"
    cp "$wheelhouse"/*.whl "$context/deps/"
    rm -f "$context/deps"/kgroups-*.whl
    "$root/.venv/bin/python" -m pip wheel -q --no-deps --wheel-dir "$context/wheels" "$root" >&2
    for pair in "$@" "$dockerfile=$root/$dockerfile"; do
      mkdir -p "$(dirname "$context/${pair%%=*}")"
      cp -r "${pair#*=}" "$context/${pair%%=*}"
    done
    echo '**/__pycache__' >"$context/.dockerignore"
    old="$(docker image inspect -f '{{.Id}}' "$name" 2>/dev/null || true)"
    say "building $name"
    if grep -q ' AS install$' "$context/$dockerfile"; then
      # The install stage tagged, so that pruning keeps it: its dependencies' layer is
      # then reused by the next build, which changes only the project's wheel.
      docker build -q -t "${name%:*}-install:cache" --target install \
        --build-arg "PYTHON_IMAGE=$PYTHON" -f "$context/$dockerfile" "$context" >/dev/null
    fi
    docker build -q -t "$name" --build-arg "PYTHON_IMAGE=$PYTHON" \
      --label "kgroups.inputs=$digest" -f "$context/$dockerfile" "$context" >/dev/null
    say "built $name in $((SECONDS - started)) s"
  fi
  for tag in "${names[@]:1}"; do docker tag "$name" "$tag"; done
  if [ -n "${old:-}" ]; then docker rmi "$old" >/dev/null 2>&1 || true; fi
  docker image prune -f --filter label=kgroups.stage >/dev/null
}

project() {
  python
  local wheelhouse
  wheelhouse="$(wheels .)"
  image "$PROJECT,$RELEASE" Dockerfile "$wheelhouse"
}

clients() {
  python
  local kafka_python confluent wheelhouse
  kafka_python="$(pin kafka-python)"; confluent="$(pin confluent-kafka)"
  wheelhouse="$(wheels . "$kafka_python" "$confluent")"
  image "$CLIENTS" examples/k8s/Dockerfile.clients "$wheelhouse" \
    "examples/k8s/apps=$root/examples/k8s/apps"
}

spark() {
  python
  local wheelhouse jars
  wheelhouse="$(wheels '.[spark]')"
  jars="$(bash "$root/tools/spark/fetch.sh")"
  image "$SPARK" examples/k8s/Dockerfile.spark "$wheelhouse" \
    "jars=$jars" "examples/spark=$root/examples/spark"
}

postgresql() {  # no wheels: Debian's package on the Debian base
  base
  local digest started=$SECONDS
  digest="$( (label "$BASE"; contents "$root/examples/k8s/Dockerfile.postgresql"
    contents "$root/examples/k8s/postgresql") | sha256sum | cut -c1-16)"
  if [ "$(label "$POSTGRESQL")" != "$digest" ]; then
    say "building $POSTGRESQL"
    docker build -q -t "$POSTGRESQL" --build-arg "BASE=$BASE" --label "kgroups.inputs=$digest" \
      -f "$root/examples/k8s/Dockerfile.postgresql" "$root/examples/k8s" >/dev/null
    say "built $POSTGRESQL in $((SECONDS - started)) s"
  fi
}

for target in "${@:-all}"; do
  case "$target" in
    names) printf '%s\n' "$RELEASE" "$CLIENTS" "$SPARK" "$POSTGRESQL" ;;
    base | python | kgroups | clients | spark | postgresql | all)
      [ -n "${locked:-}" ] || { daemon; locked=1; }
      case "$target" in
        base) base ;;
        python) python ;;
        kgroups) project ;;
        clients) clients ;;
        spark) spark ;;
        postgresql) postgresql ;;
        all) project; clients; spark; postgresql ;;
      esac ;;
    *) echo "usage: $0 [base|python|kgroups|clients|spark|postgresql|all|names]..." >&2; exit 2 ;;
  esac
done
