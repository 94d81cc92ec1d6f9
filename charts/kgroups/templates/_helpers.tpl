{{/* Names and labels shared by every template. */}}
{{- define "kgroups.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kgroups.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kgroups.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "kgroups.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "kgroups.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (printf "%s-operator" (include "kgroups.fullname" .)) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The coordinator Service's name in the cluster: every listener advertises it. */}}
{{/* "true" when the coordinator keeps its state in PostgreSQL: replicas; else empty. */}}
{{- define "kgroups.replicated" -}}
{{- $db := .Values.coordinator.database | default dict -}}
{{- if or $db.url ($db.urlSecret | default dict).name }}true{{ end -}}
{{- end -}}

{{- define "kgroups.coordinatorHost" -}}
{{ include "kgroups.fullname" . }}-coordinator.{{ .Release.Namespace }}.svc
{{- end -}}

{{/*
`helm upgrade --reuse-values` from an older chart (before listeners, or OAUTHBEARER) keeps
that chart's defaults, which lack the security keys: say so, rather than fail on a nil value.
*/}}
{{- define "kgroups.checkValues" -}}
{{- range $key := list "listeners" "tls" "sasl" "authorization" "serviceAccount" -}}
{{- if not (get $.Values.coordinator $key) -}}
{{- fail (printf "coordinator.%s is missing from the values: upgrading with --reuse-values from a chart without it? Use --reset-then-reuse-values, or pass your values file" $key) -}}
{{- end -}}
{{- end -}}
{{- if not .Values.operator.coordinatorSecurity -}}
{{- fail "operator.coordinatorSecurity is missing from the values: upgrading with --reuse-values from a chart without it? Use --reset-then-reuse-values, or pass your values file" -}}
{{- end -}}
{{- if and (has "OAUTHBEARER" (.Values.coordinator.sasl.mechanisms | default list)) (not .Values.coordinator.sasl.oauthbearer) -}}
{{- fail "coordinator.sasl.oauthbearer is missing from the values: upgrading with --reuse-values from a chart without it? Use --reset-then-reuse-values, or pass your values file" -}}
{{- end -}}
{{- if and (eq .Values.operator.coordinatorSecurity.sasl.mechanism "OAUTHBEARER") (not .Values.operator.coordinatorSecurity.sasl.tokenExpirationSeconds) -}}
{{- fail "operator.coordinatorSecurity.sasl.tokenExpirationSeconds is missing from the values: upgrading with --reuse-values from a chart without it? Use --reset-then-reuse-values, or pass your values file" -}}
{{- end -}}
{{- end -}}

{{/*
The listeners as JSON, [{protocol, port, name}], name being the port's name in the pod and
the Services (at most 15 characters). coordinator.port, the chart's key from before
listeners, still sets the PLAINTEXT listener's port. The coordinator refuses two listeners
of one protocol, so the chart says so first.
*/}}
{{- define "kgroups.listeners" -}}
{{- include "kgroups.checkValues" . -}}
{{- $names := dict "PLAINTEXT" "kafka" "SSL" "kafka-ssl" "SASL_PLAINTEXT" "kafka-sasl" "SASL_SSL" "kafka-sasl-ssl" -}}
{{- $oldPort := .Values.coordinator.port -}}
{{- $protocols := dict -}}
{{- $ports := dict (toString .Values.coordinator.metricsPort) "coordinator.metricsPort" -}}
{{- $out := list -}}
{{- range .Values.coordinator.listeners -}}
{{- $port := .port | int -}}
{{- if and $oldPort (eq .protocol "PLAINTEXT") -}}{{- $port = $oldPort | int -}}{{- end -}}
{{- if hasKey $protocols .protocol -}}
{{- fail (printf "coordinator.listeners: two %s listeners; the coordinator takes one per protocol" .protocol) -}}
{{- end -}}
{{- if hasKey $ports (toString $port) -}}
{{- fail (printf "coordinator.listeners: port %d of the %s listener is taken by %s" $port .protocol (get $ports (toString $port))) -}}
{{- end -}}
{{- $_ := set $protocols .protocol true -}}
{{- $_ := set $ports (toString $port) (printf "the %s listener" .protocol) -}}
{{- $out = append $out (dict "protocol" .protocol "port" $port "name" (get $names .protocol)) -}}
{{- end -}}
{{- if and $oldPort (not (hasKey $protocols "PLAINTEXT")) -}}
{{- fail "coordinator.port is the PLAINTEXT listener's port, and coordinator.listeners has no PLAINTEXT listener: give every port in coordinator.listeners instead" -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The listener the operator connects to: the one of its securityProtocol, as JSON. */}}
{{- define "kgroups.operatorListener" -}}
{{- $protocol := .Values.operator.coordinatorSecurity.securityProtocol -}}
{{- $found := dict -}}
{{- range (include "kgroups.listeners" . | fromJsonArray) -}}
{{- if eq .protocol $protocol }}{{ $found = . }}{{ end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "operator.coordinatorSecurity.securityProtocol is %s, and coordinator.listeners has no %s listener for the operator to connect to" $protocol $protocol) -}}
{{- end -}}
{{- toJson $found -}}
{{- end -}}

{{/* Where the operator connects: the coordinator Service, its listener's port. */}}
{{- define "kgroups.coordinatorAddress" -}}
{{ include "kgroups.coordinatorHost" . }}:{{ (include "kgroups.operatorListener" . | fromJson).port | int }}
{{- end -}}

{{/* The kubernetes.io/tls Secret the coordinator serves TLS from. */}}
{{- define "kgroups.tlsSecretName" -}}
{{- .Values.coordinator.tls.secretName | default (printf "%s-coordinator-tls" (include "kgroups.fullname" .)) -}}
{{- end -}}

{{/* "true" when the coordinator offers OAUTHBEARER (ServiceAccount tokens); else empty. */}}
{{- define "kgroups.oauthbearer" -}}
{{- if has "OAUTHBEARER" .Values.coordinator.sasl.mechanisms }}true{{ end -}}
{{- end -}}

{{/* "true" when it offers PLAIN or SCRAM, which check passwords: the users file. */}}
{{- define "kgroups.saslPasswords" -}}
{{- if without (.Values.coordinator.sasl.mechanisms | default list) "OAUTHBEARER" }}true{{ end -}}
{{- end -}}

{{/*
"true" when the coordinator asks the API server: RBAC authorization (SubjectAccessReviews)
or OAUTHBEARER (the issuer's keys, TokenReviews). Only then does it get a token.
*/}}
{{- define "kgroups.coordinatorUsesApiServer" -}}
{{- if or (eq .Values.coordinator.authorization.mode "rbac") (include "kgroups.oauthbearer" .) }}true{{ end -}}
{{- end -}}

{{/* The coordinator's ServiceAccount: it has one only when it asks the API server. */}}
{{- define "kgroups.coordinatorServiceAccountName" -}}
{{- if .Values.coordinator.serviceAccount.create -}}
{{- .Values.coordinator.serviceAccount.name | default (printf "%s-coordinator" (include "kgroups.fullname" .)) -}}
{{- else -}}
{{- .Values.coordinator.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* The operator's SASL user: given, or its ServiceAccount as RBAC names it. */}}
{{- define "kgroups.operatorSaslUsername" -}}
{{- .Values.operator.coordinatorSecurity.sasl.username | default (printf "system:serviceaccount:%s:%s" .Release.Namespace (include "kgroups.serviceAccountName" .)) -}}
{{- end -}}

{{/*
Security values that contradict each other fail here, naming the value to change, rather
than in a coordinator or operator that will not start (the schema checks each value alone).
*/}}
{{- define "kgroups.checkSecurity" -}}
{{- $c := .Values.coordinator -}}
{{- $protocols := list -}}
{{- range (include "kgroups.listeners" . | fromJsonArray) }}{{ $protocols = append $protocols .protocol }}{{ end -}}
{{- if and (or (has "SSL" $protocols) (has "SASL_SSL" $protocols)) (not $c.tls.enabled) -}}
{{- fail "coordinator.listeners has an SSL or SASL_SSL listener: set coordinator.tls.enabled, with coordinator.tls.secretName or coordinator.tls.certManager" -}}
{{- end -}}
{{- if and $c.tls.enabled (not $c.tls.secretName) (not $c.tls.certManager.enabled) -}}
{{- fail "coordinator.tls.enabled: set coordinator.tls.secretName (a kubernetes.io/tls Secret) or coordinator.tls.certManager.enabled" -}}
{{- end -}}
{{- if and $c.tls.enabled $c.tls.certManager.enabled (not $c.tls.certManager.issuerRef.name) -}}
{{- fail "coordinator.tls.certManager.enabled: set coordinator.tls.certManager.issuerRef.name" -}}
{{- end -}}
{{- if and (or (has "SASL_PLAINTEXT" $protocols) (has "SASL_SSL" $protocols)) (not $c.sasl.mechanisms) -}}
{{- fail "coordinator.listeners has a SASL listener: set coordinator.sasl.mechanisms" -}}
{{- end -}}
{{- if and (include "kgroups.saslPasswords" .) (not $c.sasl.credentialsSecret.name) -}}
{{- fail "coordinator.sasl.mechanisms: PLAIN and SCRAM need coordinator.sasl.credentialsSecret.name (a Secret with the users file)" -}}
{{- end -}}
{{- if and (include "kgroups.oauthbearer" .) (not (compact ($c.sasl.oauthbearer.audiences | default list))) -}}
{{- fail "coordinator.sasl.mechanisms has OAUTHBEARER: set coordinator.sasl.oauthbearer.audiences (what clients' tokens are for)" -}}
{{- end -}}
{{- if and (eq $c.authorization.mode "acl") (not $c.authorization.acl.configMap.name) -}}
{{- fail "coordinator.authorization.mode acl: set coordinator.authorization.acl.configMap.name" -}}
{{- end -}}
{{- $op := .Values.operator.coordinatorSecurity -}}
{{- if hasPrefix "SASL_" $op.securityProtocol -}}
{{- if not (has $op.sasl.mechanism $c.sasl.mechanisms) -}}
{{- fail (printf "operator.coordinatorSecurity.sasl.mechanism %q is not in coordinator.sasl.mechanisms" $op.sasl.mechanism) -}}
{{- end -}}
{{- if and (ne $op.sasl.mechanism "OAUTHBEARER") (not $op.sasl.passwordSecret.name) -}}
{{- fail (printf "operator.coordinatorSecurity.securityProtocol %s: set operator.coordinatorSecurity.sasl.passwordSecret.name" $op.securityProtocol) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kgroups.watchNamespaces" -}}
{{- if .Values.operator.watchNamespaces -}}
{{- toJson .Values.operator.watchNamespaces -}}
{{- else -}}
{{- toJson (list .Release.Namespace) -}}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security Standard, for every container. */}}
{{- define "kgroups.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "kgroups.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}
