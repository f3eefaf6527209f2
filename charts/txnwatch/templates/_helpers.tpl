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
{{- if and (regexMatch "(?i)(password|secret|token|credential|sasl\\.jaas|\\.key$|key\\.pem)" $k) (not (regexMatch "(?i)\\.(url|location|method|type)$" $k)) }}
{{- if not (regexMatch "^\\$\\{(env|file):[^}]+\\}$" (toString $v)) }}
{{- fail (printf "config.clusters[%d].client.%s: a secret in the ConfigMap; write ${env:NAME} and give NAME in secretEnv (a secretKeyRef)" $i $k) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $http := .Values.config.http | default dict }}
{{- range $k, $v := dict "ingest_token" $http.ingest_token "auth.bearer_token" ($http.auth | default dict).bearer_token }}
{{- if and $v (not (regexMatch "^\\$\\{(env|file):[^}]+\\}$" (toString $v))) }}
{{- fail (printf "config.http.%s: a secret in the ConfigMap; write ${env:NAME} and give NAME in secretEnv (a secretKeyRef)" $k) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The chart's own `http` settings: the port (service.port, which the Service, the probes and
the monitor use), the web configuration file (web.*, which also sets their scheme) and the
ingest token (ingestToken). config.http may hold the others; a value there that contradicts
the chart fails, naming both.
*/}}
{{- define "txnwatch.checkHttp" -}}
{{- $http := .Values.config.http | default dict }}
{{- $port := int .Values.service.port }}
{{- if and (hasKey $http "port") (ne (int $http.port) $port) }}
{{- fail (printf "config.http.port %v contradicts service.port %d: the exporter listens on service.port, which the Service, the probes and the monitor use; set service.port and leave config.http.port out" $http.port $port) }}
{{- end }}
{{- $addresses := $http.listen_addresses | default list }}
{{- if kindIs "string" $addresses }}{{ $addresses = splitList "," $addresses }}{{ end }}
{{- range $i, $a := $addresses }}
{{- if ne (regexFind ":[0-9]+$" (trim $a)) (printf ":%d" $port) }}
{{- fail (printf "config.http.listen_addresses[%d] %s contradicts service.port %d: every address must listen on service.port (host:%d, or :%d for every interface)" $i $a $port $port $port) }}
{{- end }}
{{- end }}
{{- with $http.host }}
{{- if regexMatch "^(127\\.|localhost$|::1$|\\[::1\\]$)" . }}
{{- fail (printf "config.http.host %s is loopback: neither the kubelet's probes nor Prometheus could reach the exporter; leave config.http.host out (every interface)" .) }}
{{- end }}
{{- end }}
{{- include "txnwatch.checkWebConfigFile" . }}
{{- if and $http.ingest_token .Values.ingestToken.secretName }}
{{- fail (printf "config.http.ingest_token contradicts ingestToken.secretName %s: the chart gives the exporter the token from that Secret; leave config.http.ingest_token out" .Values.ingestToken.secretName) }}
{{- end }}
{{- if and ($http.auth | default dict).bearer_token (not .Values.monitor.authorization) }}
{{- fail "config.http.auth.bearer_token: set monitor.authorization (a Secret reference to the same token), or Prometheus gets 401" }}
{{- end }}
{{- end }}

{{- define "txnwatch.checkWebConfigFile" -}}
{{- $file := (.Values.config.http | default dict).web_config_file }}
{{- if and $file (ne $file (include "txnwatch.webConfigPath" .)) }}
{{- $set := list }}
{{- if .Values.web.tls.enabled }}{{ $set = append $set "web.tls.enabled" }}{{ end }}
{{- if .Values.web.basicAuthUsers }}{{ $set = append $set "web.basicAuthUsers" }}{{ end }}
{{- if .Values.web.existingSecret }}{{ $set = append $set "web.existingSecret" }}{{ end }}
{{- if $set }}
{{- fail (printf "config.http.web_config_file %s contradicts %s: the chart mounts its web configuration at %s; leave config.http.web_config_file out" $file (join " and " $set) (include "txnwatch.webConfigPath" .)) }}
{{- else }}
{{- fail (printf "config.http.web_config_file %s: the chart mounts the web configuration and sets the probes' and the monitor's scheme from web.*; put the file in a Secret, set web.existingSecret to it (and web.tls.enabled if it serves TLS) and leave config.http.web_config_file out" $file) }}
{{- end }}
{{- end }}
{{- end }}

{{- define "txnwatch.checkMixin" -}}
{{- if has "le" (.Values.prometheusRule.routingLabels | default list) }}
{{- fail "prometheusRule.routingLabels: le is the histogram buckets' label, which the rules aggregate away; list target labels such as namespace" }}
{{- end }}
{{- end }}

{{- define "txnwatch.webConfigPath" -}}
{{- if include "txnwatch.webConfig" . }}/etc/txnwatch/web-config/web-config.yml{{ end }}
{{- end }}

{{/* Where Prometheus scrapes: config.http.telemetry_path, else /metrics. */}}
{{- define "txnwatch.telemetryPath" -}}
{{- (.Values.config.http | default dict).telemetry_path | default "/metrics" }}
{{- end }}

