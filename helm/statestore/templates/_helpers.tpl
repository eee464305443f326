{{/* Names. fullname is kept short: pod names add "-N" and peer names ".<fullname>-headless". */}}
{{- define "statestore.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "statestore.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "statestore.headless" -}}
{{- printf "%s-headless" (include "statestore.fullname" .) -}}
{{- end -}}

{{- define "statestore.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "statestore.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "statestore.selectorLabels" -}}
app.kubernetes.io/name: {{ include "statestore.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "statestore.labels" -}}
{{ include "statestore.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: statestore
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* Pods of this release allowed to call the nodes' admin API (membership Jobs). */}}
{{- define "statestore.adminClientLabels" -}}
app.kubernetes.io/instance: {{ .Release.Name }}
statestore.io/admin-client: "true"
{{- end -}}

{{/*
Where a pod of the release may run, from the members' values: imagePullSecrets (the same
image), nodeSelector and tolerations; priorityClassName too with .priority (the members and
the membership Jobs; not the helm test pod, which should not preempt anything). Callers trim
and indent it: it is empty when none is set.
*/}}
{{- define "statestore.podPlacement" -}}
{{- $v := .root.Values -}}
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .priority }}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "statestore.image" -}}
{{- $repo := required "image.repository is required: the statestore image (build it with `docker build -t statestore:<tag> .` at the repository root)" .Values.image.repository -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repo .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* The stable DNS name of the pod with ordinal .ordinal. */}}
{{- define "statestore.podDNS" -}}
{{- $root := .root -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "statestore.fullname" $root) (int .ordinal) (include "statestore.headless" $root) $root.Release.Namespace $root.Values.cluster.domain -}}
{{- end -}}

{{- define "statestore.raftAddr" -}}
{{- printf "%s:%d" (include "statestore.podDNS" .) (int .root.Values.ports.raft) -}}
{{- end -}}

{{/* What the subchart's helpers need to name its Service and Secret from here. */}}
{{- define "statestore.mqttContext" -}}
{{- toJson (dict "Release" (dict "Name" .Release.Name "Namespace" .Release.Namespace) "Values" .Values.mqtt "Chart" (dict "Name" "mqtt")) -}}
{{- end -}}

{{- define "statestore.brokerAddress" -}}
{{- if .Values.mqtt.enabled -}}
{{- $ctx := include "statestore.mqttContext" . | fromJson -}}
{{- printf "%s.%s.svc.%s:%d" (include "mosquitto.fullname" $ctx) .Release.Namespace .Values.cluster.domain (int .Values.mqtt.service.port) -}}
{{- else -}}
{{- required "broker.address is required when mqtt.enabled is false: host:port of your MQTT 5 broker" .Values.broker.address -}}
{{- end -}}
{{- end -}}

{{- define "statestore.brokerPort" -}}
{{- if .Values.mqtt.enabled -}}1883{{- else -}}{{- include "statestore.brokerAddress" . | splitList ":" | last -}}{{- end -}}
{{- end -}}

{{/* The MQTT user name of node .id ("" for anonymous). */}}
{{- define "statestore.brokerUsername" -}}
{{- $root := .root -}}
{{- if $root.Values.mqtt.enabled -}}
{{- printf "statestore-node-%d" (int .id) -}}
{{- else -}}
{{- $root.Values.broker.username | replace "{id}" (toString (int .id)) -}}
{{- end -}}
{{- end -}}

