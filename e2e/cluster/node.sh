#!/usr/bin/env bash
# The kind node image, assembled on this machine with no image registry:
#   bash e2e/cluster/node.sh          prints the node image's name on stdout
# Needs a running dockerd (e2e/cluster/runtime.sh up; DOCKER_HOST is taken from it) and the
# binaries of e2e/cluster/build.sh (built here if missing).
#
# `kind build node-image` cannot run offline (it pulls etcd, CoreDNS, pause, kindnetd and
# local-path images, and its base image's Dockerfile clones and builds from GitHub), so this
# does by hand what it does (pkg/build/nodeimage/buildcontext.go in the kind module):
#  1. one image per component, from the binaries built here, under the name kubeadm (or
#     kind's storage manifest) asks for: kube-apiserver, kube-controller-manager,
#     kube-scheduler, kube-proxy (with iptables), etcd, CoreDNS, pause, local-path
#     provisioner and its helper (which needs a shell);
#  2. kind's base image from kind's own files on the local Debian base (kind-base.Dockerfile);
#  3. a container of that base: kubeadm, kubelet and kubectl copied in, /kind/version and
#     kind's storage manifest written, every component image imported into its containerd
#     (pinned, so kubelet never collects them), then committed with kind's entrypoint.
# Every image carries a label with the digest of its inputs and is rebuilt only when they
# change; a warm run takes a few seconds.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export DOCKER_HOST="${DOCKER_HOST:-unix://$(bash "$here/runtime.sh" up)}"
BASE=kgroups/debian:bookworm
KIND_BASE=kgroups/kind-base

say() { echo "node: $*" >&2; }
fail() { say "$*"; exit 1; }
label() { docker image inspect -f '{{ index .Config.Labels "kgroups.inputs" }}' "$1" 2>/dev/null || true; }
digest() { sha256sum | cut -c1-16; }

declare -A bin
while IFS='=' read -r name path; do bin[$name]="$path"; done < <(bash "$here/build.sh")
kind_version="$("${bin[kind]}" version | awk '{print $2}')"
k8s_version="$("${bin[kubeadm]}" version -o short)"
kind_dir="$(go mod download -json "sigs.k8s.io/kind@$kind_version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
[ -d "$kind_dir/images/base/files" ] || fail "kind $kind_version's base image files are not in the module cache"
NODE="kgroups/kind-node:$k8s_version"
bash "$here/images.sh" base

kind_const() {  # the string value of a Go constant in kind's node image build
  sed -n "s/^const $1 = \"\(.*\)\"/\1/p" "$kind_dir"/pkg/build/nodeimage/const_*.go
}

image() {  # image NAME DOCKERFILE [FILE...]: build NAME from a Dockerfile text and files
  local name="$1" dockerfile="$2" context sum
  shift 2
  sum="$( (echo "$dockerfile"; label "$BASE"; sha256sum "$@") | digest)"
  [ "$(label "$name")" = "$sum" ] && return 0
  context="$(mktemp -d)"
  cp "$@" "$context/"
  echo "$dockerfile" >"$context/Dockerfile"
  say "building $name"
  docker build -q -t "$name" --label "kgroups.inputs=$sum" --build-arg "BASE=$BASE" \
    "$context" >/dev/null || { rm -rf "$context"; fail "building $name failed"; }
  rm -rf "$context"
}

