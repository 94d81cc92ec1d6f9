#!/usr/bin/env bash
# Starts a real, throwaway Kubernetes control plane on loopback: etcd, kube-apiserver and
# kube-controller-manager (so garbage collection and namespace deletion work), the same
# shape as controller-runtime's envtest plus the controller manager. Binaries come from
# build.sh (built once, cached). Writes into DIR:
#   kubeconfig          admin (system:masters) client-certificate kubeconfig
#   pki/                serving CA, client CA (user.sh mints more users from it), SA keys
#   *.log *.pid ports   one per component, for down.sh and debugging
# Usage: up.sh DIR    (then: KUBECONFIG=DIR/kubeconfig kubectl get ns; down.sh DIR)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: up.sh DIR}"
mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"
{ read -r k8s_bin; read -r etcd_bin; read -r _helm_bin; } < <(bash "$here/build.sh")
timeout_s="${KGROUPS_CONTROLPLANE_TIMEOUT:-90}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd_port=$(free_port); peer_port=$(free_port); api_port=$(free_port)
echo "etcd=$etcd_port api=$api_port" >"$dir/ports"

pki="$dir/pki"; mkdir -p "$pki"
(
  cd "$pki"
  ec() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
  ec ca.key
  openssl req -x509 -new -key ca.key -subj /CN=kgroups-e2e-serving-ca -days 7 -out ca.crt 2>/dev/null
  ec apiserver.key
  openssl req -new -key apiserver.key -subj /CN=localhost -out apiserver.csr 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:10.0.0.1\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >srv.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 7 \
    -extfile srv.ext -out apiserver.crt 2>/dev/null
  ec client-ca.key
  openssl req -x509 -new -key client-ca.key -subj /CN=kgroups-e2e-client-ca -days 7 -out client-ca.crt 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)
"$here/user.sh" "$dir" admin system:masters >/dev/null
cp "$dir/kubeconfig-admin" "$dir/kubeconfig"

"$etcd_bin/etcd" --name cp --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "cp=http://127.0.0.1:$peer_port" --unsafe-no-fsync \
  >"$dir/etcd.log" 2>&1 &
echo $! >"$dir/etcd.pid"

wait_for() {  # wait_for WHAT COMMAND...: poll until COMMAND succeeds or the timeout passes
  local what="$1"; shift
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      echo "up.sh: $what not ready after ${timeout_s}s; last log lines:" >&2
      tail -20 "$dir/$what.log" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}
wait_for etcd curl -sf "http://127.0.0.1:$etcd_port/health"

"$k8s_bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
  --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" --cert-dir="$pki" \
  --client-ca-file="$pki/client-ca.crt" --authorization-mode=RBAC \
  --service-account-issuer="https://127.0.0.1:$api_port/" --service-account-key-file="$pki/sa.pub" \
  --service-account-signing-key-file="$pki/sa.key" --service-cluster-ip-range=10.0.0.0/24 \
  --allow-privileged=true --disable-admission-plugins=ServiceAccount \
  >"$dir/apiserver.log" 2>&1 &
echo $! >"$dir/apiserver.pid"
wait_for apiserver curl -sf --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
  "https://127.0.0.1:$api_port/readyz"

"$k8s_bin/kube-controller-manager" --kubeconfig="$dir/kubeconfig" --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port=0 --service-account-private-key-file="$pki/sa.key" \
  --root-ca-file="$pki/ca.crt" --use-service-account-credentials=false \
  --controllers='*,-nodeipam,-nodelifecycle,-service-lb-controller,-cloud-node-lifecycle-controller' \
  >"$dir/controller-manager.log" 2>&1 &
echo $! >"$dir/controller-manager.pid"
# Ready once its service-account controller has made the default namespace's account.
wait_for controller-manager "$k8s_bin/kubectl" --kubeconfig "$dir/kubeconfig" \
  get serviceaccount default -n default
echo "$dir/kubeconfig"
