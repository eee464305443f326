{{/*
Names and labels. The parent chart calls "mosquitto.fullname" and "mosquitto.authSecret"
with a context of its own (Release, Values = its .Values.mqtt, Chart.Name = "mqtt") to find
the broker's Service and Secret.
*/}}
{{- define "mosquitto.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mosquitto.authSecret" -}}
{{- .Values.auth.existingSecret | default (include "mosquitto.fullname" .) -}}
{{- end -}}

{{- define "mosquitto.selectorLabels" -}}
app.kubernetes.io/name: mosquitto
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: broker
{{- end -}}

{{- define "mosquitto.labels" -}}
{{ include "mosquitto.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: statestore
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The user names that get a password from the Secret besides statestore-node-N. */}}
{{- define "mosquitto.users" -}}
{{- $users := list -}}
{{- if .Values.auth.helmTestUser -}}{{- $users = append $users "statestore-helm-test" -}}{{- end -}}
{{- range .Values.auth.users -}}{{- $users = append $users .name -}}{{- end -}}
{{- $users | uniq | toJson -}}
{{- end -}}

{{/* The request topic of the state store protocol. */}}
{{- define "mosquitto.requestTopic" -}}statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke{{- end -}}
{{- define "mosquitto.notifyPrefix" -}}clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8{{- end -}}
