{{/* Chart name, truncated to the 63 characters Kubernetes allows in a label. */}}
{{- define "session-core.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "session-core.fullname" -}}
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

{{/* "<fullname>-<component>", e.g. session-core-admission. */}}
{{- define "session-core.componentName" -}}
{{- printf "%s-%s" (include "session-core.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "session-core.selectorLabels" -}}
app.kubernetes.io/name: {{ include "session-core.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Labels of every object; takes dict "root" $ "component" name. */}}
{{- define "session-core.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "session-core.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: session-core
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "session-core.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "session-core.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "session-core.image" -}}
{{- $repo := required "image.repository is required: build the image with `make image` (it prints how to push it) and set --set image.repository=<registry>/session-core" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
A setting's value as an environment string. Helm reads YAML numbers as float64, which would
print 33554432 as 3.3554432e+07: whole numbers are printed as integers.
*/}}
{{- define "session-core.envValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- int64 . | toString -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* The ConfigMap's data: every non-null key of .Values.config. */}}
{{- define "session-core.configData" -}}
{{- range $name, $value := .Values.config }}
{{- if not (kindIs "invalid" $value) }}
{{ $name }}: {{ include "session-core.envValue" $value | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* env entries for the credentials (secretKeyRef) and the Kafka CA file. */}}
{{/* For one service (dict root, svc): with svc.kafkaSasl.secretName its own Kafka SASL
credentials (its own principal, docs/security.md) instead of the shared ones. */}}
{{- define "session-core.secretEnv" -}}
{{- $own := (.svc.kafkaSasl | default dict).secretName | default "" }}
{{- $sasl := list "SESSION_CORE_KAFKA_SASL_USERNAME" "SESSION_CORE_KAFKA_SASL_PASSWORD" }}
{{- range $name, $ref := .root.Values.secretEnv }}
{{- if and $ref.name (not (and $own (has $name $sasl))) }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- if $own }}
- name: SESSION_CORE_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef:
      name: {{ $own }}
      key: {{ .svc.kafkaSasl.usernameKey | default "username" }}
- name: SESSION_CORE_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ $own }}
      key: {{ .svc.kafkaSasl.passwordKey | default "password" }}
{{- end }}
{{- if .root.Values.kafkaTls.caSecret.name }}
- name: SESSION_CORE_KAFKA_SSL_CAFILE
  value: {{ printf "%s/%s" (trimSuffix "/" .root.Values.kafkaTls.mountPath) .root.Values.kafkaTls.caSecret.key | quote }}
{{- end }}
{{- end -}}

{{/* The Kafka credentials only (SASL user and password, and the CA file): for the topics Job,
which must not wait for the MongoDB or API-key Secrets. */}}
{{- define "session-core.kafkaSecretEnv" -}}
{{- range $name, $ref := .Values.secretEnv }}
{{- if and $ref.name (hasPrefix "SESSION_CORE_KAFKA_" $name) }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ $ref.name }}
      key: {{ $ref.key }}
{{- end }}
{{- end }}
{{- if .Values.kafkaTls.caSecret.name }}
- name: SESSION_CORE_KAFKA_SSL_CAFILE
  value: {{ printf "%s/%s" (trimSuffix "/" .Values.kafkaTls.mountPath) .Values.kafkaTls.caSecret.key | quote }}
{{- end }}
{{- end -}}

{{/* Volume mounts of every container: /tmp, the Kafka CA, extraVolumeMounts. */}}
{{- define "session-core.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- include "session-core.kafkaCaVolumeMount" . }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Volumes of every pod: /tmp, the Kafka CA, extraVolumes. */}}
{{- define "session-core.volumes" -}}
- name: tmp
  emptyDir:
    sizeLimit: {{ .Values.tmpSizeLimit }}
{{- include "session-core.kafkaCaVolume" . }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "session-core.metricsPort" -}}
{{- $port := index .Values.config "SESSION_CORE_HEALTH_PORT" -}}
{{- if not $port -}}
{{- fail "config.SESSION_CORE_HEALTH_PORT must be a port (not 0/null): every service serves /healthz, /readyz and /metrics there" -}}
{{- end -}}
{{- if eq (int64 $port) (int64 (index .Values.config "SESSION_CORE_HTTP_PORT")) -}}
{{- fail "config.SESSION_CORE_HEALTH_PORT must differ from SESSION_CORE_HTTP_PORT: /metrics has its own port, never routed by the Ingress" -}}
{{- end -}}
{{- int64 $port -}}
{{- end -}}

{{- define "session-core.kafkaCaVolumeMount" -}}
{{- if .Values.kafkaTls.caSecret.name }}
- name: kafka-ca
  mountPath: {{ .Values.kafkaTls.mountPath }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "session-core.kafkaCaVolume" -}}
{{- if .Values.kafkaTls.caSecret.name }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafkaTls.caSecret.name }}
    items:
      - key: {{ .Values.kafkaTls.caSecret.key }}
        path: {{ .Values.kafkaTls.caSecret.key }}
{{- end }}
{{- end -}}

{{/* The standard OTEL_* variables of one service when tracing.enabled (docs/operations.md,
"Tracing"); nothing otherwise, and the service makes no spans. */}}
{{- define "session-core.tracingEnv" -}}
{{- $t := .root.Values.tracing }}
{{- if $t.enabled }}
{{- if not $t.endpoint }}
{{- fail "tracing.enabled needs tracing.endpoint (the collector's OTLP/HTTP URL)" }}
{{- end }}
- name: OTEL_TRACES_EXPORTER
  value: otlp
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: http/protobuf
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $t.endpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ printf "session-core-%s" .component | quote }}
- name: OTEL_TRACES_SAMPLER
  value: {{ $t.sampler | quote }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ $t.samplerArg | quote }}
{{- with $t.resourceAttributes }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ . | quote }}
{{- end }}
{{- if $t.headersSecret.name }}
- name: OTEL_EXPORTER_OTLP_HEADERS
  valueFrom:
    secretKeyRef:
      name: {{ $t.headersSecret.name }}
      key: {{ $t.headersSecret.key }}
{{- end }}
{{- end }}
{{- end -}}
