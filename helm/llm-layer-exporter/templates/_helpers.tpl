{{/*
Names and labels.
*/}}
{{- define "llm-layer-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "llm-layer-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "llm-layer-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llm-layer-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "llm-layer-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "llm-layer-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "llm-layer-exporter.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{/* Pods the Service and the PodMonitor select: ours (daemonset) or the serving pods (sidecar). */}}
{{- define "llm-layer-exporter.podSelector" -}}
{{- if eq .Values.mode "sidecar" }}
{{- if empty .Values.sidecar.podSelector }}
{{- fail "sidecar.podSelector: labels of the serving pods are required in sidecar mode" }}
{{- end }}
{{- toYaml .Values.sidecar.podSelector }}
{{- else }}
{{- include "llm-layer-exporter.selectorLabels" . }}
{{- end }}
{{- end }}

{{/* --- kubernetes: where the kubelet's pod-resources folder is mounted, the socket in it, the ServiceAccount. */}}
{{- define "llm-layer-exporter.podResourcesDir" -}}
/var/lib/kubelet/pod-resources
{{- end }}

{{- define "llm-layer-exporter.podResourcesSocket" -}}
{{ include "llm-layer-exporter.podResourcesDir" . }}/kubelet.sock
{{- end }}

{{- define "llm-layer-exporter.serviceAccountName" -}}
{{- if .Values.kubernetes.serviceAccount.create }}
{{- default (include "llm-layer-exporter.fullname" .) .Values.kubernetes.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.kubernetes.serviceAccount.name }}
{{- end }}
{{- end }}
{{/* --- end kubernetes */}}

{{/* Where Secrets and ConfigMaps referenced by engines are mounted. */}}
{{- define "llm-layer-exporter.engineFilesDir" -}}
/etc/llm-layer-exporter/engines
{{- end }}

{{/*
The exporter's YAML config file (exporter/config.py): flag dests, engines, groups and the
diagnosis section. --gpu-source stays a container argument so Kubernetes can expand
$(NODE_IP) in it.
*/}}
{{- define "llm-layer-exporter.configFile" -}}
{{- $dir := include "llm-layer-exporter.engineFilesDir" . }}
{{- $engines := list }}
{{- range $i, $e := .Values.engines }}
{{- $out := dict "url" $e.url }}
{{- range $from, $to := dict "name" "name" "type" "type" "interval" "interval" "timeout" "timeout" "maxSeries" "max_series" "maxBodyBytes" "max_body_bytes" "pid" "pid" "process" "process" "tlsVerify" "tls_verify" "followRedirects" "follow_redirects" "probe" "probe" }}
{{- if hasKey $e $from }}{{ $_ := set $out $to (get $e $from) }}{{ end }}
{{- end }}
{{- if $e.bearerTokenSecret }}{{ $_ := set $out "bearer_token_file" (printf "%s/%d/token" $dir $i) }}{{ end }}
{{- if $e.caBundleConfigMap }}{{ $_ := set $out "ca_bundle" (printf "%s/%d/ca.crt" $dir $i) }}{{ end }}
{{- with $e.basicAuth }}{{ $_ := set $out "basic_auth" (dict "username" .username "password_file" (printf "%s/%d/password" $dir $i)) }}{{ end }}
{{- $engines = append $engines $out }}
{{- end }}
{{- $cfg := dict "listen_address" (printf "0.0.0.0:%d" (int .Values.port)) "gpu_interval" .Values.gpu.interval "log_level" .Values.logLevel "engines" $engines }}
{{- with .Values.groups }}{{ $_ := set $cfg "groups" . }}{{ end }}
{{- with .Values.diagnosis }}{{ $_ := set $cfg "diagnosis" . }}{{ end }}
{{- /* the `metrics:` section of exporter/familyfilter.py, only the lists given */}}
{{- $m := dict }}
{{- with .Values.metrics }}{{ with .include }}{{ $_ := set $m "include" . }}{{ end }}{{ with .exclude }}{{ $_ := set $m "exclude" . }}{{ end }}{{ end }}
{{- with $m }}{{ $_ := set $cfg "metrics" . }}{{ end }}
{{- /* --- kubernetes: the `kubernetes:` section of exporter/kubernetes/settings.py */}}
{{- if .Values.kubernetes.enabled }}
{{- $k := .Values.kubernetes }}
{{- $ks := dict "enabled" true "interval" $k.interval "gpu_labels" $k.gpuSeriesLabels "pod_resources_socket" (include "llm-layer-exporter.podResourcesSocket" .) "discovery" $k.discovery.enabled "discovery_interval" $k.discovery.interval "process_sampler" $k.discovery.processSampler "tls_verify" $k.discovery.tlsVerify }}
{{- with $k.podLabels }}{{ $_ := set $ks "pod_labels" . }}{{ end }}
{{- $_ := set $cfg "kubernetes" $ks }}
{{- end }}
{{- /* --- end kubernetes */}}
{{- toYaml $cfg }}
{{- end }}

{{/*
The exporter container. Used by the DaemonSet and, through
"llm-layer-exporter.sidecarContainer", inside the user's serving pod.
*/}}
{{- define "llm-layer-exporter.container" -}}
{{- $sidecar := eq .Values.mode "sidecar" -}}
- name: llm-layer-exporter
  image: {{ include "llm-layer-exporter.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - serve
    - --config=/etc/llm-layer-exporter/config/config.yaml
    - --gpu-source={{ .Values.gpu.source }}
    {{- if and .Values.kubernetes.enabled (eq .Values.kubernetes.discovery.from "kubelet") }}
    - --kubernetes-pods-url=https://$(NODE_IP):10250/pods
    {{- end }}
    {{- range .Values.extraArgs }}
    - {{ . | quote }}
    {{- end }}
  env:
    - name: NODE_IP
      valueFrom:
        fieldRef:
          fieldPath: status.hostIP
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    {{- with .Values.gpu.dcgmExporterUrl }}
    - name: LLM_EXPORTER_DCGM_EXPORTER_URL
      value: {{ . | quote }}
    {{- end }}
    {{- if and (not $sidecar) .Values.gpu.visibleDevices }}
    - name: NVIDIA_VISIBLE_DEVICES
      value: {{ .Values.gpu.visibleDevices | quote }}
    {{- end }}
    {{- with .Values.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: llm-exporter
      containerPort: {{ .Values.port }}
      protocol: TCP
  {{- if .Values.probes.enabled }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: llm-exporter
      scheme: {{ .Values.probes.scheme }}
    initialDelaySeconds: 10
    periodSeconds: 20
    timeoutSeconds: 5
  {{- /* A sidecar's readiness would gate the serving pod's; only the DaemonSet gets one. */}}
  {{- if not $sidecar }}
  readinessProbe:
    httpGet:
      path: /readyz
      port: llm-exporter
      scheme: {{ .Values.probes.scheme }}
    periodSeconds: 10
    timeoutSeconds: 5
  {{- end }}
  {{- end }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- if and .Values.kubernetes.enabled .Values.kubernetes.podResources.runAsRoot }}
    {{- /* the kubelet's socket is root-only; root here still has no capabilities */}}
    {{- toYaml (mergeOverwrite (deepCopy .Values.securityContext) (dict "runAsNonRoot" false "runAsUser" 0)) | nindent 4 }}
    {{- else }}
    {{- toYaml .Values.securityContext | nindent 4 }}
    {{- end }}
  volumeMounts:
    - name: llm-exporter-config
      mountPath: /etc/llm-layer-exporter/config
      readOnly: true
    {{- if .Values.kubernetes.enabled }}
    - name: llm-exporter-pod-resources
      mountPath: {{ include "llm-layer-exporter.podResourcesDir" . }}
      readOnly: true
    {{- end }}
    - name: llm-exporter-tmp
      mountPath: /tmp
    {{- range $i, $e := .Values.engines }}
    {{- if or $e.bearerTokenSecret $e.caBundleConfigMap $e.basicAuth }}
    - name: llm-exporter-engine-{{ $i }}
      mountPath: {{ include "llm-layer-exporter.engineFilesDir" $ }}/{{ $i }}
      readOnly: true
    {{- end }}
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}

{{- define "llm-layer-exporter.volumes" -}}
- name: llm-exporter-config
  configMap:
    name: {{ include "llm-layer-exporter.fullname" . }}-config
- name: llm-exporter-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if .Values.kubernetes.enabled }}
- name: llm-exporter-pod-resources
  hostPath:
    path: {{ .Values.kubernetes.podResources.hostPath }}
    type: Directory
{{- end }}
{{- range $i, $e := .Values.engines }}
{{- if or $e.bearerTokenSecret $e.caBundleConfigMap $e.basicAuth }}
- name: llm-exporter-engine-{{ $i }}
  projected:
    sources:
      {{- with $e.bearerTokenSecret }}
      - secret:
          name: {{ .name }}
          items:
            - key: {{ .key }}
              path: token
      {{- end }}
      {{- with $e.basicAuth }}
      - secret:
          name: {{ .passwordSecret.name }}
          items:
            - key: {{ .passwordSecret.key }}
              path: password
      {{- end }}
      {{- with $e.caBundleConfigMap }}
      - configMap:
          name: {{ .name }}
          items:
            - key: {{ .key }}
              path: ca.crt
      {{- end }}
{{- end }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Sidecar mode: include these in your serving pod (the chart as a dependency of your chart):

  containers:
    {{- include "llm-layer-exporter.sidecarContainer" (index .Subcharts "llm-layer-exporter") | nindent 8 }}
  volumes:
    {{- include "llm-layer-exporter.sidecarVolumes" (index .Subcharts "llm-layer-exporter") | nindent 8 }}

and set shareProcessNamespace: true on the pod for the process sampler.
*/}}
{{- define "llm-layer-exporter.sidecarContainer" -}}
{{- if ne .Values.mode "sidecar" }}
{{- fail "llm-layer-exporter.sidecarContainer: set mode: sidecar in the llm-layer-exporter values" }}
{{- end }}
{{- include "llm-layer-exporter.container" . }}
{{- end }}

{{- define "llm-layer-exporter.sidecarVolumes" -}}
{{- include "llm-layer-exporter.volumes" . }}
{{- end }}

{{/* A pod annotation that rolls the pods when the config changes. */}}
{{- define "llm-layer-exporter.configChecksum" -}}
checksum/llm-layer-exporter-config: {{ include "llm-layer-exporter.configFile" . | sha256sum }}
{{- end }}

{{/* One scrape endpoint of a ServiceMonitor or PodMonitor: (dict "ctx" $ "monitor" .Values.xMonitor) */}}
{{- define "llm-layer-exporter.scrapeEndpoint" -}}
{{- $m := .monitor -}}
- port: llm-exporter
  path: /metrics
  interval: {{ $m.interval }}
  scrapeTimeout: {{ $m.scrapeTimeout }}
  scheme: {{ $m.scheme }}
  {{- with $m.tlsConfig }}
  tlsConfig:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  relabelings:
    - action: replace
      targetLabel: job
      replacement: {{ .ctx.Values.jobName }}
    - action: replace
      sourceLabels: [__meta_kubernetes_pod_node_name]
      targetLabel: node
    {{- with $m.relabelings }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $m.metricRelabelings }}
  metricRelabelings:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
