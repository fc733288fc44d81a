{{/* Names, labels and the pieces every component's pod shares. */}}

{{- define "pilotwire.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pilotwire.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* pilotwire.component: "<fullname>-<component>", from (dict "root" $ "component" "ads"). */}}
{{- define "pilotwire.component" -}}
{{- printf "%s-%s" (include "pilotwire.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "pilotwire.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "pilotwire.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pilotwire
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component, from (dict "root" $ "component" "ads"). */}}
{{- define "pilotwire.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pilotwire.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "pilotwire.componentLabels" -}}
{{ include "pilotwire.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* pilotwire.image: the image of a component, from (dict "root" $ "image" "ads"). */}}
{{- define "pilotwire.image" -}}
{{- $img := .root.Values.image -}}
{{- printf "%s/pilotwire-%s:%s" (trimSuffix "/" $img.registry) .image (default .root.Chart.AppVersion $img.tag) }}
{{- end }}

{{/* The NATS URL: natsClient.url, as a template. */}}
{{- define "pilotwire.natsURL" -}}
{{- tpl (required "natsClient.url is required" .Values.natsClient.url) . }}
{{- end }}

{{/* The namespace of the multicluster Secrets. */}}
{{- define "pilotwire.clusterSecretsNamespace" -}}
{{- default .Release.Namespace .Values.ingest.clusterSecrets.namespace }}
{{- end }}

{{/*
pilotwire.natsEnv: the NATS connection environment of one user, from
(dict "root" $ "user" "ingest"): URL, prefix, replicas, credentials and TLS
files (mounted by pilotwire.natsVolumeMounts).
*/}}
{{- define "pilotwire.natsEnv" -}}
{{- $c := .root.Values.natsClient -}}
{{- $a := index $c.auth .user -}}
- name: PILOTWIRE_NATS_URL
  value: {{ include "pilotwire.natsURL" .root | quote }}
- name: PILOTWIRE_PREFIX
  value: {{ $c.prefix | quote }}
{{- if not (has $c.auth.mode (list "none" "creds" "nkey" "password")) }}
{{- fail (printf "natsClient.auth.mode %q: want none, creds, nkey or password" $c.auth.mode) }}
{{- end }}
{{- if ne $c.auth.mode "none" }}
{{- if not $a.secretName }}
{{- fail (printf "natsClient.auth.%s.secretName is required with natsClient.auth.mode %s" .user $c.auth.mode) }}
{{- end }}
{{- if eq $c.auth.mode "creds" }}
- name: PILOTWIRE_NATS_CREDS
  value: /etc/pilotwire/nats/auth/{{ $a.key }}
{{- else if eq $c.auth.mode "nkey" }}
- name: PILOTWIRE_NATS_NKEY
  value: /etc/pilotwire/nats/auth/{{ $a.key }}
{{- else if eq $c.auth.mode "password" }}
- name: PILOTWIRE_NATS_USER
  value: {{ $a.user | quote }}
- name: PILOTWIRE_NATS_PASSWORD_FILE
  value: /etc/pilotwire/nats/auth/{{ $a.key }}
{{- end }}
{{- if and $a.user (ne $c.auth.mode "password") }}
- name: PILOTWIRE_NATS_INBOX_PREFIX
  value: {{ printf "_INBOX.%s" $a.user | quote }}
{{- end }}
{{- end }}
{{- if $c.tls.caSecret.name }}
- name: PILOTWIRE_NATS_CA
  value: /etc/pilotwire/nats/ca/{{ $c.tls.caSecret.key }}
{{- end }}
{{- if $c.tls.clientCertSecret }}
- name: PILOTWIRE_NATS_CERT
  value: /etc/pilotwire/nats/client/tls.crt
- name: PILOTWIRE_NATS_KEY
  value: /etc/pilotwire/nats/client/tls.key
{{- end }}
{{- end }}

{{- define "pilotwire.natsVolumeMounts" -}}
{{- $c := .root.Values.natsClient -}}
{{- if ne $c.auth.mode "none" }}
- name: nats-auth
  mountPath: /etc/pilotwire/nats/auth
  readOnly: true
{{- end }}
{{- if $c.tls.caSecret.name }}
- name: nats-ca
  mountPath: /etc/pilotwire/nats/ca
  readOnly: true
{{- end }}
{{- if $c.tls.clientCertSecret }}
- name: nats-client
  mountPath: /etc/pilotwire/nats/client
  readOnly: true
{{- end }}
{{- end }}

{{- define "pilotwire.natsVolumes" -}}
{{- $c := .root.Values.natsClient -}}
{{- $a := index $c.auth .user -}}
{{- if ne $c.auth.mode "none" }}
- name: nats-auth
  secret:
    secretName: {{ $a.secretName }}
    defaultMode: 0440
    items:
      - key: {{ $a.key }}
        path: {{ $a.key }}
{{- end }}
{{- if $c.tls.caSecret.name }}
- name: nats-ca
  secret:
    secretName: {{ $c.tls.caSecret.name }}
    defaultMode: 0444
    items:
      - key: {{ $c.tls.caSecret.key }}
        path: {{ $c.tls.caSecret.key }}
{{- end }}
{{- if $c.tls.clientCertSecret }}
- name: nats-client
  secret:
    secretName: {{ $c.tls.clientCertSecret }}
    defaultMode: 0440
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
{{- end }}

{{/* Pod annotations: Prometheus scraping plus the component's own. */}}
{{- define "pilotwire.podAnnotations" -}}
{{- $v := index .root.Values .component -}}
{{- if .root.Values.metrics.podAnnotations }}
prometheus.io/scrape: "true"
prometheus.io/port: {{ $v.httpPort | quote }}
prometheus.io/path: /metrics
{{- end }}
sidecar.istio.io/inject: "false"
{{- with $v.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Scheduling: spread a component's pods over nodes and zones, plus its own settings. */}}
{{- define "pilotwire.scheduling" -}}
{{- $v := index .root.Values .component -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "pilotwire.selectorLabels" . | trim | nindent 8 }}
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "pilotwire.selectorLabels" . | trim | nindent 8 }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .root.Values.image.pullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- end }}

{{/* Probes on the component's http port: liveness /healthz, readiness /readyz. */}}
{{- define "pilotwire.probes" -}}
startupProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 2
  failureThreshold: 30
livenessProbe:
  httpGet: {path: /healthz, port: http}
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /readyz, port: http}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end }}

{{/* The common environment of a service: its http address and component env. */}}
{{- define "pilotwire.serviceEnv" -}}
{{- $v := index .root.Values .component -}}
- name: PILOTWIRE_HTTP_ADDR
  value: {{ printf ":%v" $v.httpPort | quote }}
- name: PILOTWIRE_REPLICAS
  value: {{ .root.Values.natsClient.streamReplicas | quote }}
{{- with $v.env }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The PodDisruptionBudget of a component. */}}
{{- define "pilotwire.pdb" -}}
{{- $v := index .root.Values .component -}}
{{- if $v.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "pilotwire.component" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "pilotwire.componentLabels" . | trim | nindent 4 }}
spec:
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "pilotwire.selectorLabels" . | trim | nindent 6 }}
{{- end }}
{{- end }}
