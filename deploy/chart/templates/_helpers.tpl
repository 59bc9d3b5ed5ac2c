{{/* The name every object of the release carries: the release's name. */}}
{{- define "reconciled.name" -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object; the selector uses only the name. */}}
{{- define "reconciled.labels" -}}
app.kubernetes.io/name: {{ include "reconciled.name" . }}
{{- end -}}

{{/* The image, by digest when one is given (a digest is what production should name). */}}
{{- define "reconciled.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The API group of an apiVersion: "" for "v1", "apps" for "apps/v1". */}}
{{- define "reconciled.group" -}}
{{- if contains "/" . -}}{{ index (splitList "/" .) 0 }}{{- end -}}
{{- end -}}

{{/* The name of the Secret the host may read for its own guests' pulls. */}}
{{- define "reconciled.pullSecretName" -}}
{{- if .Values.registry.pullSecret -}}{{ last (splitList "/" .Values.registry.pullSecret) }}{{- else -}}registry-login{{- end -}}
{{- end -}}
