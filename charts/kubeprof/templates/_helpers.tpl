{{/* Names and labels shared by every template. */}}

{{- define "kubeprof.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubeprof.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "kubeprof.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "kubeprof.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kubeprof.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubeprof.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "kubeprof.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kubeprof.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create=false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kubeprof.operatorImage" -}}
{{- $i := .Values.operator.image -}}
{{- if $i.digest -}}
{{- printf "%s@%s" $i.repository $i.digest -}}
{{- else -}}
{{- printf "%s:%s" $i.repository (default .Chart.AppVersion $i.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kubeprof.agentImage" -}}
{{- printf "%s:%s" .Values.agent.image.repository (default .Chart.AppVersion .Values.agent.image.tag) -}}
{{- end -}}

{{- define "kubeprof.ingestUrl" -}}
{{- default (printf "http://%s.%s.svc:%d" (include "kubeprof.fullname" .) .Release.Namespace (int .Values.service.port)) .Values.operator.ingestUrl -}}
{{- end -}}

{{- define "kubeprof.postgresql.fullname" -}}
{{- printf "%s-postgresql" (include "kubeprof.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Secret and key holding the operator's database URL. */}}
{{- define "kubeprof.databaseSecret" -}}
{{- if .Values.postgresql.enabled -}}
{{- include "kubeprof.postgresql.fullname" . -}}
{{- else -}}
{{- required "externalDatabase.existingSecret is required when postgresql.enabled=false (a Secret holding the postgresql+psycopg:// URL)" .Values.externalDatabase.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "kubeprof.databaseKey" -}}
{{- if .Values.postgresql.enabled -}}database-url{{- else -}}{{ .Values.externalDatabase.urlKey }}{{- end -}}
{{- end -}}

{{/* The Secret and key of /metrics' scrape token (metrics.auth): the operator mounts it,
the ServiceMonitor sends it. */}}
{{- define "kubeprof.metricsTokenSecret" -}}
{{- default (printf "%s-metrics-token" (include "kubeprof.fullname" .) | trunc 63 | trimSuffix "-") .Values.metrics.auth.existingSecret -}}
{{- end -}}

{{- define "kubeprof.metricsTokenKey" -}}
{{- if .Values.metrics.auth.existingSecret -}}{{ .Values.metrics.auth.key }}{{- else -}}token{{- end -}}
{{- end -}}

{{- define "kubeprof.job" -}}
{{- default (include "kubeprof.fullname" .) .Values.prometheusRule.job -}}
{{- end -}}
