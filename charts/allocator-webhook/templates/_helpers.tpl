{{/* Labels of every object; the selector's are the first two. */}}
{{- define "allocator-webhook.labels" -}}
app.kubernetes.io/name: allocator
app.kubernetes.io/component: webhook
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "allocator-webhook.selectorLabels" -}}
app.kubernetes.io/name: allocator
app.kubernetes.io/component: webhook
{{- end }}

{{- define "allocator-webhook.selfSigned" -}}
{{- if eq .Values.certificate.mode "selfSigned" }}true{{ else if eq .Values.certificate.mode "certManager" }}{{ else }}
{{- fail (printf "certificate.mode %q: want selfSigned or certManager" .Values.certificate.mode) }}
{{- end }}
{{- end }}
