#!/usr/bin/env bash
# Every image the cluster needs, built on this machine with no image registry:
#   bash e2e/cluster/images.sh [base|python|kgroups|all]      (default: all)
# Needs a running dockerd (e2e/cluster/runtime.sh up; DOCKER_HOST is taken from it).
#
#  * kgroups/debian:bookworm   a minimal Debian root filesystem made by debootstrap from
#                              the mirror apt on this machine is configured with (read from
#                              its sources, never written here), imported as an image;
#  * kgroups/python:3.11       Debian's python3 (3.11) on it: the stand-in for
#                              python:3.11-slim, which no registry can give us;
#  * kgroups:dev               the project's own Dockerfile on that base, installing wheels
#                              built on the host (pip inside a build cannot reach PyPI).
# The root filesystem tarball and the wheels are cached outside the repository, keyed by
# suite and by the project's dependency pins; an image already present is not rebuilt
# unless its inputs changed (a label carries their digest). Prints nothing but errors and
# progress on stderr.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
cache="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
images="$cache/cluster-images"
SUITE=bookworm
BASE=kgroups/debian:$SUITE
PYTHON=kgroups/python:3.11
PROJECT="${KGROUPS_IMAGE:-kgroups:dev}"
export DOCKER_HOST="${DOCKER_HOST:-unix://$(bash "$here/runtime.sh" up)}"

say() { echo "images: $*" >&2; }
fail() { say "$*"; exit 1; }
label() { docker image inspect -f "{{ index .Config.Labels \"kgroups.inputs\" }}" "$1" 2>/dev/null || true; }

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
    mkdir -p "$images"
    local rootfs
    rootfs="$(mktemp -d "$images/.rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs"' RETURN
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

wheels() {  # the project and its runtime dependencies as wheels, built on the host; prints the dir
  local pins dir
  pins="$(cat "$root/pyproject.toml" | sha256sum | cut -c1-16)"
  dir="$images/wheels-$pins"
  if [ ! -f "$dir/.complete" ]; then
    rm -rf "$dir"; mkdir -p "$dir"
    say "building wheels on the host"
    "$root/.venv/bin/python" -m pip wheel -q --wheel-dir "$dir" "$root" >&2
    touch "$dir/.complete"
  fi
  echo "$dir"
}

project() {
  python
  local wheelhouse context digest
  wheelhouse="$(wheels)"
  # The project wheel changes with the sources even when the pins do not.
  digest="$( (label "$PYTHON"; cat "$root/Dockerfile"; find "$root/src" -type f -name '*.py' \
    -print0 | LC_ALL=C sort -z | xargs -0 cat) | sha256sum | cut -c1-16)"
  if [ "$(label "$PROJECT")" = "$digest" ]; then return 0; fi
  context="$(mktemp -d)"
  trap 'rm -rf "$context"' RETURN
  mkdir "$context/wheels"
  cp "$wheelhouse"/*.whl "$context/wheels/"
  rm -f "$context/wheels"/kgroups-*.whl
  "$root/.venv/bin/python" -m pip wheel -q --no-deps --wheel-dir "$context/wheels" "$root" >&2
  cp "$root/Dockerfile" "$context/Dockerfile"
  say "building $PROJECT"
  docker build -q -t "$PROJECT" --build-arg "PYTHON_IMAGE=$PYTHON" \
    --label "kgroups.inputs=$digest" "$context" >/dev/null
}

case "${1:-all}" in
  base) base ;;
  python) python ;;
  kgroups | all) project ;;
  *) echo "usage: $0 [base|python|kgroups|all]" >&2; exit 2 ;;
esac
