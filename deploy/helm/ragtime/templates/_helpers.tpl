{{/* Name of every object: the release name, with the chart's unless it already holds it. */}}
{{- define "ragtime.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "ragtime.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "ragtime.labels" -}}
{{ include "ragtime.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "ragtime.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Secret holding keys and the database URL. */}}
{{- define "ragtime.secretName" -}}
{{- .Values.secret.existingSecret | default (include "ragtime.fullname" .) -}}
{{- end -}}

{{/* Seconds the kubelet waits after the preStop hook starts before SIGKILL. */}}
{{- define "ragtime.gracePeriod" -}}
{{- add .Values.preStopSleepSeconds .Values.shutdownTimeoutSeconds .Values.recorderFlushSeconds .Values.graceMarginSeconds -}}
{{- end -}}

{{/* The database URL from the Secret, as DATABASE_URL. */}}
{{- define "ragtime.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "ragtime.secretName" . }}
      key: {{ .Values.secret.keys.databaseURL }}
{{- end -}}

{{/*
The Redis the replicas share (--redis-url as RAGTIME_REDIS_URL): the
release's own (redis.enabled; its password from the Secret the Redis chart
makes, put into the URL by the kubelet) or an external one from the Secret.
*/}}
{{- define "ragtime.redisEnv" -}}
{{- if .Values.redis.enabled }}
{{- $redis := printf "%s-redis" .Release.Name }}
{{- if .Values.redis.auth.enabled }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.auth.existingSecret | default $redis }}
      key: {{ .Values.redis.auth.existingSecretPasswordKey | default "redis-password" }}
- name: RAGTIME_REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@{{ $redis }}-master:6379/0"
{{- else }}
- name: RAGTIME_REDIS_URL
  value: "redis://{{ $redis }}-master:6379/0"
{{- end }}
{{- else if .Values.secret.redisURL }}
- name: RAGTIME_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "ragtime.secretName" . }}
      key: {{ .Values.secret.keys.redisURL }}
{{- end }}
{{- end -}}
