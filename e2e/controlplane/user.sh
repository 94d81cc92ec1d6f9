#!/usr/bin/env bash
# Mints a client certificate for user NAME (in GROUP, if given) from the control plane's
# client CA and writes DIR/kubeconfig-NAME. With no system:masters group the user can do
# nothing until RBAC grants it: the e2e suite uses this to run the operator with exactly
# the chart's RBAC.   Usage: user.sh DIR NAME [GROUP]
set -euo pipefail
dir="${1:?usage: user.sh DIR NAME [GROUP]}"; name="${2:?user name}"; group="${3:-}"
pki="$dir/pki"; port="$(sed -n 's/.*api=\([0-9]*\).*/\1/p' "$dir/ports")"
subject="/CN=$name"; [ -n "$group" ] && subject="/O=$group/CN=$name"
file="$(echo "$name" | tr ':/' '__')"
openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$file.key" 2>/dev/null
openssl req -new -key "$pki/$file.key" -subj "$subject" -out "$pki/$file.csr" 2>/dev/null
printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >"$pki/cli.ext"
openssl x509 -req -in "$pki/$file.csr" -CA "$pki/client-ca.crt" -CAkey "$pki/client-ca.key" \
  -CAcreateserial -days 7 -extfile "$pki/cli.ext" -out "$pki/$file.crt" 2>/dev/null
b64() { base64 -w0 "$1"; }
cat >"$dir/kubeconfig-$file" <<KC
apiVersion: v1
kind: Config
clusters: [{name: kgroups-e2e, cluster: {server: "https://127.0.0.1:$port", certificate-authority-data: $(b64 "$pki/ca.crt")}}]
users: [{name: $file, user: {client-certificate-data: $(b64 "$pki/$file.crt"), client-key-data: $(b64 "$pki/$file.key")}}]
contexts: [{name: kgroups-e2e, context: {cluster: kgroups-e2e, user: $file, namespace: default}}]
current-context: kgroups-e2e
KC
echo "$dir/kubeconfig-$file"
