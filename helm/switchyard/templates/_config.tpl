{{/* The control plane's TOML configuration (docs/configuration.md). */}}
{{- define "switchyard.controlPlaneConfig" -}}
# Rendered by the switchyard Helm chart from its values; keys in
# docs/configuration.md. Check it with: switchyard check-config FILE
[control_plane]
listen = {{ printf "0.0.0.0:%d" (int .Values.controlPlane.grpcPort) | toJson }}
http_listen = {{ printf "0.0.0.0:%d" (int .Values.controlPlane.httpPort) | toJson }}
metrics_listen = {{ printf "0.0.0.0:%d" (int .Values.controlPlane.metricsPort) | toJson }}
sidecar_lease_ttl_sec = {{ int64 .Values.controlPlane.sidecarLeaseTtlSec }}
call_timeout_sec = {{ int64 .Values.controlPlane.callTimeoutSec }}
prune_config_servers = {{ .Values.controlPlane.pruneConfigServers }}
max_connections = {{ int64 .Values.controlPlane.maxConnections }}
idle_timeout_sec = {{ int64 .Values.controlPlane.idleTimeoutSec }}

[runtime]
worker_threads = {{ int64 .Values.controlPlane.workerThreads }}

[store]
root = {{ .Values.store.root | toJson }}
{{- if eq .Values.store.backend "embedded" }}
path = {{ printf "%s/store.redb" (include "switchyard.dataDir" .) | toJson }}
{{- else }}
etcd_endpoints = {{ include "switchyard.etcdEndpoints" . }}
{{- end }}
{{- if .Values.store.tokenEncryption.enabled }}
token_encryption_key_file = {{ printf "%s/%s" (include "switchyard.keyDir" .) .Values.store.tokenEncryption.secretKey | toJson }}
{{- with .Values.store.tokenEncryption.previousKeys }}
{{- $files := list }}
{{- range $i, $_ := . }}
{{- $files = append $files (printf "%s/%s" (include "switchyard.keyDir" $) (include "switchyard.previousKeyFile" $i)) }}
{{- end }}
token_encryption_previous_key_files = {{ toJson $files }}
{{- end }}
{{- end }}

[limits]
interactionTimeoutSec = {{ int64 .Values.controlPlane.interactionTimeoutSec }}
{{- with .Values.controlPlane.backgroundCalls }}

[backgroundCalls]
autoAfterSec = {{ int64 .autoAfterSec }}
maxPerTarget = {{ int64 .maxPerTarget }}
maxDurationSec = {{ int64 .maxDurationSec }}
retentionSec = {{ int64 .retentionSec }}
{{- end }}
{{- if .Values.controlPlane.auditPath }}

[audit]
path = {{ .Values.controlPlane.auditPath | toJson }}
{{- end }}
{{- if .Values.tls.enabled }}
{{- $dir := include "switchyard.tlsDir" . }}

[tls]
cert_file = {{ printf "%s/tls.crt" $dir | toJson }}
key_file = {{ printf "%s/tls.key" $dir | toJson }}
sidecar_ca_file = {{ printf "%s/ca.crt" $dir | toJson }}
{{- if .Values.tls.clientAuth }}
client_ca_file = {{ printf "%s/ca.crt" $dir | toJson }}
require_client_cert = true
{{- end }}
{{- end }}
{{- if include "switchyard.authEnabled" . }}

[auth]
required = {{ .Values.auth.required }}
{{- range .Values.auth.tokens }}

[[auth.tokens]]
name = {{ .name | toJson }}
role = {{ .role | toJson }}
token_file = {{ printf "%s/%s" (include "switchyard.authDir" $) .name | toJson }}
{{- with .servers }}
servers = {{ . | toJson }}
{{- end }}
{{- end }}
{{- range .Values.auth.mtls }}

[[auth.mtls]]
name = {{ .name | toJson }}
role = {{ .role | toJson }}
{{- with .servers }}
servers = {{ . | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.controlPlane.mcp }}
{{- if .enabled }}

[mcp]
listen = {{ printf "0.0.0.0:%d" (int .port) | toJson }}
tls = {{ .tls }}
allowed_origins = {{ toJson .allowedOrigins }}
allowed_hosts = {{ toJson .allowedHosts }}
max_body_bytes = {{ int64 .maxBodyBytes }}
body_timeout_sec = {{ int64 .bodyTimeoutSec }}
session_idle_timeout_sec = {{ int64 .sessionIdleTimeoutSec }}
max_sessions_per_caller = {{ int64 .maxSessionsPerCaller }}
max_waiting_calls_per_caller = {{ int64 .maxWaitingCallsPerCaller }}
request_state_ttl_sec = {{ int64 .requestStateTtlSec }}
max_connections = {{ int64 .maxConnections }}
{{- end }}
{{- end }}
{{- with .Values.oauth }}
{{- if or .adminBaseUrl .allowPrivateAddresses }}

[oauth]
{{- if .adminBaseUrl }}
admin_base_url = {{ .adminBaseUrl | toJson }}
{{- end }}
allow_private_addresses = {{ .allowPrivateAddresses | default false }}
{{- end }}
{{- end }}
{{- with .Values.console }}

[console]
enabled = {{ .enabled }}
session_ttl_sec = {{ int .sessionTtlSec }}
{{- end }}
{{- range .Values.servers }}

[[servers]]
{{ include "switchyard.serverToml" . }}
{{- include "switchyard.serverOAuthToml" (dict "root" $ "server" . "table" "servers") }}
{{- end }}
{{- end }}

{{/*
One sidecar's TOML configuration (docs/sidecar.md): the server's [server]
table and the [sidecar] table. Call with (dict "root" $ "server" $s).
The pod's address is passed with --advertise (Kubernetes expands POD_IP).
*/}}
{{- define "switchyard.sidecarConfig" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
# Rendered by the switchyard Helm chart from its values; keys in
# docs/sidecar.md. Check it with: switchyard-sidecar check-config --config FILE
[server]
{{ include "switchyard.serverToml" .server }}
{{- include "switchyard.serverOAuthToml" (dict "root" $root "server" .server "table" "server") }}

[sidecar]
control_plane = {{ include "switchyard.controlPlaneUrl" $root | toJson }}
listen = {{ printf "0.0.0.0:%d" (int $v.sidecar.grpcPort) | toJson }}
http_listen = {{ printf "0.0.0.0:%d" (int $v.sidecar.httpPort) | toJson }}
grace_secs = {{ int64 $v.sidecar.graceSecs }}
interaction_timeout_secs = {{ int64 $v.controlPlane.interactionTimeoutSec }}
list_changed_window_ms = {{ int64 $v.sidecar.listChangedWindowMs }}
{{- if $v.tls.enabled }}
{{- $dir := include "switchyard.tlsDir" $root }}
control_plane_ca_file = {{ printf "%s/ca.crt" $dir | toJson }}
tls_cert_file = {{ printf "%s/tls.crt" $dir | toJson }}
tls_key_file = {{ printf "%s/tls.key" $dir | toJson }}
{{- if $v.tls.clientAuth }}
client_ca_file = {{ printf "%s/ca.crt" $dir | toJson }}
{{- end }}
{{- end }}
{{- if include "switchyard.sidecarToken" . }}
token_file = {{ printf "%s/token" (include "switchyard.authDir" $root) | toJson }}
{{- end }}
{{- end -}}
