{{/* Names and labels, as `helm create` makes them. */}}
{{- define "txnwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "txnwatch.fullname" -}}
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

{{- define "txnwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "txnwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "txnwatch.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "txnwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: txnwatch
{{- end }}

{{- define "txnwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "txnwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "txnwatch.scheme" -}}
{{- if .Values.web.tls.enabled }}https{{ else }}http{{ end }}
{{- end }}

{{/* Whether a web config file is mounted. */}}
{{- define "txnwatch.webConfig" -}}
{{- if or .Values.web.tls.enabled .Values.web.basicAuthUsers .Values.web.existingSecret }}true{{ end }}
{{- end }}

{{- define "txnwatch.webConfigSecret" -}}
{{- default (printf "%s-web" (include "txnwatch.fullname" .)) .Values.web.existingSecret }}
{{- end }}

{{/*
Never a secret in the ConfigMap: a client property whose name says secret (password,
secret, token, sasl.jaas, a key) must be a ${env:...} or ${file:...} reference.
*/}}
{{- define "txnwatch.checkSecrets" -}}
{{- range $i, $c := .Values.config.clusters }}
{{- range $k, $v := ($c.client | default dict) }}
{{- if regexMatch "(?i)(password|secret|token|sasl\\.jaas|\\.key$)" $k }}
{{- if not (regexMatch "^\\$\\{(env|file):[^}]+\\}$" (toString $v)) }}
{{- fail (printf "config.clusters[%d].client.%s: a secret in the ConfigMap; write ${env:NAME} and give NAME in secretEnv (a secretKeyRef)" $i $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- range $k, $v := .Values.config }}
{{- if eq $k "http" }}
{{- fail "config.http: set by the chart (service.port, web, ingestToken); leave it out of config" }}
{{- end }}
{{- end }}
{{- end }}

{{/* The exporter's configuration file. */}}
{{- define "txnwatch.configFile" -}}
{{- $http := dict "host" "0.0.0.0" "port" (int .Values.service.port) }}
{{- if include "txnwatch.webConfig" . }}
{{- $_ := set $http "web_config_file" "/etc/txnwatch/web-config/web-config.yml" }}
{{- end }}
{{- if .Values.ingestToken.secretName }}
{{- $_ := set $http "ingest_token" "${env:TXNWATCH_INGEST_TOKEN}" }}
{{- end }}
{{- toYaml (merge (dict "http" $http) (omit .Values.config "http")) }}
{{- end }}

{{/* Probes: HTTP(S) GETs; where the web config requires client certificates (a kubelet has
none) `txnwatch healthcheck`, which then checks the port. */}}
{{- define "txnwatch.probe" -}}
{{- if and .root.Values.web.tls.enabled (eq .root.Values.web.tls.clientAuthType "RequireAndVerifyClientCert") }}
exec:
  command: ["txnwatch", "healthcheck"]
{{- else }}
httpGet:
  path: {{ .path }}
  port: http-metrics
  scheme: {{ include "txnwatch.scheme" .root | upper }}
{{- end }}
{{- end }}
