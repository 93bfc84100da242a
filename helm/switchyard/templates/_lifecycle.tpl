{{/*
Graceful shutdown (docs/operations.md, "Shutdown sequence"). When a pod is
deleted, Kubernetes removes it from the Service endpoints and, at the same
time, runs each container's preStop hook, then sends SIGTERM. A short
preStop sleep (lifecycle.preStopSleepSeconds) lets the endpoint removal
reach every client first. On SIGTERM the process turns not ready, a sidecar
reports `draining` to the control plane (which routes new calls to the
server's other sidecars), and the in-flight calls drain for graceSecs.
terminationGracePeriodSeconds counts from the start of preStop, so it must
cover the sleep and the drain; the checks below refuse values that do not.
*/}}

{{/* `lifecycle:` with a preStop sleep of `.seconds` (nothing when 0). The
exec form runs `sleep` from the container's image: the Switchyard image has
it; a server image without it logs FailedPreStopHook and stops at once. */}}
{{- define "switchyard.preStop" -}}
{{- if gt (int64 .seconds) 0 -}}
lifecycle:
  preStop:
    exec:
      command: ["sleep", {{ int64 .seconds | toString | quote }}]
{{- end }}
{{- end -}}

{{/* Fails the render when a terminationGracePeriodSeconds cannot cover the
preStop sleep plus the drain. */}}
{{- define "switchyard.validateShutdown" -}}
{{- $sleep := int64 .Values.lifecycle.preStopSleepSeconds -}}
{{- $cp := .Values.controlPlane -}}
{{- $cpNeed := add $sleep (int64 $cp.graceSecs) -}}
{{- if le (int64 $cp.terminationGracePeriodSeconds) $cpNeed -}}
{{- fail (printf "controlPlane.terminationGracePeriodSeconds (%d) must be larger than lifecycle.preStopSleepSeconds + controlPlane.graceSecs (%d): the drain would be cut short" (int64 $cp.terminationGracePeriodSeconds) $cpNeed) -}}
{{- end -}}
{{- $sc := .Values.sidecar -}}
{{- /* The sidecar keeps accepting calls for 1 s after it reported draining. */ -}}
{{- $scNeed := add $sleep 1 (int64 $sc.graceSecs) -}}
{{- if le (int64 $sc.terminationGracePeriodSeconds) $scNeed -}}
{{- fail (printf "sidecar.terminationGracePeriodSeconds (%d) must be larger than lifecycle.preStopSleepSeconds + 1 + sidecar.graceSecs (%d): the drain would be cut short" (int64 $sc.terminationGracePeriodSeconds) $scNeed) -}}
{{- end -}}
{{- end -}}
