#!/usr/bin/env bash
# `make e2e-kind`: the e2e scenarios on a kind cluster, with the Helm chart installed and
# the members as pods (examples/k8s/members.yaml). Needs a running container engine
# (docker, or podman through KIND_EXPERIMENTAL_PROVIDER); where there is none it says so
# and exits 0: the same scenarios run against a real kube-apiserver in `make test`.
# kind is built from the Go module proxy into the cache; helm and kubectl come from
# e2e/controlplane/build.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"; root="$(cd "$here/../.." && pwd)"
engine=""
for candidate in docker podman; do
  if command -v "$candidate" >/dev/null && "$candidate" info >/dev/null 2>&1; then
    engine="$candidate"; break
  fi
done
if [ -z "$engine" ]; then
  echo "e2e-kind: SKIPPED: no running container engine (docker or podman) on this machine;" >&2
  echo "e2e-kind: the same scenarios run against a local kube-apiserver in 'make test'." >&2
  exit 0
fi
[ "$engine" = podman ] && export KIND_EXPERIMENTAL_PROVIDER=podman

KIND_VERSION="${KIND_VERSION:-0.33.0}"
cache="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
kind_bin="$cache/kind-v$KIND_VERSION/bin"
if [ ! -x "$kind_bin/kind" ]; then
  mkdir -p "$kind_bin"
  GOBIN="$kind_bin" CGO_ENABLED=0 go install "sigs.k8s.io/kind@v$KIND_VERSION" >&2
fi
{ read -r k8s_bin; read -r _etcd; read -r helm_bin; } < <(bash "$root/e2e/controlplane/build.sh")
kind="$kind_bin/kind"; helm="$helm_bin/helm"
cluster="kgroups-e2e-$$"
export KUBECONFIG="$(mktemp)"
kubectl() { "$k8s_bin/kubectl" "$@"; }
cleanup() { "$kind" delete cluster --name "$cluster" >/dev/null 2>&1 || true; rm -f "$KUBECONFIG"; }
trap cleanup EXIT
step() { echo "e2e-kind: $*" >&2; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what="$2"; shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { step "FAILED waiting for $what"; kubectl get cg,kt,pods -A >&2; exit 1; }
    sleep 1
  done
}
jp() { kubectl get -n kgroups "$1" -o "jsonpath=$2"; }
is() { [ "$(jp "$1" "$2")" = "$3" ]; }

step "cluster $cluster ($engine)"
"$kind" create cluster --name "$cluster" --wait 180s --kubeconfig "$KUBECONFIG"
step "image"
image=kgroups:e2e
"$engine" build -t "$image" "$root"
"$kind" load docker-image "$image" --name "$cluster"
step "chart"
"$helm" install kgroups "$root/charts/kgroups" --namespace kgroups --create-namespace \
  --set image.repository=kgroups --set image.tag=e2e --set image.pullPolicy=Never \
  --wait --timeout 5m
kubectl apply -n kgroups -f "$root/examples/k8s/topic.yaml" -f "$root/examples/k8s/consumergroup.yaml"
wait_for 60 "the Topic to be Ready" is kt/orders '{.status.conditions[?(@.type=="Ready")].status}' True
# The group's settings (a 1 s minimum session timeout) must be in place before members
# with 4 s session timeouts join: the coordinator's own minimum is 6 s.
wait_for 60 "the group to be registered" is cg/billing \
  '{.status.conditions[?(@.type=="Ready")].reason}' NoMembers
sed "s|ghcr.io/kgroups/kgroups:0.1.0|$image|; s|image: $image|image: $image\n          imagePullPolicy: Never|" \
  "$root/examples/k8s/members.yaml" | kubectl apply -n kgroups -f -
step "4 members own 6/6"
wait_for 300 "4 members" is cg/billing '{.status.memberCount}' 4
wait_for 60 "6/6 assigned and Ready" is cg/billing \
  '{.status.partitions.summary}/{.status.conditions[?(@.type=="Ready")].status}' "6/6/True"
kubectl get cg -n kgroups
generation="$(jp cg/billing '{.status.generation}')"
step "the group stays Stable with all 4 members for 3 session timeouts (12 s)"
for _ in $(seq 24); do
  state="$(jp cg/billing '{.status.state}/{.status.memberCount}/{.status.generation}/{.status.partitions.summary}')"
  [ "$state" = "Stable/4/$generation/6/6" ] || { step "FAILED: the group moved: $state"; kubectl get cg,pods -A >&2; exit 1; }
  sleep 0.5
done
step "a member pod killed: a new generation"
pod="$(kubectl get pods -n kgroups -l app=billing-members -o jsonpath='{.items[0].metadata.name}')"
kubectl delete pod -n kgroups "$pod" --grace-period=0 --force
newer() { [ "$(jp cg/billing '{.status.generation}')" -gt "$generation" ]; }
wait_for 30 "a generation after $generation" newer
step "the topic grows to 8: 8/8 assigned"
kubectl patch kt orders -n kgroups --type merge -p '{"spec":{"partitions":8}}'
wait_for 90 "8/8" is cg/billing '{.status.partitions.summary}' 8/8
step "deletion waits for the group to empty"
kubectl delete cg billing -n kgroups --wait=false
wait_for 30 "WaitingForEmptyGroup" is cg/billing \
  '{.status.conditions[?(@.type=="Ready")].reason}' WaitingForEmptyGroup
kubectl delete deployment -n kgroups billing-members billing-kafka-python
gone() { ! kubectl get cg billing -n kgroups; }
wait_for 90 "the ConsumerGroup to be deleted" gone
step "PASSED"
