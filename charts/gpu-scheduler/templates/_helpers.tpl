{{/* Names are cut at 63 characters: the limit of a label value and of most object names. */}}
{{- define "gpu-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-scheduler.fullname" -}}
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

{{- define "gpu-scheduler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels every object carries; "component" says which part of the release it belongs to. */}}
{{- define "gpu-scheduler.labels" -}}
helm.sh/chart: {{ include "gpu-scheduler.chart" .root }}
{{ include "gpu-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Values.image.tag | default .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: gpu-scheduler
{{- end -}}

{{- define "gpu-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-scheduler.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpu-scheduler.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- if .Values.image.registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" .Values.image.registry) .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Object names, one place each, so the Jobs' arguments and the objects they name cannot drift apart. */}}
{{- define "gpu-scheduler.schedulerName" -}}{{ include "gpu-scheduler.fullname" . }}-scheduler{{- end -}}
{{- define "gpu-scheduler.webhookName" -}}{{ include "gpu-scheduler.fullname" . }}-webhook{{- end -}}
{{- define "gpu-scheduler.certsName" -}}{{ include "gpu-scheduler.fullname" . }}-certs{{- end -}}
{{- define "gpu-scheduler.webhookConfigurationName" -}}{{ include "gpu-scheduler.fullname" . }}{{- end -}}
{{- define "gpu-scheduler.tlsSecretName" -}}
{{- if eq .Values.certs.mode "provided" -}}
{{- required "certs.existingSecret is required when certs.mode is provided: name the Secret that holds tls.crt, tls.key and ca.crt" .Values.certs.existingSecret -}}
{{- else -}}
{{- include "gpu-scheduler.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/* Preferred anti-affinity on the hostname: replicas spread over nodes when they can, and still run on a one-node cluster. */}}
{{- define "gpu-scheduler.affinity" -}}
{{- if .affinity -}}
{{- toYaml .affinity -}}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "gpu-scheduler.selectorLabels" (dict "root" .root "component" .component) | nindent 12 }}
{{- end -}}
{{- end -}}

{{/* The pod-level settings every pod of the chart shares. */}}
{{- define "gpu-scheduler.podCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Python on a read-only root filesystem still needs somewhere to write: /tmp. */}}
{{- define "gpu-scheduler.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end -}}
{{- define "gpu-scheduler.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{/* The MatchCondition that keeps every other scheduler's objects away from the webhook. */}}
{{- define "gpu-scheduler.podMatchCondition" -}}
- name: scheduled-by-us
  expression: has(object.spec.schedulerName) && object.spec.schedulerName == {{ .Values.schedulerName | squote }}
{{- end -}}
{{- define "gpu-scheduler.templateMatchCondition" -}}
- name: template-scheduled-by-us
  expression: >-
    has(object.spec.template) && has(object.spec.template.spec) &&
    has(object.spec.template.spec.schedulerName) &&
    object.spec.template.spec.schedulerName == {{ .Values.schedulerName | squote }}
{{- end -}}

{{/*
The webhooks' namespaceSelector and objectSelector. They never see kube-system
nor our own namespace, so they can never block the pods that would fix them;
and never a namespace or object labelled gpu-scheduler.io/webhook=disabled,
the opt-out (NotIn also matches objects without the label).
*/}}
{{- define "gpu-scheduler.webhookNamespaceSelector" -}}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        - kube-system
        - {{ .Release.Namespace }}
    {{- include "gpu-scheduler.webhookOptOut" . | nindent 4 }}
objectSelector:
  matchExpressions:
    {{- include "gpu-scheduler.webhookOptOut" . | nindent 4 }}
{{- end -}}
{{- define "gpu-scheduler.webhookOptOut" -}}
- key: gpu-scheduler.io/webhook
  operator: NotIn
  values:
    - disabled
{{- end -}}

{{/* Sync wave 1 for the webhook configurations; in cert-manager mode, where the cainjector finds the CA. */}}
{{- define "gpu-scheduler.webhookAnnotations" -}}
argocd.argoproj.io/sync-wave: "1"
{{- if eq .Values.certs.mode "cert-manager" }}
cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "gpu-scheduler.webhookName" . }}
{{- end }}
{{- end -}}

{{/* The certificate Jobs' ServiceAccount and RBAC: hooks before the Jobs of both phases, gone once they succeeded. */}}
{{- define "gpu-scheduler.certsRbacHook" -}}
{{- if eq .Values.certs.mode "provided" }}
helm.sh/hook: post-install,post-upgrade
{{- else }}
helm.sh/hook: pre-install,pre-upgrade,post-install,post-upgrade
{{- end }}
helm.sh/hook-weight: "-10"
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}

{{/* The priority classes the API server may limit to kube-system unless a quota names them. */}}
{{- define "gpu-scheduler.criticalClasses" -}}
{{- list "system-cluster-critical" "system-node-critical" | toJson -}}
{{- end -}}

{{/* A PodDisruptionBudget for one component, only when it has more than one replica: with one, minAvailable would block every drain. */}}
{{- define "gpu-scheduler.podDisruptionBudget" -}}
{{- if gt (int .replicas) 1 }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "gpu-scheduler.labels" (dict "root" .root "component" .component) | nindent 4 }}
  annotations:
    argocd.argoproj.io/sync-wave: {{ .wave | quote }}
spec:
  minAvailable: {{ .minAvailable }}
  selector:
    matchLabels:
      {{- include "gpu-scheduler.selectorLabels" (dict "root" .root "component" .component) | nindent 6 }}
{{- end }}
{{- end -}}

{{/*
The spec of a Job running `gpu-scheduler certs` for this release: the hook
Jobs and the renewal CronJob share it. Kept: an existing Secret still good for
these names. Written: a missing, expiring or mismatched one, after its new CA
was trusted in the webhook configurations (job mode; in provided mode the Role
forbids the write and the Job fails instead). preInstall: the configurations
may not exist yet.
*/}}
{{- define "gpu-scheduler.certsJobSpec" -}}
{{- $root := .root -}}
backoffLimit: 3
activeDeadlineSeconds: 300
template:
  metadata:
    labels:
      {{- include "gpu-scheduler.labels" (dict "root" $root "component" "certs") | nindent 6 }}
  spec:
    restartPolicy: Never
    serviceAccountName: {{ .serviceAccount }}
    # The ServiceAccount leaves the token out; these pods need it.
    automountServiceAccountToken: true
    {{- include "gpu-scheduler.podCommon" $root | nindent 4 }}
    containers:
      - name: certs
        image: {{ include "gpu-scheduler.image" $root }}
        imagePullPolicy: {{ $root.Values.image.pullPolicy }}
        args:
          - certs
          - --secret={{ include "gpu-scheduler.tlsSecretName" $root }}
          - --namespace={{ $root.Release.Namespace }}
          - --service={{ include "gpu-scheduler.webhookName" $root }}
          - --patch-webhook={{ include "gpu-scheduler.webhookConfigurationName" $root }}
          {{- if .preInstall }}
          - --allow-missing-webhook
          {{- end }}
          - --log-format={{ $root.Values.logFormat }}
          - --log-level={{ $root.Values.logLevel }}
        resources:
          {{- toYaml $root.Values.certs.job.resources | nindent 10 }}
        securityContext:
          {{- toYaml $root.Values.securityContext | nindent 10 }}
        volumeMounts:
          {{- include "gpu-scheduler.tmpVolumeMount" $root | nindent 10 }}
    volumes:
      {{- include "gpu-scheduler.tmpVolume" $root | nindent 6 }}
{{- end -}}