{{/* The Secret and key holding the nodes' broker password, as JSON ({} when anonymous). */}}
{{- define "statestore.brokerSecret" -}}
{{- if .Values.mqtt.enabled -}}
{{- $ctx := include "statestore.mqttContext" . | fromJson -}}
{{- toJson (dict "name" (include "mosquitto.authSecret" $ctx) "key" "statestore-nodes") -}}
{{- else if .Values.broker.existingSecret -}}
{{- toJson (dict "name" .Values.broker.existingSecret "key" .Values.broker.passwordKey) -}}
{{- else if .Values.broker.username -}}
{{- toJson (dict "name" (printf "%s-broker" (include "statestore.fullname" .)) "key" "password") -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* The helm test pod's user name and Secret (JSON; {} when anonymous). */}}
{{- define "statestore.testCredentials" -}}
{{- if .Values.mqtt.enabled -}}
{{- if not .Values.mqtt.auth.helmTestUser -}}
{{- fail "tests.enabled needs mqtt.auth.helmTestUser (the bundled broker's user for the helm test pod)" -}}
{{- end -}}
{{- $ctx := include "statestore.mqttContext" . | fromJson -}}
{{- toJson (dict "username" "statestore-helm-test" "name" (include "mosquitto.authSecret" $ctx) "key" "statestore-helm-test") -}}
{{- else if .Values.tests.broker.username -}}
{{- toJson (dict "username" .Values.tests.broker.username "name" .Values.tests.broker.existingSecret "key" .Values.tests.broker.passwordKey) -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{- define "statestore.shutdownGraceMs" -}}
{{- $cfg := .Values.config | default dict -}}
{{- if hasKey $cfg "shutdown_grace_ms" -}}{{ int64 $cfg.shutdown_grace_ms }}{{- else -}}10000{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: above the node's shutdown grace. */}}
{{- define "statestore.terminationGrace" -}}
{{- $graceS := div (add (int64 (include "statestore.shutdownGraceMs" .)) 999) 1000 -}}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds -}}
{{- add $graceS 20 -}}
{{- else if le (int64 .Values.terminationGracePeriodSeconds) $graceS -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be above the node's shutdown grace (config.shutdown_grace_ms = %s ms): Kubernetes would kill the node before it finished its in-flight requests and flushed its database" (int64 .Values.terminationGracePeriodSeconds) (include "statestore.shutdownGraceMs" .)) -}}
{{- else -}}
{{- int64 .Values.terminationGracePeriodSeconds -}}
{{- end -}}
{{- end -}}

{{/* The TOML file of the node with ordinal .ordinal (node id = ordinal + 1). */}}
{{- define "statestore.nodeConfig" -}}
{{- $root := .root -}}
{{- $i := int .ordinal -}}
{{- $cfg := deepCopy ($root.Values.config | default dict) -}}
{{- $_ := set $cfg "id" (add $i 1) -}}
{{- $cluster := get $cfg "cluster" | default dict -}}
{{- if lt $i (int $root.Values.cluster.bootstrapReplicas) -}}
{{- $peers := dict -}}
{{- range $j := until (int $root.Values.cluster.bootstrapReplicas) -}}
{{- $_ := set $peers (toString (add $j 1)) (include "statestore.raftAddr" (dict "root" $root "ordinal" $j)) -}}
{{- end -}}
{{- $_ := set $cluster "peers" $peers -}}
{{- else -}}
{{- $_ := set $cluster "join" true -}}
{{- end -}}
{{- $_ := set $cfg "cluster" $cluster -}}
{{- $user := include "statestore.brokerUsername" (dict "root" $root "id" (add $i 1)) -}}
{{- if $user -}}
{{- $mqtt := get $cfg "mqtt" | default dict -}}
{{- $_ := set $mqtt "username" $user -}}
{{- $_ := set $cfg "mqtt" $mqtt -}}
{{- end -}}
{{- $tls := $root.Values.tls -}}
{{- if $tls.broker.enabled -}}
{{- $dir := "/etc/statestore/tls/broker" -}}
{{- $mtls := dict "enabled" true -}}
{{- if $tls.broker.secretName -}}{{- $_ := set $mtls "ca_file" (printf "%s/ca.crt" $dir) -}}{{- end -}}
{{- if $tls.broker.clientCert -}}
{{- $_ := set $mtls "cert_file" (printf "%s/tls.crt" $dir) -}}
{{- $_ := set $mtls "key_file" (printf "%s/tls.key" $dir) -}}
{{- end -}}
{{- with $tls.broker.serverName -}}{{- $_ := set $mtls "server_name" . -}}{{- end -}}
{{- if not (kindIs "invalid" $tls.broker.reloadIntervalMs) -}}
{{- $_ := set $mtls "reload_interval_ms" (int64 $tls.broker.reloadIntervalMs) -}}
{{- end -}}
{{- $mqtt := get $cfg "mqtt" | default dict -}}
{{- $_ := set $mqtt "tls" $mtls -}}
{{- $_ := set $cfg "mqtt" $mqtt -}}
{{- end -}}
{{- if $tls.peers.enabled -}}
{{- $dir := "/etc/statestore/tls/peers" -}}
{{- $_ := set $cluster "tls" (dict "ca_file" (printf "%s/ca.crt" $dir) "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir)) -}}
{{- end -}}
{{- $admin := dict -}}
{{- if $tls.http.enabled -}}
{{- $dir := "/etc/statestore/tls/http" -}}
{{- $_ := set $admin "tls" (dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir)) -}}
{{- end -}}
{{- if $root.Values.admin.token.enabled -}}
{{- $_ := set $admin "token_file" "/etc/statestore/admin/token" -}}
{{- else -}}
{{- /* The HTTP listener binds 0.0.0.0: without a token the node starts only when told so. */ -}}
{{- $_ := set $admin "allow_insecure_http" true -}}
{{- end -}}
{{- if $admin -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- end -}}
{{- if $root.Values.authorization.policy -}}
{{- $auth := get $cfg "auth" | default dict -}}
{{- $_ := set $auth "policy_file" "/etc/statestore/policy/policy.toml" -}}
{{- $_ := set $cfg "auth" $auth -}}
{{- end -}}
{{- /* JSON log lines for the cluster's log pipeline, unless config.telemetry says otherwise. */ -}}
{{- $telemetry := get $cfg "telemetry" | default dict -}}
{{- if not (hasKey $telemetry "log_format") -}}
{{- $_ := set $telemetry "log_format" "json" -}}
{{- end -}}
{{- $_ := set $cfg "telemetry" $telemetry -}}
# Node {{ add $i 1 }}, pod {{ include "statestore.fullname" $root }}-{{ $i }}: written by the statestore chart.
{{- if lt $i (int $root.Values.cluster.bootstrapReplicas) }}
# One of the {{ $root.Values.cluster.bootstrapReplicas }} members that bootstrap the cluster (the same peers on each).
{{- else }}
# Added after the bootstrap: starts with join = true and waits for `statestore cluster add-node`.
{{- end }}
{{- include "statestore.toml.table" (dict "path" "" "table" $cfg) }}
{{- end -}}

{{/* Checks across values that the schema cannot express. */}}
{{- define "statestore.validate" -}}
{{- if eq (int .Values.ports.http) (int .Values.ports.raft) -}}
{{- fail (printf "ports.http and ports.raft are both %d: the HTTP listener (/metrics, probes, admin API) and the Raft listener each need their own port" (int .Values.ports.http)) -}}
{{- end -}}
{{- if gt (int .Values.cluster.bootstrapReplicas) (int .Values.replicas) -}}
{{- fail (printf "replicas (%d) must be at least cluster.bootstrapReplicas (%d): the bootstrap members are never removed by the chart; remove members above the bootstrap set only" (int .Values.replicas) (int .Values.cluster.bootstrapReplicas)) -}}
{{- end -}}
{{- if and .Values.mqtt.enabled (gt (int .Values.replicas) (int .Values.mqtt.auth.statestoreNodes)) -}}
{{- fail (printf "mqtt.auth.statestoreNodes (%d) must be at least replicas (%d): the bundled broker has one user per statestore node" (int .Values.mqtt.auth.statestoreNodes) (int .Values.replicas)) -}}
{{- end -}}
{{- $auth := (.Values.config | default dict).auth | default dict -}}
{{- if and .Values.mqtt.enabled (eq (toString $auth.identity) "broker") (not .Values.mqtt.statestorePlugin.enabled) -}}
{{- fail "config.auth.identity = broker with the bundled Mosquitto needs mqtt.statestorePlugin.enabled: without the plugin no request carries a vouched identity and the nodes answer none" -}}
{{- end -}}
{{- if and .Values.authorization.policy $auth.policy_file -}}
{{- fail "set the policy either as authorization.policy (the chart mounts it) or as config.auth.policy_file (a file you provide), not both" -}}
{{- end -}}
{{- if and .Values.tls.broker.enabled .Values.mqtt.enabled -}}
{{- fail "tls.broker needs an external broker (mqtt.enabled=false, broker.address = its TLS port): the bundled Mosquitto listens in plain text only" -}}
{{- end -}}
{{- if and .Values.tls.broker.clientCert (not .Values.tls.broker.secretName) -}}
{{- fail "tls.broker.clientCert needs tls.broker.secretName: the Secret holding tls.crt and tls.key" -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not (contains "statestore" (include "statestore.jobName" .))) -}}
{{- fail (printf "the scrape job name %q must contain \"statestore\": the alerts and dashboards select job=~\".*statestore.*\" (set metrics.serviceMonitor.jobName)" (include "statestore.jobName" .)) -}}
{{- end -}}
{{- end -}}

{{/* A quantity (10Gi, 1.5G, 500m) in bytes as "%.3f"; "" when it is not one of these forms. */}}
{{- define "statestore.quantityBytes" -}}
{{- $units := dict "" 1.0 "m" 0.001 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "P" 1e15 "E" 1e18 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "Pi" 1125899906842624.0 "Ei" 1152921504606846976.0 -}}
{{- $q := toString . -}}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$" $q -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $q -}}
{{- printf "%.3f" (mulf (float64 $number) (get $units (trimPrefix $number $q))) -}}
{{- end -}}
{{- end -}}

{{/*
Refuses an upgrade that changes what Kubernetes does not let a StatefulSet change: its
volumeClaimTemplates (the API server would answer "updates to statefulset spec for fields
other than ... are forbidden"). .existing is the release's StatefulSet from lookup: empty
under helm template, --dry-run=client and on install, so this checks only against a cluster.
*/}}
{{- define "statestore.checkClaimTemplate" -}}
{{- $v := .root.Values.persistence -}}
{{- $name := include "statestore.fullname" .root -}}
{{- $spec := get (.existing | default dict) "spec" | default dict -}}
{{- range $t := get $spec "volumeClaimTemplates" | default list -}}
{{- if eq (dig "metadata" "name" "" $t) "data" -}}
{{- $size := toString (dig "spec" "resources" "requests" "storage" "" $t) -}}
{{- $sizeBytes := include "statestore.quantityBytes" $size -}}
{{- if not (and $sizeBytes (eq $sizeBytes (include "statestore.quantityBytes" $v.size))) -}}
{{- if ne $size (toString $v.size) -}}
{{- fail (printf "persistence.size is %s, but the StatefulSet %s has volume claims of %s, and Kubernetes cannot change a StatefulSet's volumeClaimTemplates (the upgrade would be refused as \"updates to statefulset spec ... are forbidden\"). Keep persistence.size: %s. To grow the volumes (a StorageClass with allowVolumeExpansion), resize each claim data-%s-<ordinal> with kubectl patch, then run kubectl delete statefulset %s --cascade=orphan (the pods keep running) and upgrade with the new size (README \"Deploy on Kubernetes\", Volumes)" (toString $v.size) $name $size $size $name $name) -}}
{{- end -}}
{{- end -}}
{{- $class := toString (dig "spec" "storageClassName" "" $t) -}}
{{- if ne $class (toString $v.storageClassName) -}}
{{- fail (printf "persistence.storageClassName is %q, but the StatefulSet %s has volume claims of StorageClass %q, and Kubernetes cannot change a StatefulSet's volumeClaimTemplates, nor the class of existing claims. Keep persistence.storageClassName: %q (README \"Deploy on Kubernetes\", Volumes)" (toString $v.storageClassName) $name $class $class) -}}
{{- end -}}
{{- $modes := dig "spec" "accessModes" list $t -}}
{{- if ne (toJson $modes) (toJson $v.accessModes) -}}
{{- fail (printf "persistence.accessModes is %s, but the StatefulSet %s has volume claims with %s, and Kubernetes cannot change a StatefulSet's volumeClaimTemplates. Keep persistence.accessModes: %s" (toJson $v.accessModes) $name (toJson $modes) (toJson $modes)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Refuses an upgrade that would switch peer TLS on or off under a running release (one installed
by a chart whose default was plain text, or with tls.peers flipped): the rolling update
restarts one member at a time, and a member speaking the other protocol reaches no peer, so
the rollout stalls with the first restarted pod. .existing is the release's StatefulSet from
lookup (empty under helm template and on install).
*/}}
{{- define "statestore.checkPeerTlsSwitch" -}}
{{- $podSpec := dig "spec" "template" "spec" dict (.existing | default dict) -}}
{{- if and $podSpec (not .root.Values.tls.peers.switchRunningRelease) -}}
{{- $had := false -}}
{{- range $v := get $podSpec "volumes" | default list -}}
{{- if eq (get $v "name") "tls-peers" -}}{{- $had = true -}}{{- end -}}
{{- end -}}
{{- $want := .root.Values.tls.peers.enabled -}}
{{- if ne $had $want -}}
{{- $name := include "statestore.fullname" .root -}}
{{- fail (printf "tls.peers.enabled is %t, but the running StatefulSet %s has peer TLS %s: a rolling update would restart one member at a time speaking the other protocol, unable to reach its peers (the rollout stalls). Keep it with --set tls.peers.enabled=%t, or switch every member at once: upgrade with --set tls.peers.switchRunningRelease=true, then kubectl -n %s delete pod -l app.kubernetes.io/instance=%s,app.kubernetes.io/name=%s (the data volumes are kept; README \"Deploy on Kubernetes\")" $want $name (ternary "on" "off" $had) $had .root.Release.Namespace .root.Release.Name (include "statestore.name" .root)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "statestore.jobName" -}}
{{- .Values.metrics.serviceMonitor.jobName | default (include "statestore.fullname" .) -}}
{{- end -}}

{{/* The Secret the chart generates (a CA and one certificate for the pods and the admin
Service) when tls.peers or tls.http is on without a secretName. */}}
{{- define "statestore.generatedTlsSecret" -}}
{{- printf "%s-tls" (include "statestore.fullname" .) -}}
{{- end -}}

{{- define "statestore.generatesTls" -}}
{{- if or (and .Values.tls.peers.enabled (not .Values.tls.peers.secretName)) (and .Values.tls.http.enabled (not .Values.tls.http.secretName)) -}}true{{- end -}}
{{- end -}}

{{/* The Secret holding the peers' ca.crt, tls.crt and tls.key. */}}
{{- define "statestore.peersTlsSecret" -}}
{{- .Values.tls.peers.secretName | default (include "statestore.generatedTlsSecret" .) -}}
{{- end -}}

{{/* The Secret holding the HTTP listener's tls.crt, tls.key and ca.crt. */}}
{{- define "statestore.httpTlsSecret" -}}
{{- .Values.tls.http.secretName | default (include "statestore.generatedTlsSecret" .) -}}
{{- end -}}

{{/* The admin Service's DNS name (what the HTTPS certificate must name). */}}
{{- define "statestore.adminHost" -}}
{{- printf "%s.%s.svc.%s" (include "statestore.fullname" .) .Release.Namespace .Values.cluster.domain -}}
{{- end -}}

{{/* Arguments of `statestore cluster` against the admin Service. */}}
{{- define "statestore.adminEndpoint" -}}
{{- printf "%s://%s:%d" (ternary "https" "http" .Values.tls.http.enabled) (include "statestore.adminHost" .) (int .Values.ports.http) -}}
{{- end -}}

{{/* The Secret and key of the admin token, as JSON ({} when off). */}}
{{- define "statestore.adminTokenSecret" -}}
{{- if .Values.admin.token.enabled -}}
{{- if .Values.admin.token.existingSecret -}}
{{- toJson (dict "name" .Values.admin.token.existingSecret "key" .Values.admin.token.key) -}}
{{- else -}}
{{- toJson (dict "name" (printf "%s-admin-token" (include "statestore.fullname" .)) "key" "token") -}}
{{- end -}}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* The options of `statestore cluster` after --endpoint, as ", --ca, "FILE", --token-file, "FILE"" (flow sequence items). */}}
{{- define "statestore.clusterOpts" -}}
{{- if .Values.tls.http.enabled -}}, --ca, {{ "/etc/statestore/tls/http/ca.crt" | quote }}{{- end -}}
{{- if .Values.admin.token.enabled -}}, --token-file, {{ "/etc/statestore/admin/token" | quote }}{{- end -}}
{{- end -}}

{{/* Volume mounts and volumes of the membership Jobs (the HTTPS CA, the admin token). */}}
{{- define "statestore.clusterClientMounts" -}}
{{- if .Values.tls.http.enabled }}
- name: http-ca
  mountPath: /etc/statestore/tls/http
  readOnly: true
{{- end }}
{{- if .Values.admin.token.enabled }}
- name: admin-token
  mountPath: /etc/statestore/admin
  readOnly: true
{{- end }}
{{- end -}}

{{- define "statestore.clusterClientVolumes" -}}
{{- $token := include "statestore.adminTokenSecret" . | fromJson -}}
{{- if .Values.tls.http.enabled }}
- name: http-ca
  secret:
    secretName: {{ include "statestore.httpTlsSecret" . }}
    defaultMode: 0440
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- if $token.name }}
- name: admin-token
  secret:
    secretName: {{ $token.name }}
    defaultMode: 0440
    items:
      - key: {{ $token.key }}
        path: token
{{- end }}
{{- end -}}
