{{/* The base of every object name: "event-series" for a release of that name (the names of config/default). */}}
{{- define "event-series.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "event-series.selectorLabels" -}}
app.kubernetes.io/name: event-series
app.kubernetes.io/component: controller
{{- end -}}

{{- define "event-series.labels" -}}
app.kubernetes.io/name: event-series
app.kubernetes.io/part-of: event-series
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "event-series.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
