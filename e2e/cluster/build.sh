#!/usr/bin/env bash
# Every binary a kind node image assembled on this machine needs, built without an image
# registry: Go programs from the Go module proxy (whatever `go env GOPROXY` says), the pause
# process with gcc. Images are made from these elsewhere.
#   bash e2e/cluster/build.sh [COMPONENT...]
#   COMPONENT: kind kubernetes etcd coredns local-path-provisioner pause   (default: all)
# Prints one `name=path` line per binary on stdout, progress on stderr.
#
# Caches outside the repository, keyed by version, under ${KGROUPS_CACHE:-~/.cache/kgroups}:
#   kind-v<KIND>/bin/kind
#   k8s-v<K8S>/bin/{kube-apiserver,kube-controller-manager,kubectl}
#   etcd-v<ETCD>/bin/etcd                         (these two from e2e/controlplane/build.sh)
#   k8s-node-v<K8S>/bin/{kubelet,kubeadm,kube-proxy,kube-scheduler}
#   coredns-v<COREDNS>/bin/coredns
#   local-path-provisioner-v<LOCAL_PATH>/bin/local-path-provisioner
#   pause-<PAUSE>/bin/pause
# etcd, CoreDNS and pause default to the versions kubeadm v<K8S> itself asks for (its
# constants, read from the k8s.io/kubernetes module), so the images made from them can carry
# the tags kubeadm expects without lying about their contents. Override any version with
# K8S_VERSION, KIND_VERSION, ETCD_VERSION, COREDNS_VERSION, LOCAL_PATH_VERSION, PAUSE_VERSION.
#
# Each component is built into a scratch directory, moved into place and stamped
# (.complete), under its own lock, so a warm run costs a few seconds and parallel runs do not
# race. Every binary is checked to be statically linked (CGO_ENABLED=0; gcc -static).
# The builds run at the lowest CPU priority (BUILD_NICE, default 19): on a small machine they
# share the cores with the test suite, and a build is never what anyone is waiting on first.
set -euo pipefail
BUILD_NICE="${BUILD_NICE:-19}"
if [ "$(nice)" -lt "$BUILD_NICE" ]; then
  exec nice -n "$((BUILD_NICE - $(nice)))" bash "$0" "$@"
fi
here="$(cd "$(dirname "$0")" && pwd)"; repo="$(cd "$here/../.." && pwd)"
root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
K8S="${K8S_VERSION:-1.34.4}"
KIND="${KIND_VERSION:-0.33.0}"
LOCAL_PATH="${LOCAL_PATH_VERSION:-0.0.30}"
ALL=(kind kubernetes etcd coredns local-path-provisioner pause)

say() { echo "cluster-build: $*" >&2; }
fail() { say "$*"; exit 1; }
command -v go >/dev/null || fail "Go is required"
mkdir -p "$root"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

gomod() {  # gomod MODULE@VERSION FIELD: a field of `go mod download -json` (Dir, GoMod)
  go mod download -json "$1" | sed -n "s/.*\"$2\": \"\(.*\)\".*/\1/p"
}
kdir="$(gomod "k8s.io/kubernetes@v$K8S" Dir)"
[ -d "$kdir" ] || fail "k8s.io/kubernetes@v$K8S is not in the module cache"
kubeadm_constant() {  # the string value of a constant in kubeadm's constants.go
  sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\(.*\)\"/\1/p" \
    "$kdir/cmd/kubeadm/app/constants/constants.go" | head -1
}
etcd_tag="$(kubeadm_constant DefaultEtcdVersion)"   # e.g. 3.6.5-0: the image tag
ETCD="${ETCD_VERSION:-${etcd_tag%-*}}"
coredns_tag="$(kubeadm_constant CoreDNSVersion)"     # e.g. v1.12.1
COREDNS="${COREDNS_VERSION:-${coredns_tag#v}}"
PAUSE="${PAUSE_VERSION:-$(kubeadm_constant PauseVersion)}"
[ -n "$ETCD" ] && [ -n "$COREDNS" ] && [ -n "$PAUSE" ] ||
  fail "could not read etcd, CoreDNS and pause versions from kubeadm v$K8S's constants"

static() {  # fail unless every file given is a statically linked executable
  local f
  for f in "$@"; do
    [ -x "$f" ] || fail "$f was not built"
    ! readelf -l "$f" | grep -q 'Requesting program interpreter' || fail "$f is dynamically linked"
  done
}

