{{/* The chart name, or nameOverride. */}}
{{- define "atoll.name" -}}
{{- default "atoll" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object: fullnameOverride, else "<release>-atoll" (just "<release>" when it already says atoll). */}}
{{- define "atoll.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "atoll.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "atoll.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The Service the apiserver calls for the webhook. */}}
{{- define "atoll.webhookService" -}}
{{- printf "%s-webhook" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "atoll.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "atoll.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "atoll.selector" -}}
app.kubernetes.io/name: {{ include "atoll.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The profiles document as text: a string as given, a mapping as YAML. */}}
{{- define "atoll.profilesDocument" -}}
{{- if kindIs "string" .Values.profiles.document -}}
{{- .Values.profiles.document -}}
{{- else -}}
{{- toYaml .Values.profiles.document -}}
{{- end -}}
{{- end -}}

{{/* Non-empty when the webhook is installed: webhook.enabled true, or auto and a flavor of the
profiles document uses enforcement: exact (only those pods are ever sent to it). */}}
{{- define "atoll.webhookEnabled" -}}
{{- $mode := toString .Values.webhook.enabled -}}
{{- if eq $mode "true" -}}
true
{{- else if eq $mode "auto" -}}
{{- $doc := include "atoll.profilesDocument" . | fromYaml -}}
{{- range $flavor, $settings := ($doc.flavors | default dict) -}}
{{- if eq (toString (get ($settings | default dict) "enforcement")) "exact" -}}true{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Fail early on values that cannot work together. */}}
{{- define "atoll.validate" -}}
{{- $doc := include "atoll.profilesDocument" . | fromYaml -}}
{{- if hasKey $doc "Error" -}}
{{- fail (printf "profiles.document: not YAML: %s" (get $doc "Error")) -}}
{{- end -}}
{{- if not (has (toString .Values.webhook.enabled) (list "true" "false" "auto")) -}}
{{- fail (printf "webhook.enabled: %q is not auto, true or false" (toString .Values.webhook.enabled)) -}}
{{- end -}}
{{- if eq (toString .Values.webhook.enabled) "false" -}}
{{- range $flavor, $settings := ($doc.flavors | default dict) -}}
{{- if eq (toString (get ($settings | default dict) "enforcement")) "exact" -}}
{{- fail (printf "profiles.document: flavors.%s.enforcement is exact, which needs the webhook: set webhook.enabled=auto or true, or use enforcement: domain" $flavor) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not (has .Values.webhook.certs.mode (list "generate" "cert-manager")) -}}
{{- fail (printf "webhook.certs.mode: %q is not generate or cert-manager" .Values.webhook.certs.mode) -}}
{{- end -}}
{{- if not (has .Values.webhook.failurePolicy (list "Fail" "Ignore")) -}}
{{- fail (printf "webhook.failurePolicy: %q is not Fail or Ignore" .Values.webhook.failurePolicy) -}}
{{- end -}}
{{- if or (lt (int .Values.webhook.timeoutSeconds) 1) (gt (int .Values.webhook.timeoutSeconds) 30) -}}
{{- fail (printf "webhook.timeoutSeconds: %v must be between 1 and 30" .Values.webhook.timeoutSeconds) -}}
{{- end -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) -}}
{{- fail "leaderElection.enabled: must be true when replicas > 1 (two replicas would both decide)" -}}
{{- end -}}
{{- end -}}
