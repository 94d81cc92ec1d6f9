#!/usr/bin/env bash
# A kind cluster on the node image e2e/cluster/node.sh assembles:
#   bash e2e/cluster/kind.sh up NAME          create it (or keep it); prints its kubeconfig
#   bash e2e/cluster/kind.sh load NAME IMAGE...   copy local images into every node
#   bash e2e/cluster/kind.sh logs NAME DIR    node journals, pod logs and events into DIR
#   bash e2e/cluster/kind.sh down NAME        delete it
# Needs a running dockerd (e2e/cluster/runtime.sh up; DOCKER_HOST is taken from it). kind
# itself comes from e2e/cluster/build.sh. The kubeconfig lives in the cache, beside the
# runtime's state, never in ~/.kube.
#
# One control-plane node, kind's own CNI (kindnetd) disabled: the node image carries a
# static ptp network instead, since no kindnetd image can be had here. `kind load
# docker-image` needs crictl on the node (not packaged for Debian 12, and its module cannot
# be fetched here), so images are loaded the way it does underneath: `docker save` into the
# node's containerd (`ctr images import`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
export DOCKER_HOST="${DOCKER_HOST:-unix://$(bash "$here/runtime.sh" up)}"

say() { echo "kind: $*" >&2; }
fail() { say "$*"; exit 1; }
usage() { echo "usage: $0 up NAME | load NAME IMAGE... | logs NAME DIR | down NAME" >&2; exit 2; }

kind="$(bash "$here/build.sh" kind | sed -n 's/^kind=//p')"
kubectl="$(bash "$here/build.sh" kubernetes | sed -n 's/^kubectl=//p')"
[ $# -ge 2 ] || usage
command="$1"; name="$2"; shift 2
kubeconfig="$cache/cluster-runtime/kind-$name.kubeconfig"

up() {
  if "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
    "$kind" get kubeconfig --name "$name" >"$kubeconfig"
    echo "$kubeconfig"; return 0
  fi
  local image
  image="$(bash "$here/node.sh")"
  say "creating cluster $name on $image"
  "$kind" create cluster --name "$name" --image "$image" --kubeconfig "$kubeconfig" \
    --wait 180s --config - >&2 <<'EOF' || fail "kind create cluster failed"
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true   # the node image's ptp network instead of kindnetd
  podSubnet: 10.244.0.0/16  # the ptp network's range is this node's /24 of it
nodes:
  - role: control-plane
EOF
  echo "$kubeconfig"
}

load() {
  local node image
  for node in $("$kind" get nodes --name "$name"); do
    for image in "$@"; do
      say "loading $image into $node"
      docker save "$image" | docker exec -i "$node" ctr --namespace=k8s.io images import \
        --all-platforms --digests --snapshotter=overlayfs - >/dev/null ||
        fail "loading $image into $node failed"
    done
  done
}

logs() {  # everything someone debugging a failed run looks at first
  local dir="$1" node
  mkdir -p "$dir"
  local k=("$kubectl" --kubeconfig "$kubeconfig")
  "${k[@]}" get all,cg,kt,pvc,pv,events -A -o wide >"$dir/resources.txt" 2>&1 || true
  "${k[@]}" get events -A --sort-by=.lastTimestamp >"$dir/events.txt" 2>&1 || true
  "${k[@]}" describe pods -A >"$dir/pods-described.txt" 2>&1 || true
  local ns pod
  while read -r ns pod; do
    "${k[@]}" logs -n "$ns" "$pod" --all-containers --prefix --tail=2000 >"$dir/pod-$ns-$pod.log" 2>&1 || true
    "${k[@]}" logs -n "$ns" "$pod" --all-containers --prefix --previous --tail=500 \
      >>"$dir/pod-$ns-$pod.previous.log" 2>/dev/null || true
  done < <("${k[@]}" get pods -A --no-headers -o custom-columns=NS:.metadata.namespace,NAME:.metadata.name 2>/dev/null)
  for node in $("$kind" get nodes --name "$name"); do
    docker exec "$node" journalctl --no-pager -u kubelet -u containerd >"$dir/node-$node.journal" 2>&1 || true
  done
  echo "$dir"
}

case "$command" in
  up) up ;;
  load) [ $# -ge 1 ] || usage; load "$@" ;;
  logs) [ $# -eq 1 ] || usage; logs "$1" ;;
  down) "$kind" delete cluster --name "$name" >&2; rm -f "$kubeconfig" ;;
  *) usage ;;
esac
