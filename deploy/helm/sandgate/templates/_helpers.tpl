{{/* Names and labels. */}}

{{- define "sandgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sandgate.fullname" -}}
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

{{- define "sandgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sandgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sandgate.labels" -}}
helm.sh/chart: {{ include "sandgate.chart" . }}
{{ include "sandgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sandgate
{{- end }}

{{- define "sandgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sandgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sandgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
sandgate.config: the configuration file the pods read, as YAML. It is .Values.config with
server.addr set to the container port, after the checks that keep secrets out of values and
the worker tier consistent with the broker flavor.
*/}}
{{- define "sandgate.config" -}}
{{- $cfg := deepCopy (.Values.config | default dict) }}
{{- $db := get $cfg "database" | default dict }}
{{- if get $db "url" }}
{{- fail "config.database.url must not be in values: put the URL in the Secret named by database.existingSecret (key database.secretKey); it reaches the pods as SANDGATE_DATABASE__URL" }}
{{- end }}
{{- $queue := include "sandgate.queue" . | fromYaml }}
{{- if dig "kafka" "sasl" "password" "" $queue }}
{{- fail "config.sandbox.broker.queue.kafka.sasl.password must not be in values: give it through extraEnv as SANDGATE_SANDBOX__BROKER__QUEUE__KAFKA__SASL__PASSWORD from a Secret" }}
{{- end }}
{{- $server := get $cfg "server" | default dict }}
{{- $_ := set $server "addr" ":8080" }}
{{- $_ := set $cfg "server" $server }}
{{- toYaml $cfg }}
{{- end }}

{{/* sandgate.flavor: the broker flavor of the configuration (the gateway's default: thread). */}}
{{- define "sandgate.flavor" -}}
{{- dig "sandbox" "broker" "flavor" "thread" (.Values.config | default dict) }}
{{- end }}

{{/* sandgate.queue: the broker's queue block with its type defaulted to postgres, as YAML. */}}
{{- define "sandgate.queue" -}}
{{- $q := deepCopy (dig "sandbox" "broker" "queue" dict (.Values.config | default dict)) }}
{{- if not (get $q "type") }}{{ $_ := set $q "type" "postgres" }}{{ end }}
{{- toYaml $q }}
{{- end }}

{{/*
sandgate.kubeProfiles: the kubernetes profiles of the configuration, as YAML: for each
profile name, its namespace (kubernetes.namespace, default "default"; the namespace part of
attach_to for attached profiles), egress (policy.network_egress, default allow), labels
(kubernetes.labels), podIP (sandboxd.transport pod_ip), agentSandbox, attached and user
(identity.mode user). The single-backend shorthand (sandbox.type: kubernetes) is the profile
named by sandbox.default_profile.
*/}}
{{- define "sandgate.kubeProfiles" -}}
{{- $sb := dig "sandbox" dict (.Values.config | default dict) }}
{{- $profiles := get $sb "profiles" | default dict }}
{{- if and (not $profiles) (eq (get $sb "type" | default "") "kubernetes") }}
{{- $profiles = dict (get $sb "default_profile" | default "default") (dict "type" "kubernetes" "kubernetes" (get $sb "kubernetes" | default dict) "policy" (get $sb "policy" | default dict) "identity" (get $sb "identity" | default dict)) }}
{{- end }}
{{- $out := dict }}
{{- range $name, $p := $profiles }}
{{- if eq (get $p "type" | default "") "kubernetes" }}
{{- $k := get $p "kubernetes" | default dict }}
{{- $ns := get $k "namespace" | default "default" }}
{{- $attach := get $k "attach_to" | default "" }}
{{- if contains "/" $attach }}{{ $ns = first (splitList "/" $attach) }}{{ end }}
{{- $_ := set $out $name (dict
      "namespace" $ns
      "egress" (dig "policy" "network_egress" "allow" $p)
      "labels" (get $k "labels" | default dict)
      "podIP" (eq (dig "sandboxd" "transport" "exec" $k) "pod_ip")
      "agentSandbox" (not (empty (get $k "agent_sandbox")))
      "attached" (not (empty $attach))
      "user" (eq (dig "identity" "mode" "agent" $p) "user")) }}
{{- end }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* sandgate.sandboxNamespaces: the sorted sandbox namespaces, as a YAML list. */}}
{{- define "sandgate.sandboxNamespaces" -}}
{{- $set := dict }}
{{- range $name, $p := (include "sandgate.kubeProfiles" . | fromYaml) }}
{{- $_ := set $set $p.namespace true }}
{{- end }}
{{- range .Values.rbac.sandboxNamespaces }}
{{- $_ := set $set . true }}
{{- end }}
{{- toYaml (keys $set | sortAlpha) }}
{{- end }}

{{/* sandgate.podEnv: the environment of the gateway and worker containers. */}}
{{- define "sandgate.podEnv" -}}
- name: SANDGATE_CONFIG
  value: /etc/sandgate/sandgate.yaml
- name: SANDGATE_DATABASE__URL
  valueFrom:
    secretKeyRef:
      name: {{ required "database.existingSecret names the Secret with the database URL" .Values.database.existingSecret }}
      key: {{ .Values.database.secretKey }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* sandgate.podVolumes and sandgate.podVolumeMounts: the configuration, /tmp, the completion
spool, and extras. */}}
{{- define "sandgate.podVolumes" -}}
- name: config
  configMap:
    name: {{ include "sandgate.fullname" . }}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
- name: spool
{{- if .Values.spool.volume }}
  {{- toYaml .Values.spool.volume | nindent 2 }}
{{- else }}
  emptyDir:
    sizeLimit: {{ .Values.spool.sizeLimit }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sandgate.podVolumeMounts" -}}
- name: config
  mountPath: /etc/sandgate
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: spool
  mountPath: /var/lib/sandgate/spool
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* sandgate.podSpec: what the gateway and worker pods share (dict "ctx" . "component" name). */}}
{{- define "sandgate.podSpec" -}}
{{- $ := .ctx -}}
serviceAccountName: {{ include "sandgate.serviceAccountName" $ }}
automountServiceAccountToken: {{ $.Values.serviceAccount.automountServiceAccountToken }}
enableServiceLinks: false
{{- with $.Values.imagePullSecrets }}
imagePullSecrets:
  {{- range . }}
  - name: {{ . }}
  {{- end }}
{{- end }}
{{- with $.Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
securityContext:
  {{- toYaml $.Values.podSecurityContext | nindent 2 }}
{{- with $.Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $.Values.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  {{- include "sandgate.podVolumes" $ | nindent 2 }}
{{- end }}
