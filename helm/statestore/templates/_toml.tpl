{{/*
A small TOML writer for the node's config file. Helm reads every number in values as a
float64 and its toToml would write 200000 as 200000.0, which the node (u64 fields, unknown
keys and wrong types refused) rejects; so whole numbers are written as integers. Scalars of a
table come first, then its sub-tables as [a.b] sections, keys sorted.
*/}}
{{- define "statestore.toml.key" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{- define "statestore.toml.value" -}}
{{- if kindIs "string" . -}}
{{ toJson . }}
{{- else if kindIs "bool" . -}}
{{ . }}
{{- else if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- if eq (float64 (int64 .)) (float64 .) -}}{{ int64 . }}{{- else -}}{{ . }}{{- end -}}
{{- else -}}
{{- fail (printf "config: %v (%s) cannot be written to the node's TOML file" . (kindOf .)) -}}
{{- end -}}
{{- end -}}

{{- define "statestore.toml.table" -}}
{{- $path := .path -}}
{{- $table := .table -}}
{{- $scalars := list -}}
{{- range $k := keys $table | sortAlpha -}}
{{- $v := index $table $k -}}
{{- if not (or (kindIs "map" $v) (kindIs "invalid" $v)) -}}{{- $scalars = append $scalars $k -}}{{- end -}}
{{- end -}}
{{- if and $path $scalars }}

[{{ $path }}]
{{- end -}}
{{- range $k := $scalars }}
{{ include "statestore.toml.key" $k }} = {{ include "statestore.toml.value" (index $table $k) }}
{{- end -}}
{{- range $k := keys $table | sortAlpha -}}
{{- $v := index $table $k -}}
{{- if kindIs "map" $v -}}
{{- $sub := include "statestore.toml.key" $k -}}
{{- if $path -}}{{- $sub = printf "%s.%s" $path $sub -}}{{- end -}}
{{- include "statestore.toml.table" (dict "path" $sub "table" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}
