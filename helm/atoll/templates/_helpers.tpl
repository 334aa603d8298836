{{- define "atoll.name" -}}atoll{{- end -}}
{{- define "atoll.labels" -}}
app.kubernetes.io/name: atoll
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}
{{- define "atoll.selector" -}}
app.kubernetes.io/name: atoll
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
