{{/* Chart name, or nameOverride. */}}
{{- define "shardlimiter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Resource name prefix: fullnameOverride, else the release name when it already
contains the chart name, else "<release>-<chart>". With the release name
"shardlimiter" the names are those of k8s/base (shardlimiter,
shardlimiter-peers, ...), which the docs use. The longest suffix appended is
"-metrics-client" (15), so the prefix stays within 48 characters.
*/}}
{{- define "shardlimiter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- $name := include "shardlimiter.name" . }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 48 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 48 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "shardlimiter.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object. */}}
{{- define "shardlimiter.labels" -}}
helm.sh/chart: {{ include "shardlimiter.chart" . }}
{{ include "shardlimiter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: shardlimiter
{{- end }}

{{/* The workload's selector. */}}
{{- define "shardlimiter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shardlimiter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Cluster membership: the one label the Services, the PodDisruptionBudget and
the NetworkPolicy select on, so that limiter sidecars in application pods
match as well as the chart's own pods.
*/}}
{{- define "shardlimiter.clusterSelector" -}}
shardlimiter/cluster: {{ .Values.clusterLabel | quote }}
{{- end }}

{{- define "shardlimiter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "shardlimiter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "shardlimiter.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "shardlimiter.rulesConfigMap" -}}
{{- default (printf "%s-rules" (include "shardlimiter.fullname" .)) .Values.rules.existingConfigMap }}
{{- end }}

{{- define "shardlimiter.gossipKeySecret" -}}
{{- default (printf "%s-gossip-key" (include "shardlimiter.fullname" .)) .Values.gossipKey.existingSecret }}
{{- end }}

{{- define "shardlimiter.peerTLSSecret" -}}
{{- default (printf "%s-peer-tls" (include "shardlimiter.fullname" .)) .Values.peerTLS.existingSecret }}
{{- end }}

{{- define "shardlimiter.clientTLSSecret" -}}
{{- default (printf "%s-tls" (include "shardlimiter.fullname" .)) .Values.clientTLS.existingSecret }}
{{- end }}

{{/* Certificates the chart asks cert-manager for. */}}
{{- define "shardlimiter.certManagerNeeded" -}}
{{- if or (and .Values.peerTLS.enabled (not .Values.peerTLS.existingSecret)) (and .Values.clientTLS.enabled (not .Values.clientTLS.existingSecret)) }}true{{ end }}
{{- end }}

{{/* The pod's grace period: the whole shutdown timeline (values.yaml). */}}
{{- define "shardlimiter.terminationGracePeriodSeconds" -}}
{{- with .Values.shutdown }}
{{- add .preStopSleepSeconds .handoffTimeoutSeconds .shutdownGraceSeconds .marginSeconds }}
{{- end }}
{{- end }}

{{/* Empty: the field is left out (Kubernetes' default, Cluster). */}}
{{- define "shardlimiter.internalTrafficPolicy" -}}
{{- if .Values.service.internalTrafficPolicy }}
{{- .Values.service.internalTrafficPolicy }}
{{- else if eq .Values.mode "daemonset" }}Local
{{- end }}
{{- end }}

{{/*
The config ConfigMap's data. The listen addresses follow .Values.ports,
whose numbers the container ports, probes, Services and NetworkPolicy use
by name.
*/}}
{{- define "shardlimiter.configData" -}}
SHARDLIMITER_HTTP_ADDR: ":{{ .Values.ports.http }}"
SHARDLIMITER_GRPC_ADDR: ":{{ .Values.ports.grpc }}"
SHARDLIMITER_PEER_ADDR: ":{{ .Values.ports.peer }}"
SHARDLIMITER_GOSSIP_ADDR: ":{{ .Values.ports.gossip }}"
SHARDLIMITER_MAX_KEYS: {{ .Values.config.maxKeys | int64 | quote }}
SHARDLIMITER_LOG_LEVEL: {{ .Values.config.logLevel | quote }}
SHARDLIMITER_LOG_FORMAT: {{ .Values.config.logFormat | quote }}
SHARDLIMITER_FAIL_POLICY: {{ .Values.config.failPolicy | quote }}
SHARDLIMITER_SHUTDOWN_GRACE: "{{ .Values.shutdown.shutdownGraceSeconds }}s"
SHARDLIMITER_HANDOFF_TIMEOUT: "{{ .Values.shutdown.handoffTimeoutSeconds }}s"
SHARDLIMITER_REPLICATION_INTERVAL: {{ .Values.config.replicationInterval | quote }}
{{- if .Values.rules.enabled }}
SHARDLIMITER_CONFIG: /etc/shardlimiter/rules
{{- end }}
{{- range $k, $v := .Values.config.extraEnv }}
{{ $k }}: {{ $v | quote }}
{{- end }}
{{- end }}

{{/* The probes' port: the plain health listener when the API needs TLS. */}}
{{- define "shardlimiter.probePort" -}}
{{- if .Values.clientTLS.enabled }}health{{ else }}http{{ end }}
{{- end }}

{{- define "shardlimiter.podAnnotations" -}}
checksum/config: {{ include "shardlimiter.configData" . | sha256sum }}
# One scrape port per pod: the limiter's http port.
prometheus.io/scrape: "true"
prometheus.io/port: {{ .Values.ports.http | quote }}
prometheus.io/path: /metrics
{{- if .Values.clientTLS.enabled }}
# /metrics is HTTPS now{{ if .Values.clientTLS.requireClientCert }} and asks for a client certificate{{ end }}.
prometheus.io/scheme: https
{{- end }}
{{- with .Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The pod's volumes: the rules and, when enabled, the key and certificate
Secrets. Each is mounted as a whole directory, never with subPath: a subPath
mount never sees an update, and the limiter reloads these files in place.
*/}}
{{- define "shardlimiter.volumes" -}}
{{- if .Values.rules.enabled }}
- name: rules
  configMap:
    name: {{ include "shardlimiter.rulesConfigMap" . }}
{{- end }}
{{- if .Values.gossipKey.enabled }}
- name: gossip-key
  secret:
    secretName: {{ include "shardlimiter.gossipKeySecret" . }}
{{- end }}
{{- if .Values.peerTLS.enabled }}
- name: peer-tls
  secret:
    secretName: {{ include "shardlimiter.peerTLSSecret" . }}
{{- end }}
{{- if .Values.clientTLS.enabled }}
- name: tls
  secret:
    secretName: {{ include "shardlimiter.clientTLSSecret" . }}
{{- end }}
{{- end }}

{{/* The limiter container. */}}
{{- define "shardlimiter.container" -}}
name: shardlimiter
image: {{ include "shardlimiter.image" . }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- if or .Values.rules.enabled .Values.gossipKey.enabled .Values.peerTLS.enabled .Values.clientTLS.enabled }}
volumeMounts:
  {{- if .Values.rules.enabled }}
  - name: rules
    mountPath: /etc/shardlimiter/rules
    readOnly: true
  {{- end }}
  {{- if .Values.gossipKey.enabled }}
  - name: gossip-key
    mountPath: /etc/shardlimiter/gossip
    readOnly: true
  {{- end }}
  {{- if .Values.peerTLS.enabled }}
  - name: peer-tls
    mountPath: /etc/shardlimiter/peer-tls
    readOnly: true
  {{- end }}
  {{- if .Values.clientTLS.enabled }}
  - name: tls
    mountPath: /etc/shardlimiter/tls
    readOnly: true
  {{- end }}
{{- end }}
envFrom:
  - configMapRef:
      name: {{ include "shardlimiter.fullname" . }}-config
env:
  # Used only to build SHARDLIMITER_JOIN below.
  - name: POD_NAMESPACE
    valueFrom:
      fieldRef:
        fieldPath: metadata.namespace
  - name: SHARDLIMITER_NODE_NAME
    valueFrom:
      fieldRef:
        fieldPath: metadata.name
  - name: SHARDLIMITER_ADVERTISE_ADDR
    valueFrom:
      fieldRef:
        fieldPath: status.podIP
  # The headless Service: the binary resolves it and joins every address.
  - name: SHARDLIMITER_JOIN
    value: {{ include "shardlimiter.fullname" . }}-peers.$(POD_NAMESPACE).svc.{{ .Values.clusterDomain }}:{{ .Values.ports.gossip }}
  # The memory budget is the container's memory limit: the binary sets the
  # Go runtime's soft limit to 90% of it and lets its tables hold half.
  - name: SHARDLIMITER_MAX_MEMORY
    valueFrom:
      resourceFieldRef:
        containerName: shardlimiter
        resource: limits.memory
  {{- if .Values.gossipKey.enabled }}
  - name: SHARDLIMITER_GOSSIP_KEY_FILE
    value: /etc/shardlimiter/gossip/keys
  {{- end }}
  {{- if .Values.peerTLS.enabled }}
  - name: SHARDLIMITER_PEER_TLS_CERT_FILE
    value: /etc/shardlimiter/peer-tls/tls.crt
  - name: SHARDLIMITER_PEER_TLS_KEY_FILE
    value: /etc/shardlimiter/peer-tls/tls.key
  - name: SHARDLIMITER_PEER_TLS_CA_FILE
    value: /etc/shardlimiter/peer-tls/ca.crt
  {{- end }}
  {{- if .Values.clientTLS.enabled }}
  - name: SHARDLIMITER_TLS_CERT_FILE
    value: /etc/shardlimiter/tls/tls.crt
  - name: SHARDLIMITER_TLS_KEY_FILE
    value: /etc/shardlimiter/tls/tls.key
  {{- if .Values.clientTLS.requireClientCert }}
  - name: SHARDLIMITER_TLS_CLIENT_CA_FILE
    value: /etc/shardlimiter/tls/ca.crt
  {{- end }}
  # A plain listener for the kubelet's probes (/healthz and /readyz only).
  - name: SHARDLIMITER_HEALTH_ADDR
    value: ":{{ .Values.ports.health }}"
  {{- end }}
ports:
  - name: http
    containerPort: {{ .Values.ports.http }}
    protocol: TCP
  - name: grpc
    containerPort: {{ .Values.ports.grpc }}
    protocol: TCP
  - name: peer
    containerPort: {{ .Values.ports.peer }}
    protocol: TCP
  - name: gossip-tcp
    containerPort: {{ .Values.ports.gossip }}
    protocol: TCP
  - name: gossip-udp
    containerPort: {{ .Values.ports.gossip }}
    protocol: UDP
  {{- if .Values.clientTLS.enabled }}
  - name: health
    containerPort: {{ .Values.ports.health }}
    protocol: TCP
  {{- end }}
# Alive as soon as the process serves HTTP; gates the two below.
startupProbe:
  httpGet:
    path: /healthz
    port: {{ include "shardlimiter.probePort" . }}
  {{- toYaml .Values.probes.startup | nindent 2 }}
# Ready once joined and owning its ring slice; 503 while leaving.
readinessProbe:
  httpGet:
    path: /readyz
    port: {{ include "shardlimiter.probePort" . }}
  {{- toYaml .Values.probes.readiness | nindent 2 }}
livenessProbe:
  httpGet:
    path: /healthz
    port: {{ include "shardlimiter.probePort" . }}
  {{- toYaml .Values.probes.liveness | nindent 2 }}
lifecycle:
  preStop:
    # The image has no shell: the kubelet sleeps.
    sleep:
      seconds: {{ .Values.shutdown.preStopSleepSeconds }}
resources:
  {{- toYaml .Values.resources | nindent 2 }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop:
      - ALL
  seccompProfile:
    type: RuntimeDefault
{{- end }}
