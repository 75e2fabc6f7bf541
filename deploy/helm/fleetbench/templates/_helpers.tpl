{{/* Names and labels shared by every template. */}}
{{- define "fleetbench.labels" -}}
app.kubernetes.io/part-of: fleetbench
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selectors: the names are fixed (the controller's certificate carries its Service name), so
one release per namespace. */}}
{{- define "fleetbench.agentSelector" -}}
app.kubernetes.io/name: fleetbench-agent
{{- end -}}

{{- define "fleetbench.controllerSelector" -}}
app.kubernetes.io/name: fleetbench-controller
{{- end -}}

{{/* The controller's Service name, which its server certificate carries. */}}
{{- define "fleetbench.controllerService" -}}fleetbench-controller{{- end -}}

{{- define "fleetbench.issuerRef" -}}
{{- if .Values.certManager.createIssuer -}}
name: fleetbench-ca
kind: Issuer
group: cert-manager.io
{{- else -}}
{{- required "certManager.issuerRef (name, kind) is required when certManager.createIssuer is false" .Values.certManager.issuerRef.name | printf "name: %s" }}
kind: {{ .Values.certManager.issuerRef.kind | default "Issuer" }}
group: cert-manager.io
{{- end -}}
{{- end -}}

{{/* The agent values that no schema can check: pool names unique, model fetches where a bounded
cache and huggingface_hub are. Renders nothing; fails naming the value. */}}
{{- define "fleetbench.checkAgent" -}}
{{- $seen := dict -}}
{{- range .Values.agent.pools -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "agent.pools: the pool name %q appears twice (one DaemonSet per pool)" .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- if .Values.agent.models.fetch -}}
{{- if not (has .Values.agent.engine (list "sglang" "vllm")) -}}
{{- fail (printf "agent.models.fetch: the %s image has no huggingface_hub to fetch with (sglang and vllm images do); put the models on a volume (agent.models.persistentVolumeClaim)" .Values.agent.engine) -}}
{{- end -}}
{{- if .Values.agent.cacheHostPath -}}
{{- fail "agent.models.fetch: fetched models go into the cache, which must be bounded: set agent.cacheHostPath to \"\" (an emptyDir of agent.cacheSizeLimit)" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Pod Security level the release's pods need: `privileged` once any hostPath volume is
used (the agent's models, data or cache), else `baseline` (no host namespaces, GPUs through the
device plugin, the init container adds only CHOWN and FOWNER, both in baseline's list). Not
`restricted`: that init container runs as uid 0 to hand hostPath or volume dirs to the engine
user. */}}
{{- define "fleetbench.podSecurityLevel" -}}
{{- $a := .Values.agent -}}
{{- if and $a.enabled (or (and $a.models.hostPath (not $a.models.persistentVolumeClaim)) $a.dataHostPath $a.cacheHostPath) -}}
privileged
{{- else -}}
baseline
{{- end -}}
{{- end -}}
