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
