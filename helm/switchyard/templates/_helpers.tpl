{{/* Names, labels and shared fragments of the Switchyard chart. */}}

{{- define "switchyard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.fullname" -}}
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

{{- define "switchyard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ include "switchyard.chart" . }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchyard
{{- end -}}

{{- define "switchyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The control plane's effective replica count: 1 on the embedded store. */}}
{{- define "switchyard.cpReplicas" -}}
{{- if eq .Values.store.backend "embedded" -}}1{{- else -}}{{ .Values.controlPlane.replicas }}{{- end -}}
{{- end -}}

{{- define "switchyard.etcdName" -}}
{{- printf "%s-etcd" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* etcd client URLs as a list (JSON), bundled members or external. */}}
{{- define "switchyard.etcdEndpoints" -}}
{{- $eps := list -}}
{{- if .Values.etcd.bundled -}}
{{- $name := include "switchyard.etcdName" . -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $eps = append $eps (printf "http://%s-%d.%s-headless.%s.svc:%d" $name $i $name $.Release.Namespace (int $.Values.etcd.clientPort)) -}}
{{- end -}}
{{- else -}}
{{- $eps = .Values.etcd.externalEndpoints -}}
{{- end -}}
{{- toJson $eps -}}
{{- end -}}

{{/* A server's Kubernetes name part: lower case, "_" -> "-". */}}
{{- define "switchyard.serverSlug" -}}
{{- . | lower | replace "_" "-" -}}
{{- end -}}

{{/* Base name of one server's resources. Call with (dict "root" $ "server" $s). */}}
{{- define "switchyard.serverFullname" -}}
{{- printf "%s-%s" (include "switchyard.fullname" .root) (include "switchyard.serverSlug" .server.name) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "switchyard.scheme" -}}
{{- if .Values.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* The control plane URL sidecars dial. */}}
{{- define "switchyard.controlPlaneUrl" -}}
{{- if .Values.controlPlane.url -}}
{{- .Values.controlPlane.url -}}
{{- else -}}
{{- printf "%s://%s.%s.svc:%d" (include "switchyard.scheme" .) (include "switchyard.fullname" .) .Release.Namespace (int .Values.controlPlane.grpcPort) -}}
{{- end -}}
{{- end -}}

{{/* Secret names. */}}
{{- define "switchyard.tlsSecret" -}}
{{- default (printf "%s-tls" (include "switchyard.fullname" .)) .Values.tls.existingSecret -}}
{{- end -}}
{{- define "switchyard.sidecarTlsSecret" -}}
{{- default (include "switchyard.tlsSecret" .) .Values.tls.sidecarExistingSecret -}}
{{- end -}}
{{- define "switchyard.authSecret" -}}
{{- default (printf "%s-auth" (include "switchyard.fullname" .)) .Values.auth.existingSecret -}}
{{- end -}}
{{- define "switchyard.keySecret" -}}
{{- default (printf "%s-token-encryption" (include "switchyard.fullname" .)) .Values.store.tokenEncryption.existingSecret -}}
{{- end -}}

{{/* Mount paths inside the pods (the rendered configurations name them). */}}
{{- define "switchyard.configDir" -}}/etc/switchyard/config{{- end -}}
{{- define "switchyard.tlsDir" -}}/etc/switchyard/tls{{- end -}}
{{- define "switchyard.authDir" -}}/etc/switchyard/auth{{- end -}}
{{- define "switchyard.keyDir" -}}/etc/switchyard/keys{{- end -}}
{{/* The file, in the keys directory, of store.tokenEncryption.previousKeys
entry N (from 0): previous-1.key, previous-2.key, ... in the list's order. */}}
{{- define "switchyard.previousKeyFile" -}}{{ printf "previous-%d.key" (add1 .) }}{{- end -}}
{{- define "switchyard.headerSecretsDir" -}}/etc/switchyard/header-secrets{{- end -}}
{{/* The control plane's directory of OAuth client secrets: one file per
server whose servers[].oauth.clientSecret is set, named after the server. */}}
{{- define "switchyard.oauthClientSecretsDir" -}}/etc/switchyard/oauth-client-secrets{{- end -}}
{{- define "switchyard.dataDir" -}}/var/lib/switchyard{{- end -}}

{{/* Whether an [auth] table and token files are rendered. */}}
{{- define "switchyard.authEnabled" -}}
{{- if or .Values.auth.required .Values.auth.tokens .Values.auth.mtls -}}true{{- end -}}
{{- end -}}

{{/* A TOML inline table from a map of strings. */}}
{{- define "switchyard.tomlTable" -}}
{{- $parts := list -}}
{{- range $k, $v := . -}}
{{- $parts = append $parts (printf "%s = %s" (toJson (toString $k)) (toJson (toString $v))) -}}
{{- end -}}
{{- printf "{ %s }" (join ", " $parts) -}}
{{- end -}}

{{/* The MCP URL of an http server as its sidecar reaches it. */}}
{{- define "switchyard.serverUrl" -}}
{{- if .url -}}
{{- .url -}}
{{- else -}}
{{- printf "http://127.0.0.1:%d%s" (int .port) (default "/mcp" .path) -}}
{{- end -}}
{{- end -}}

{{/*
The keys of one server, shared by the control plane's [[servers]] entries
and each sidecar's [server] table (ServerConfig, docs/configuration.md).
*/}}
{{- define "switchyard.serverToml" -}}
name = {{ .name | toJson }}
transport = {{ .transport | toJson }}
{{- if eq .transport "stdio" }}
command = {{ .command | toJson }}
{{- if .args }}
args = {{ .args | toJson }}
{{- end }}
{{- if .env }}
env = {{ include "switchyard.tomlTable" .env }}
{{- end }}
{{- if .cwd }}
cwd = {{ .cwd | toJson }}
{{- end }}
{{- else }}
url = {{ include "switchyard.serverUrl" . | toJson }}
{{- if .headers }}
headers = {{ include "switchyard.tomlTable" .headers }}
{{- end }}
{{- if .headerSecrets }}
{{- $files := dict }}
{{- range $header, $ref := .headerSecrets }}
{{- $_ := set $files $header (printf "%s/%s" (include "switchyard.headerSecretsDir" $) $header) }}
{{- end }}
header_files = {{ include "switchyard.tomlTable" $files }}
{{- end }}
{{- end }}
{{- if .auth }}
auth = {{ .auth | toJson }}
{{- end }}
{{- if .era }}
era = {{ .era | toJson }}
{{- end }}
{{- if .requestTimeoutSec }}
request_timeout_sec = {{ int64 .requestTimeoutSec }}
{{- end }}
{{- if .maxMessageBytes }}
max_message_bytes = {{ int64 .maxMessageBytes }}
{{- end }}
{{- if hasKey . "livenessIntervalSec" }}
liveness_interval_sec = {{ int64 .livenessIntervalSec }}
{{- end }}
{{- end -}}

{{/*
A server's [servers.oauth] (control plane) or [server.oauth] (sidecar) table
(OAuthSettings, docs/configuration.md), after its other keys; empty unless
servers[].oauth has an entry. Only the control plane reads the client
secret, so only its copy names the file (mounted from the Secret).
Call with (dict "root" $ "server" $s "table" "servers"|"server").
*/}}
{{- define "switchyard.serverOAuthToml" -}}
{{- $o := .server.oauth -}}
{{- if $o }}

[{{ .table }}.oauth]
{{- if $o.clientId }}
client_id = {{ $o.clientId | toJson }}
{{- end }}
{{- if and $o.clientSecret (eq .table "servers") }}
client_secret_file = {{ printf "%s/%s" (include "switchyard.oauthClientSecretsDir" .root) .server.name | toJson }}
{{- end }}
{{- if $o.scopes }}
scopes = {{ $o.scopes | toJson }}
{{- end }}
{{- if $o.clientMetadataUrl }}
client_metadata_url = {{ $o.clientMetadataUrl | toJson }}
{{- end }}
{{- if $o.allowUnadvertisedPkce }}
allow_unadvertised_pkce = true
{{- end }}
{{- end }}
{{- end -}}

{{/* Whether any server gets its OAuth client secret from a Secret (the
control plane then mounts them). */}}
{{- define "switchyard.oauthClientSecrets" -}}
{{- range .Values.servers -}}
{{- if and .oauth .oauth.clientSecret -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* Checks that span several values; fails the render with a clear message. */}}
{{- define "switchyard.validate" -}}
{{- if and (eq .Values.store.backend "etcd") (not .Values.etcd.bundled) (not .Values.etcd.externalEndpoints) -}}
{{- fail "store.backend=etcd with etcd.bundled=false needs etcd.externalEndpoints" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.existingSecret) (not (and .Values.tls.cert .Values.tls.key .Values.tls.ca)) -}}
{{- fail "tls.enabled needs tls.existingSecret, or tls.cert, tls.key and tls.ca" -}}
{{- end -}}
{{- if and .Values.tls.clientAuth (not .Values.tls.enabled) -}}
{{- fail "tls.clientAuth needs tls.enabled" -}}
{{- end -}}
{{- with .Values.controlPlane -}}
{{- if eq (int .httpPort) (int .grpcPort) -}}
{{- fail (printf "controlPlane.httpPort (%d) must differ from controlPlane.grpcPort" (int .httpPort)) -}}
{{- end -}}
{{- if and .mcp.enabled (has (int .mcp.port) (list (int .grpcPort) (int .httpPort) (int .metricsPort))) -}}
{{- fail (printf "controlPlane.mcp.port (%d) must differ from controlPlane.grpcPort, controlPlane.httpPort and controlPlane.metricsPort" (int .mcp.port)) -}}
{{- end -}}
{{- if has (int .metricsPort) (list (int .grpcPort) (int .httpPort)) -}}
{{- fail (printf "controlPlane.metricsPort (%d) must differ from controlPlane.grpcPort and controlPlane.httpPort" (int .metricsPort)) -}}
{{- end -}}
{{- if and .mcp.enabled .mcp.tls (not $.Values.tls.enabled) -}}
{{- fail "controlPlane.mcp.tls needs tls.enabled: the MCP endpoint presents the chart's certificate" -}}
{{- end -}}
{{- range .mcp.allowedOrigins -}}
{{- if or (and (hasPrefix "https://" .) (hasSuffix ":443" .)) (and (hasPrefix "http://" .) (hasSuffix ":80" .)) -}}
{{- fail (printf "controlPlane.mcp.allowedOrigins: %q never matches: browsers send an origin without its default port; write %q" . (regexReplaceAll ":[0-9]+$" . "")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq (int .Values.sidecar.grpcPort) (int .Values.sidecar.httpPort) -}}
{{- fail (printf "sidecar.httpPort (%d) must differ from sidecar.grpcPort" (int .Values.sidecar.httpPort)) -}}
{{- end -}}
{{- range $s := .Values.servers -}}
{{- if and $s.port (has (int $s.port) (list (int $.Values.sidecar.grpcPort) (int $.Values.sidecar.httpPort))) -}}
{{- fail (printf "servers[%s].port (%d) must differ from sidecar.grpcPort and sidecar.httpPort: the server and its sidecar share the pod's network" $s.name (int $s.port)) -}}
{{- end -}}
{{- if and $.Values.auth.required (not (include "switchyard.sidecarToken" (dict "root" $ "server" $s))) (not $.Values.tls.clientAuth) -}}
{{- fail "auth.required with servers needs auth.sidecarToken (a token with role sidecar; or servers[].sidecarToken for each server) or tls.clientAuth with an auth.mtls entry for the sidecars" -}}
{{- end -}}
{{- with $s.sidecarToken -}}
{{- $entry := dict -}}
{{- range $.Values.auth.tokens -}}
{{- if and (eq .name $s.sidecarToken) (eq .role "sidecar") -}}{{- $entry = . -}}{{- end -}}
{{- end -}}
{{- if not $entry -}}
{{- fail (printf "servers %s: sidecarToken %q must name an auth.tokens entry with role sidecar" $s.name $s.sidecarToken) -}}
{{- end -}}
{{- end -}}
{{- $token := include "switchyard.sidecarToken" (dict "root" $ "server" $s) -}}
{{- range $.Values.auth.tokens -}}
{{- if and (eq .name $token) .servers (not (has $s.name .servers)) -}}
{{- fail (printf "servers %s: its sidecar token %q is bound to the servers %v, not to %s" $s.name $token .servers $s.name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range .Values.auth.tokens -}}
{{- if and .servers (ne .role "sidecar") -}}
{{- fail (printf "auth.tokens %s: servers is only for a token of role sidecar" .name) -}}
{{- end -}}
{{- end -}}
{{- range .Values.auth.mtls -}}
{{- if and .servers (ne .role "sidecar") -}}
{{- fail (printf "auth.mtls %s: servers is only for a certificate of role sidecar" .name) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.auth.mtls (not .Values.tls.clientAuth) -}}
{{- fail "auth.mtls needs tls.clientAuth: client certificates must be verified before their names are trusted" -}}
{{- end -}}
{{- if and .Values.auth.required (not .Values.auth.tokens) (not .Values.auth.mtls) -}}
{{- fail "auth.required needs auth.tokens or auth.mtls entries: nobody could call" -}}
{{- end -}}
{{- if .Values.auth.sidecarToken -}}
{{- $found := false -}}
{{- range .Values.auth.tokens -}}
{{- if and (eq .name $.Values.auth.sidecarToken) (eq .role "sidecar") -}}{{- $found = true -}}{{- end -}}
{{- end -}}
{{- if not $found -}}
{{- fail (printf "auth.sidecarToken %q must name an auth.tokens entry with role sidecar" .Values.auth.sidecarToken) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.auth.tokens (not .Values.auth.existingSecret) -}}
{{- range .Values.auth.tokens -}}
{{- if not .value -}}
{{- fail (printf "auth.tokens %q needs a value, or set auth.existingSecret" .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- with .Values.store.tokenEncryption -}}
{{- if and .previousKeys (not .enabled) -}}
{{- fail "store.tokenEncryption.previousKeys needs store.tokenEncryption.enabled (the active key)" -}}
{{- end -}}
{{- $activeSecret := include "switchyard.keySecret" $ -}}
{{- range $i, $ref := .previousKeys -}}
{{- if and (eq $ref.secretName $activeSecret) (eq $ref.key $.Values.store.tokenEncryption.secretKey) -}}
{{- fail (printf "store.tokenEncryption.previousKeys[%d] (Secret %q, key %q) is the active key: point store.tokenEncryption.existingSecret (and secretKey) at the new key" $i $ref.secretName $ref.key) -}}
{{- end -}}
{{- if eq $.Values.store.tokenEncryption.secretKey (include "switchyard.previousKeyFile" $i) -}}
{{- fail (printf "store.tokenEncryption.secretKey %q is also the file of previousKeys[%d]: rename the active key's Secret key" $.Values.store.tokenEncryption.secretKey $i) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $slugs := dict -}}
{{- range .Values.servers -}}
{{- $full := include "switchyard.serverFullname" (dict "root" $ "server" .) -}}
{{- if hasKey $slugs $full -}}
{{- fail (printf "servers %q and %q get the same Kubernetes name %q" (get $slugs $full) .name $full) -}}
{{- end -}}
{{- $_ := set $slugs $full .name -}}
{{- if and (eq .transport "stdio") (not .image) -}}
{{- fail (printf "servers %q: a stdio server needs image (the sidecar runs inside it)" .name) -}}
{{- end -}}
{{- if and (eq .transport "stdio") (not .command) -}}
{{- fail (printf "servers %q: a stdio server needs command" .name) -}}
{{- end -}}
{{- if and (eq .transport "http") (not .url) (not .port) -}}
{{- fail (printf "servers %q: an http server needs port (or url)" .name) -}}
{{- end -}}
{{- if and (eq .transport "http") (not .image) (not .url) -}}
{{- fail (printf "servers %q: an http server needs image (its container) or url" .name) -}}
{{- end -}}
{{- $s := . -}}
{{- if and (eq (toString .auth) "none") (or .headers .headerSecrets) -}}
{{- fail (printf "servers %q: auth is \"none\" but headers or headerSecrets are set: remove them, or set auth to \"headers\"" .name) -}}
{{- end -}}
{{- if and (eq (toString .auth) "headers") (not .headers) (not .headerSecrets) -}}
{{- fail (printf "servers %q: auth is \"headers\" but neither headers nor headerSecrets has an entry" .name) -}}
{{- end -}}
{{- $oauthAuth := eq (toString .auth) "oauth" -}}
{{- if and (eq .transport "stdio") (or .oauth $oauthAuth) -}}
{{- fail (printf "servers %q: auth \"oauth\" and oauth are only for http servers (a stdio server gets its secrets from env)" .name) -}}
{{- end -}}
{{- if and .oauth (not $oauthAuth) -}}
{{- fail (printf "servers %q: oauth is set but auth is not \"oauth\": set auth to \"oauth\"" .name) -}}
{{- end -}}
{{- if and $oauthAuth (not $.Values.store.tokenEncryption.enabled) -}}
{{- fail (printf "servers %q: auth \"oauth\" needs store.tokenEncryption.enabled: the control plane keeps OAuth tokens only encrypted and refuses to start without the key" .name) -}}
{{- end -}}
{{- if and .oauth .oauth.clientSecret (not .oauth.clientId) -}}
{{- fail (printf "servers %q: oauth.clientSecret needs oauth.clientId (a secret belongs to a pre-registered client)" .name) -}}
{{- end -}}
{{- if $oauthAuth -}}
{{- range $header, $_ := merge (deepCopy (default dict .headers)) (default dict .headerSecrets) -}}
{{- if eq (lower $header) "authorization" -}}
{{- fail (printf "servers %q: auth is \"oauth\" but %q is in headers or headerSecrets: the access token is sent as Authorization" $s.name $header) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $header, $ref := .headerSecrets -}}
{{- if hasKey $seen (lower $header) -}}
{{- fail (printf "servers %q: headerSecrets %q and %q are the same header (names are case-insensitive)" $s.name (get $seen (lower $header)) $header) -}}
{{- end -}}
{{- $_ := set $seen (lower $header) $header -}}
{{- end -}}
{{- range $header, $value := .headers -}}
{{- if hasKey $seen (lower $header) -}}
{{- fail (printf "servers %q: header %q is in both headers and headerSecrets: give each header once" $s.name $header) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
The auth.tokens entry a server's sidecar sends: its servers[].sidecarToken,
else auth.sidecarToken; empty for none. Call with (dict "root" $ "server" $s).
*/}}
{{- define "switchyard.sidecarToken" -}}
{{- .server.sidecarToken | default .root.Values.auth.sidecarToken -}}
{{- end -}}
