#!/usr/bin/env bash
# Builds the control-plane tools the e2e tier needs, from the Go module proxy, into a cache
# outside the repository (nothing else ships kube-apiserver; see README "Local control plane"):
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/k8s-v<K8S>/bin/{kube-apiserver,kube-controller-manager,kubectl}
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/etcd-v<ETCD>/bin/etcd
#   ${KGROUPS_CACHE:-~/.cache/kgroups}/helm-v<HELM>/bin/helm
# k8s.io/kubernetes cannot be `go install`ed (its go.mod replaces the staging modules with
# local paths), so a throwaway wrapper module requires it and points every staging module at
# its published v0.<minor>.<patch> tag. etcd's server module has the same problem and the same
# fix. Go's module and build caches make a second build cheap; a complete binary set is
# marked by a stamp, so a warm run costs nothing. A lock keeps parallel runs from racing.
# Prints the three bin directories (k8s, etcd, helm), one per line.
set -euo pipefail
K8S="${K8S_VERSION:-1.34.4}"
ETCD="${ETCD_VERSION:-3.6.16}"
HELM="${HELM_VERSION:-3.21.4}"
root="${KGROUPS_CACHE:-$HOME/.cache/kgroups}"
command -v go >/dev/null || { echo "build.sh: Go is required" >&2; exit 2; }
mkdir -p "$root"
exec 9>"$root/.lock-controlplane"
flock 9
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

wrapper() {  # wrapper DIR GO_LINE: a fresh main module to build published commands from
  rm -rf "$1"; mkdir -p "$1"
  printf 'module local/kgroups-tools\n\ngo %s\n' "$2" >"$1/go.mod"
  printf 'package tools\n' >"$1/tools.go"
}

k8s_bin="$root/k8s-v$K8S/bin"
if [ ! -f "$k8s_bin/.complete" ]; then
  echo "build.sh: building kube-apiserver, kube-controller-manager and kubectl v$K8S (first run: ~10-25 min)" >&2
  work="$root/.build-k8s-v$K8S"
  modfile="$(go mod download -json "k8s.io/kubernetes@v$K8S" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  goline="$(sed -n 's/^go \(.*\)/\1/p' "$modfile")"
  wrapper "$work" "$goline"
  sed -n 's/^godebug \(.*\)/godebug \1/p' "$modfile" >>"$work/go.mod"
  {
    echo "require k8s.io/kubernetes v$K8S"
    # every staging module the published go.mod pins at v0.0.0, pointed at its real tag
    sed -n 's/^[[:space:]]*\(k8s\.io\/[^ ]*\) v0\.0\.0$/\1/p' "$modfile" | sort -u |
      while read -r m; do echo "replace $m => $m v0.${K8S#1.}"; done
  } >>"$work/go.mod"
  (cd "$work" && go mod tidy -e >/dev/null 2>&1 || true
   go get k8s.io/kubernetes/cmd/kube-apiserver@"v$K8S" k8s.io/kubernetes/cmd/kube-controller-manager@"v$K8S" \
     k8s.io/kubernetes/cmd/kubectl@"v$K8S" >&2
   minor="${K8S#1.}"; minor="${minor%%.*}"
   ld="-s -w -X k8s.io/component-base/version.gitVersion=v$K8S -X k8s.io/component-base/version.gitMajor=1"
   ld="$ld -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/client-go/pkg/version.gitVersion=v$K8S"
   mkdir -p out
   go build -trimpath -ldflags "$ld" -o out/ k8s.io/kubernetes/cmd/kube-apiserver \
     k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl >&2)
  rm -rf "$k8s_bin"; mkdir -p "$k8s_bin"
  mv "$work"/out/* "$k8s_bin/"
  touch "$k8s_bin/.complete"; rm -rf "$work"
fi

etcd_bin="$root/etcd-v$ETCD/bin"
if [ ! -f "$etcd_bin/.complete" ]; then
  echo "build.sh: building etcd v$ETCD" >&2
  work="$root/.build-etcd-v$ETCD"
  wrapper "$work" 1.25.0
  (cd "$work" && echo "require go.etcd.io/etcd/server/v3 v$ETCD" >>go.mod &&
   go get "go.etcd.io/etcd/server/v3@v$ETCD" >&2 && mkdir -p out &&
   go build -trimpath -ldflags "-s -w" -o out/etcd go.etcd.io/etcd/server/v3 >&2)
  rm -rf "$etcd_bin"; mkdir -p "$etcd_bin"; mv "$work/out/etcd" "$etcd_bin/"
  touch "$etcd_bin/.complete"; rm -rf "$work"
fi

helm_bin="$root/helm-v$HELM/bin"
if [ ! -f "$helm_bin/.complete-2" ]; then
  echo "build.sh: building helm v$HELM" >&2
  rm -rf "$helm_bin"; mkdir -p "$helm_bin"
  # Helm's Makefile stamps the Kubernetes version its client libraries speak; without it
  # `helm template` assumes v1.20 and refuses charts that need anything newer.
  helm_mod="$(go mod download -json "helm.sh/helm/v3@v$HELM" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  kminor="$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$helm_mod" | head -1)"
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld="$ld -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kminor"
  done
  GOBIN="$helm_bin" go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@v$HELM" >&2
  touch "$helm_bin/.complete-2"
fi
printf '%s\n%s\n%s\n' "$k8s_bin" "$etcd_bin" "$helm_bin"