{{/* The exporter's configuration file: config, with the chart's own http settings. No
listen host: the exporter's default (every interface, IPv6 and IPv4) suits a pod. */}}
{{- define "txnwatch.configFile" -}}
{{- $http := deepCopy (.Values.config.http | default dict) }}
{{- if not $http.listen_addresses }}
{{- $_ := set $http "port" (int .Values.service.port) }}
{{- end }}
{{- with include "txnwatch.webConfigPath" . }}
{{- $_ := set $http "web_config_file" . }}
{{- end }}
{{- if .Values.ingestToken.secretName }}
{{- $_ := set $http "ingest_token" "${env:TXNWATCH_INGEST_TOKEN}" }}
{{- end }}
{{- $config := deepCopy (omit .Values.config "http") }}
{{- $_ := set $config "http" $http }}
{{- toYaml $config }}
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

{{/*
The generated rules, dashboards and Alertmanager example (files/, made by
scripts/regenerate.py) hold sentinels (files/sentinels.yaml) where the values' settings go;
these replace them. The generator uses each setting as an opaque value (regenerate.py checks
it), so a replacement gives what `txnwatch alerts` would generate with the same settings.
*/}}
{{- define "txnwatch.sentinels" -}}
{{- .Files.Get "files/sentinels.yaml" }}
{{- end }}

{{- define "txnwatch.clusterLabel" -}}
{{- .Values.config.cluster_label | default (include "txnwatch.sentinels" . | fromYaml).defaultClusterLabel }}
{{- end }}

{{/* The bundled rule groups with the cluster label, routing labels and links of the values. */}}
{{- define "txnwatch.ruleGroups" -}}
{{- $s := include "txnwatch.sentinels" . | fromYaml }}
{{- $m := .Values.prometheusRule }}
{{- $label := include "txnwatch.clusterLabel" . }}
{{- $links := dict "runbook_url" (list $s.runbookBaseUrl $m.runbookBaseUrl) "dashboard_url" (list $s.dashboardBaseUrl $m.dashboardBaseUrl) }}
{{- $groups := (.Files.Get "files/prometheus-rules.yaml" | fromYaml).groups }}
{{- range $g := $groups }}
{{- range $r := $g.rules }}
{{- $expr := replace $s.clusterLabel $label $r.expr }}
{{- $_ := set $r "expr" (include "txnwatch.withRoutingLabels" (dict "expr" $expr "labels" $m.routingLabels "sentinel" $s.routingLabel)) }}
{{- range $part := list "labels" "annotations" }}
{{- range $k, $v := (get $r $part | default dict) }}
{{- $_ := set (get $r $part) $k (replace $s.clusterLabel $label $v) }}
{{- end }}
{{- end }}
{{- with $r.annotations }}
{{- include "txnwatch.ruleLinks" (dict "annotations" . "links" $links) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $groups }}
{{- end }}

{{/* Each link annotation at its base URL (trailing slashes dropped, as the generator
does), or none without one. */}}
{{- define "txnwatch.ruleLinks" -}}
{{- $a := .annotations }}
{{- range $key, $pair := .links }}
{{- $base := regexReplaceAll "/+$" (index $pair 1 | default "") "" }}
{{- if and (hasKey $a $key) $base }}
{{- $_ := set $a $key (replace (index $pair 0) $base (get $a $key)) }}
{{- else }}
{{- $_ := unset $a $key }}
{{- end }}
{{- end }}
{{- end }}

{{/*
PromQL whose every by (...) and on (...) ends with the routing-label sentinel: each routing
label added where the list lacks it (the generator's with_routing_labels), the sentinel
dropped. Lists are written `by (a, b)`, one ", " between names, as the generator writes them.
*/}}
{{- define "txnwatch.withRoutingLabels" -}}
{{- $expr := .expr }}
{{- $s := .sentinel }}
{{- range $l := .labels }}
{{- $expr = replace $s (printf "%s, %s" $l $s) $expr }}
{{- $expr = regexReplaceAll (printf `\(((?:[^()]*, )?%s, (?:[^()]*, )?)%s, %s\)` $l $l $s) $expr (printf "(${1}%s)" $s) }}
{{- end }}
{{- replace (printf "(%s)" $s) "()" $expr | replace (printf ", %s)" $s) ")" }}
{{- end }}

{{/* A dashboard's JSON with the cluster label (label names need no JSON escaping). */}}
{{- define "txnwatch.dashboard" -}}
{{- $s := include "txnwatch.sentinels" .root | fromYaml }}
{{- .root.Files.Get .path | replace $s.clusterLabel (include "txnwatch.clusterLabel" .root) }}
{{- end }}

{{/* The Alertmanager example with the cluster label, and in group_by (its one `- <sentinel>`
line, one line per label) the routing labels it does not group by already: Alertmanager
refuses a label twice. */}}
{{- define "txnwatch.alertmanagerExample" -}}
{{- $s := include "txnwatch.sentinels" . | fromYaml }}
{{- $text := .Files.Get "files/alertmanager.yml" | replace $s.clusterLabel (include "txnwatch.clusterLabel" .) }}
{{- $have := (fromYaml $text).route.group_by }}
{{- $routing := "" }}
{{- range .Values.prometheusRule.routingLabels }}
{{- if not (has . $have) }}
{{- $routing = printf "%s${1}- %s\n" $routing . }}
{{- end }}
{{- end }}
{{- regexReplaceAll (printf "(?m)^( *)- %s\n" $s.routingLabel) $text $routing }}
{{- end }}