ensure() {  # ensure NAME DIR BUILDER: unless DIR is stamped, run BUILDER SCRATCH under a lock
  local name="$1" dir="$2" builder="$3"
  [ -f "$dir/.complete" ] && return 0
  mkdir -p "$(dirname "$dir")"
  (
    flock 9
    [ -f "$dir/.complete" ] && exit 0
    scratch="$dir.tmp"
    rm -rf "$scratch"; mkdir -p "$scratch"
    start=$SECONDS
    "$builder" "$scratch"
    static "$scratch"/*
    rm -rf "$dir"; mv "$scratch" "$dir"
    printf 'built %s with %s\n' "$(date -u +%FT%TZ)" "$(go version)" >"$dir/.complete"
    say "$name: built in $((SECONDS - start)) s"
  ) 9>"$root/.lock-$(basename "$(dirname "$dir")")"
}

wrapper() {  # wrapper DIR GO_LINE: a fresh main module to build published commands from
  mkdir -p "$1"
  printf 'module local/kgroups-tools\n\ngo %s\n' "$2" >"$1/go.mod"
  printf 'package tools\n' >"$1/tools.go"
}

build_kind() {
  say "kind v$KIND: go install (first run: ~2-4 min)"
  GOBIN="$1" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kind@v$KIND" >&2
}

build_k8s_node() {
  # k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with
  # local paths); the wrapper module is the one e2e/controlplane/build.sh writes, so both
  # resolve the same versions and share Go's build cache for every common package.
  local cmds=(kubelet kubeadm kube-proxy kube-scheduler) pkgs=() c
  say "kubelet, kubeadm, kube-proxy, kube-scheduler v$K8S (first run: ~5-15 min)"
  for c in "${cmds[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  local work modfile minor ld
  work="$(mktemp -d "$root/.build-k8s-node.XXXXXX")"
  modfile="$(gomod "k8s.io/kubernetes@v$K8S" GoMod)"
  wrapper "$work" "$(sed -n 's/^go \(.*\)/\1/p' "$modfile")"
  {
    sed -n 's/^godebug \(.*\)/godebug \1/p' "$modfile"
    echo "require k8s.io/kubernetes v$K8S"
    sed -n 's/^[[:space:]]*\(k8s\.io\/[^ ]*\) v0\.0\.0$/\1/p' "$modfile" | sort -u |
      while read -r m; do echo "replace $m => $m v0.${K8S#1.}"; done
  } >>"$work/go.mod"
  minor="${K8S#1.}"; minor="${minor%%.*}"
  ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S -X k8s.io/component-base/version.gitMajor=1"
  ld="$ld -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=v$K8S"
  (cd "$work" && go get "${pkgs[@]/%/@v$K8S}" >&2 &&
    go build -trimpath -ldflags "$ld" -o "$1/" "${pkgs[@]}" >&2) || { rm -rf "$work"; return 1; }
  rm -rf "$work"
}

build_coredns() {
  say "coredns v$COREDNS: go install (first run: ~4-8 min)"
  GOBIN="$1" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@v$COREDNS" >&2
}

build_local_path() {
  say "local-path-provisioner v$LOCAL_PATH: go install (first run: ~3-6 min)"
  GOBIN="$1" go install -trimpath -ldflags "-s -w -X main.VERSION=v$LOCAL_PATH" \
    "github.com/rancher/local-path-provisioner@v$LOCAL_PATH" >&2
}

build_pause() {
  # The source kubeadm's pause image is built from, compiled as its build/pause/Makefile does.
  local tag
  tag="$(sed -n 's/^TAG ?= \(.*\)/\1/p' "$kdir/build/pause/Makefile")"
  [ "$tag" = "$PAUSE" ] || say "pause: kubeadm asks for $PAUSE, k8s.io/kubernetes@v$K8S's pause.c is $tag"
  say "pause $PAUSE: gcc -static"
  command -v gcc >/dev/null || fail "gcc is required for pause"
  gcc -Os -Wall -Werror -static -DVERSION="v$tag" -o "$1/pause" "$kdir/build/pause/linux/pause.c" >&2
}

controlplane() {  # kube-apiserver, kube-controller-manager, kubectl and etcd, as `make controlplane` builds them
  local dirs
  dirs="$(ETCD_VERSION="$ETCD" K8S_VERSION="$K8S" bash "$repo/e2e/controlplane/build.sh")" ||
    fail "e2e/controlplane/build.sh failed"
  cp_k8s="$(sed -n 1p <<<"$dirs")"; cp_etcd="$(sed -n 2p <<<"$dirs")"
}

wanted=("$@"); [ ${#wanted[@]} -gt 0 ] || wanted=("${ALL[@]}")
out=()
cp_k8s=""
for c in "${wanted[@]}"; do
  case "$c" in
    kind)
      d="$root/kind-v$KIND/bin"
      ensure kind "$d" build_kind
      out+=("kind=$d/kind") ;;
    kubernetes)
      d="$root/k8s-node-v$K8S/bin"
      ensure "kubernetes node binaries" "$d" build_k8s_node
      [ -n "$cp_k8s" ] || controlplane
      for b in kubelet kubeadm kube-proxy kube-scheduler; do out+=("$b=$d/$b"); done
      for b in kube-controller-manager kube-apiserver kubectl; do out+=("$b=$cp_k8s/$b"); done ;;
    etcd)
      [ -n "$cp_k8s" ] || controlplane
      out+=("etcd=$cp_etcd/etcd") ;;
    coredns)
      d="$root/coredns-v$COREDNS/bin"
      ensure coredns "$d" build_coredns
      out+=("coredns=$d/coredns") ;;
    local-path-provisioner)
      d="$root/local-path-provisioner-v$LOCAL_PATH/bin"
      ensure local-path-provisioner "$d" build_local_path
      out+=("local-path-provisioner=$d/local-path-provisioner") ;;
    pause)
      d="$root/pause-$PAUSE/bin"
      ensure pause "$d" build_pause
      out+=("pause=$d/pause") ;;
    *) echo "usage: $0 [${ALL[*]}]..." >&2; exit 2 ;;
  esac
done
for line in "${out[@]}"; do static "${line#*=}"; echo "$line"; done
