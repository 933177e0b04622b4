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
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The Secret /metrics is served from: metrics.certSecret, or cert-manager's; empty: self-signed. */}}
{{- define "event-series.metricsCertSecret" -}}
{{- if .Values.metrics.secure -}}
{{- if .Values.metrics.certManager.enabled -}}
{{- printf "%s-metrics-tls" (include "event-series.fullname" .) -}}
{{- else -}}
{{- .Values.metrics.certSecret -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount the chart makes for the ServiceMonitor's token; empty when it makes none. */}}
{{- define "event-series.scraper" -}}
{{- if and .Values.serviceMonitor.enabled .Values.metrics.secure (eq .Values.serviceMonitor.authorization.mode "scraperToken") -}}
{{- printf "%s-metrics-scraper" (include "event-series.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/*
What cannot be installed, refused at render time with the reason:
- values that need another value (a certificate issuer, a token Secret, a scrape class, a namespace);
- without leader election, more than one replica would be two writers of every series;
- event-series serves a whole cluster once: a second release would watch every Event twice and its
  admission policy would refuse the first release's writes (and the first's, its). Found by its
  ClusterRole, where the cluster can be asked (not with `helm template`).
*/}}
{{- define "event-series.checks" -}}
{{- if and (not .Values.leaderElection.enabled) (gt (int .Values.replicas) 1) -}}
{{- fail (printf "leaderElection.enabled=false with replicas=%d: without leader election every replica writes every series; set replicas: 1 or enable leader election" (int .Values.replicas)) -}}
{{- end -}}
{{- with .Values.metrics.certManager -}}
{{- if and .enabled (not .issuerRef.name) -}}
{{- fail "metrics.certManager.enabled needs metrics.certManager.issuerRef.name: the Issuer or ClusterIssuer that signs the metrics certificate" -}}
{{- end -}}
{{- if and .enabled $.Values.metrics.certSecret -}}
{{- fail "metrics.certManager.enabled and metrics.certSecret both name the metrics certificate: set one" -}}
{{- end -}}
{{- end -}}
{{- with .Values.serviceMonitor -}}
{{- if and .enabled $.Values.metrics.secure (eq .authorization.mode "secret") (not .authorization.secret.name) -}}
{{- fail "serviceMonitor.authorization.mode=secret needs serviceMonitor.authorization.secret.name: the Secret holding Prometheus' token" -}}
{{- end -}}
{{- if and .enabled $.Values.metrics.secure (eq .authorization.mode "scrapeClass") (not .scrapeClass) -}}
{{- fail "serviceMonitor.authorization.mode=scrapeClass needs serviceMonitor.scrapeClass: the scrape class of your Prometheus that supplies the token" -}}
{{- end -}}
{{- end -}}
{{- with .Values.metrics.prometheus.serviceAccount -}}
{{- if and .name (not .namespace) -}}
{{- fail "metrics.prometheus.serviceAccount.name needs metrics.prometheus.serviceAccount.namespace: the namespace your Prometheus runs in" -}}
{{- end -}}
{{- end -}}
{{- range (lookup "rbac.authorization.k8s.io/v1" "ClusterRole" "" "").items -}}
{{- $labels := .metadata.labels | default dict -}}
{{- if and (eq (get $labels "app.kubernetes.io/name") "event-series") (get $labels "app.kubernetes.io/instance") (ne (get $labels "app.kubernetes.io/instance") $.Release.Name) -}}
{{- fail (printf "event-series is already installed in this cluster by release %q (ClusterRole %s): it runs once per cluster; upgrade that release instead" (get $labels "app.kubernetes.io/instance") .metadata.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