static_image() {  # static_image NAME BINARY [ENTRYPOINT]: one static binary, nothing else
  local name="$1" binary="$2" entry="${3:-}" file
  file="$(basename "$binary")"
  image "$name" "FROM scratch
COPY $file /usr/local/bin/$file
ENV PATH=/usr/local/bin
${entry:+ENTRYPOINT [\"/usr/local/bin/$file\"]}" "$binary"
}

components() {  # prints the name of every component image
  local registry=registry.k8s.io c
  local want
  want="$("${bin[kubeadm]}" config images list --kubernetes-version "$k8s_version")"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    static_image "$registry/$c:$k8s_version" "${bin[$c]}"
  done
  # kube-proxy programs the node's iptables through the iptables commands.
  image "$registry/kube-proxy:$k8s_version" "ARG BASE
FROM \${BASE}
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
    iptables conntrack ipset && rm -rf /var/lib/apt/lists/*
COPY kube-proxy /usr/local/bin/kube-proxy" "${bin[kube-proxy]}"
  local etcd_tag coredns_tag pause_tag
  etcd_tag="$(grep '/etcd:' <<<"$want" | cut -d: -f2)"
  coredns_tag="$(grep '/coredns:' <<<"$want" | cut -d: -f2)"
  pause_tag="$(grep '/pause:' <<<"$want" | cut -d: -f2)"
  [ "$("${bin[etcd]}" --version | sed -n 's/^etcd Version: //p')" = "${etcd_tag%-*}" ] ||
    fail "kubeadm asks for etcd $etcd_tag, ${bin[etcd]} is another version"
  static_image "$registry/etcd:$etcd_tag" "${bin[etcd]}"
  static_image "$registry/coredns/coredns:$coredns_tag" "${bin[coredns]}" entry
  image "$registry/pause:$pause_tag" "FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT [\"/pause\"]" "${bin[pause]}"
  # kind's containerd config names its own sandbox image; the same pause serves both.
  local sandbox
  sandbox="$(sed -n 's/^[[:space:]]*sandbox_image = "\(.*\)"/\1/p' "$kind_dir/images/base/files/etc/containerd/config.toml")"
  docker tag "$registry/pause:$pause_tag" "$sandbox"
  local provisioner helper
  provisioner="$(kind_const storageProvisionerImage)"; helper="$(kind_const storageHelperImage)"
  static_image "$provisioner" "${bin[local-path-provisioner]}"
  # The helper pod runs shell scripts (mkdir, rm) to make and remove volumes.
  docker tag "$BASE" "$helper"
  printf '%s\n' "$want" | grep -v '/pause:'
  printf '%s\n' "$registry/pause:$pause_tag" "$sandbox" "$provisioner" "$helper"
}

kind_base() {
  local context sum
  context="$(mktemp -d)"
  cp -r "$kind_dir/images/base/files" "$context/files"
  chmod -R u+w "$context/files"
  cp "$here/kind-base.Dockerfile" "$context/Dockerfile"
  cp "$here/10-ptp.conflist" "$context/"
  sum="$( (label "$BASE"; cd "$context" && find . -type f -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum) | digest)"
  if [ "$(label "$KIND_BASE:$kind_version")" != "$sum" ]; then
    say "building $KIND_BASE:$kind_version (Debian's systemd, containerd, runc, CNI plugins)"
    docker build -q -t "$KIND_BASE:$kind_version" --label "kgroups.inputs=$sum" \
      --build-arg "BASE=$BASE" "$context" >/dev/null || { rm -rf "$context"; fail "kind base failed"; }
  fi
  rm -rf "$context"
}

storage_manifest() {  # kind's default storage manifest (const_storage.go), images filled in
  python3 - "$kind_dir/pkg/build/nodeimage/const_storage.go" <<'EOF'
import re, sys
source = open(sys.argv[1]).read()
images = dict(re.findall(r'^const (\w+Image) = "(.*)"', source, re.M))
body = re.search(r"^const defaultStorageManifest = `(.*?)^`$", source, re.M | re.S).group(1)
print(re.sub(r"` \+ (\w+) \+ `", lambda m: images[m.group(1)], body), end="")
EOF
}

node() {
  local images sum
  mapfile -t images < <(components)
  kind_base
  sum="$( (label "$KIND_BASE:$kind_version"; for i in "${images[@]}"; do echo "$i"; label "$i"; done
    storage_manifest; sha256sum "$0" "${bin[kubeadm]}" "${bin[kubelet]}" "${bin[kubectl]}") | digest)"
  [ "$(label "$NODE")" = "$sum" ] && return 0
  say "assembling $NODE"
  local id
  id="$(docker run -d --privileged --security-opt seccomp=unconfined --entrypoint=sleep \
    "$KIND_BASE:$kind_version" infinity)"
  trap 'docker rm -f -v "$id" >/dev/null 2>&1 || true' RETURN
  local b
  for b in kubeadm kubelet kubectl; do docker cp "${bin[$b]}" "$id:/usr/bin/$b"; done
  docker exec "$id" chown root:root /usr/bin/kubeadm /usr/bin/kubelet /usr/bin/kubectl
  docker exec "$id" mkdir -p /kind/manifests
  docker exec -i "$id" cp /dev/stdin /kind/version <<<"$k8s_version"
  storage_manifest | docker exec -i "$id" cp /dev/stdin /kind/manifests/default-storage.yaml
  # Never applied: clusters from this image disable kind's CNI (kind.sh does); the ptp
  # network in /etc/cni/net.d serves the node instead of kindnetd.
  docker exec -i "$id" cp /dev/stdin /kind/manifests/default-cni.yaml <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata: {name: kgroups-cni, namespace: kube-system}
data: {note: "pod networking is the static ptp conflist in /etc/cni/net.d of the node image"}
EOF
  docker exec "$id" bash -c 'nohup containerd >/dev/null 2>&1 &'
  local tries=0
  until docker exec "$id" ctr --namespace=k8s.io version >/dev/null 2>&1; do
    ((++tries < 60)) || fail "containerd did not start in the build container"
    sleep 0.5
  done
  local i
  for i in "${images[@]}"; do
    docker save "$i" | docker exec -i "$id" ctr --namespace=k8s.io images import \
      --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - >/dev/null ||
      fail "importing $i into the node failed"
  done
  docker exec "$id" pkill containerd
  tries=0
  # Stopped means exited: sleep, the container's first process, never reaps a zombie.
  while docker exec "$id" ps -o stat= -C containerd | grep -qv '^Z'; do
    ((++tries < 60)) || fail "containerd did not stop in the build container"
    sleep 0.5
  done
  docker commit --change 'ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]' \
    --change "LABEL kgroups.inputs=$sum" "$id" "$NODE" >/dev/null
}

node
echo "$NODE"
