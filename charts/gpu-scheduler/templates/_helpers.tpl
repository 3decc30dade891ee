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
{{- with .root.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
commonAnnotations, each on a line of its own indented for metadata.annotations
and led by a newline: `annotations:{{ include ... }}` renders exactly as
before when there are none. The schema refuses the keys the chart sets itself
(hooks, sync waves, cert-manager's CA injection), so none is written twice.
*/}}
{{- define "gpu-scheduler.commonAnnotations" -}}
{{- with .Values.commonAnnotations }}
{{ toYaml . | indent 4 }}
{{- end }}
{{- end -}}

{{- define "gpu-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-scheduler.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
The default image.registry is a placeholder: nobody can pull from it, and a
first install with it would leave every pod in ImagePullBackOff. Refused
before anything is created, saying what to set.
*/}}
{{- define "gpu-scheduler.image" -}}
{{- $placeholder := "registry.gitlab.com/your-group/gpu-scheduler" -}}
{{- /* global.imageRegistry (a parent chart's, for both charts at once) wins over image.registry. */ -}}
{{- $registry := (.Values.global).imageRegistry | default .Values.image.registry -}}
{{- if eq (trimSuffix "/" $registry) $placeholder -}}
{{- fail (printf "image.registry is still the placeholder %s: set the registry your release pipeline pushed the images to, --set image.registry=<your registry> (its $CI_REGISTRY_IMAGE, e.g. registry.gitlab.com/<group>/<project>), or --set image.registry= (empty) for images loaded into the nodes, as on KinD" $placeholder) -}}
{{- end -}}
{{- $repository := .Values.image.repository -}}
{{- if $registry -}}
{{- $repository = printf "%s/%s" (trimSuffix "/" $registry) .Values.image.repository -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" $repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* Object names, one place each, so the Jobs' arguments and the objects they name cannot drift apart. */}}
{{- define "gpu-scheduler.schedulerName" -}}{{ include "gpu-scheduler.fullname" . }}-scheduler{{- end -}}
{{- define "gpu-scheduler.webhookName" -}}{{ include "gpu-scheduler.fullname" . }}-webhook{{- end -}}
{{- define "gpu-scheduler.certsName" -}}{{ include "gpu-scheduler.fullname" . }}-certs{{- end -}}
{{- define "gpu-scheduler.agentName" -}}{{ include "gpu-scheduler.fullname" . }}-agent{{- end -}}
{{- define "gpu-scheduler.webhookConfigurationName" -}}{{ include "gpu-scheduler.fullname" . }}{{- end -}}
{{- define "gpu-scheduler.tlsSecretName" -}}
{{- if eq .Values.certs.mode "provided" -}}
{{- required "certs.existingSecret is required when certs.mode is provided: name the Secret that holds tls.crt, tls.key and ca.crt" .Values.certs.existingSecret -}}
{{- else -}}
{{- include "gpu-scheduler.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}

{{/*
The ServiceAccount a component's pods run as (.serviceAccount: its values,
.default: the chart's name for it). create false: one that exists already,
which must be named (the chart binds its Roles to it; falling back to the
namespace's "default" account would hand those rights to every pod there).
*/}}
{{- define "gpu-scheduler.serviceAccountName" -}}
{{- if .serviceAccount.create -}}
{{- default .default .serviceAccount.name -}}
{{- else -}}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false: name the ServiceAccount its pods run as" .component .component) .serviceAccount.name -}}
{{- end -}}
{{- end -}}
{{- define "gpu-scheduler.webhookServiceAccountName" -}}
{{- include "gpu-scheduler.serviceAccountName" (dict "serviceAccount" .Values.webhook.serviceAccount "default" (include "gpu-scheduler.webhookName" .) "component" "webhook") -}}
{{- end -}}
{{- define "gpu-scheduler.agentServiceAccountName" -}}
{{- include "gpu-scheduler.serviceAccountName" (dict "serviceAccount" .Values.agent.serviceAccount "default" (include "gpu-scheduler.agentName" .) "component" "agent") -}}
{{- end -}}
{{/* The certificate Jobs' account, and the renewal CronJob's: <name>-renewal when the chart creates both, the same one otherwise. */}}
{{- define "gpu-scheduler.certsServiceAccountName" -}}
{{- include "gpu-scheduler.serviceAccountName" (dict "serviceAccount" .Values.certs.serviceAccount "default" (include "gpu-scheduler.certsName" .) "component" "certs") -}}
{{- end -}}
{{- define "gpu-scheduler.renewalServiceAccountName" -}}
{{- $name := include "gpu-scheduler.certsServiceAccountName" . -}}
{{- if .Values.certs.serviceAccount.create -}}{{ $name }}-renewal{{- else -}}{{ $name }}{{- end -}}
{{- end -}}

{{/* A ServiceAccount's annotations: the user's, then the chart's own (which win: hooks and sync waves order the install). */}}
{{- define "gpu-scheduler.serviceAccountAnnotations" -}}
{{- toYaml (merge (fromYaml .chart) (deepCopy (.user | default dict))) -}}
{{- end -}}

{{/* A pod template's labels: the chart's (selector labels among them, never overridden) and podLabels. */}}
{{- define "gpu-scheduler.podLabels" -}}
{{- toYaml (merge (include "gpu-scheduler.labels" . | fromYaml) (deepCopy (.podLabels | default dict))) -}}
{{- end -}}

{{/* The list of topologySpreadConstraints; one without a labelSelector counts the component's own pods. */}}
{{- define "gpu-scheduler.topologySpreadConstraints" -}}
{{- $selector := include "gpu-scheduler.selectorLabels" . | fromYaml -}}
{{- $constraints := list -}}
{{- range .constraints -}}
{{- $constraint := deepCopy . -}}
{{- if not (hasKey $constraint "labelSelector") -}}
{{- $_ := set $constraint "labelSelector" (dict "matchLabels" $selector) -}}
{{- end -}}
{{- $constraints = append $constraints $constraint -}}
{{- end -}}
{{- toYaml $constraints -}}
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

{{/*
The pod-level settings every pod of the chart shares, for one component
(.root, .values: the component's values, e.g. .Values.scheduler): its
securityContext is the chart's podSecurityContext with the component's own
podSecurityContext merged over it.
*/}}
{{- define "gpu-scheduler.podCommon" -}}
securityContext:
  {{- include "gpu-scheduler.mergedContext" (list .root.Values.podSecurityContext .values.podSecurityContext) | nindent 2 }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
{{/* A container's securityContext: the chart's, with the component's (.values.securityContext) merged over it. */}}
{{- define "gpu-scheduler.containerSecurityContext" -}}
{{- include "gpu-scheduler.mergedContext" (list .root.Values.securityContext .values.securityContext) -}}
{{- end -}}
{{/* (list base override) as YAML: override's keys replace base's, at every depth; neither is changed. */}}
{{- define "gpu-scheduler.mergedContext" -}}
{{- toYaml (mergeOverwrite (deepCopy (index . 0)) (deepCopy (index . 1 | default dict))) -}}
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

{{/*
CEL for matchConditions, about the pod template at .path: "object" for a Pod,
"object.spec.template" for a workload, "object.spec.jobTemplate.spec.template"
for a CronJob. Every field is tested with has() before it is read: an
expression that errors counts as a webhook failure, and with failurePolicy
Fail would refuse the request.
*/}}
{{/* has(a.b) && has(a.b.c) && ...: every field of the path exists. */}}
{{- define "gpu-scheduler.celPresent" -}}
{{- $parts := splitList "." . -}}
{{- $checks := list -}}
{{- range $i, $_ := $parts -}}
{{- if gt $i 0 -}}
{{- $checks = append $checks (printf "has(%s)" (join "." (slice $parts 0 (add1 $i)))) -}}
{{- end -}}
{{- end -}}
{{- join " && " $checks -}}
{{- end -}}
{{/* The template's schedulerName is ours. */}}
{{- define "gpu-scheduler.celScheduledByUs" -}}
({{ include "gpu-scheduler.celPresent" (printf "%s.spec.schedulerName" .path) }} && {{ .path }}.spec.schedulerName == {{ .schedulerName | squote }})
{{- end -}}
{{/* The template carries the map annotation. */}}
{{- define "gpu-scheduler.celHasMap" -}}
({{ include "gpu-scheduler.celPresent" (printf "%s.metadata.annotations" .) }} && 'gpu-scheduling-map' in {{ . }}.metadata.annotations)
{{- end -}}

{{/*
The MatchConditions of a webhook for the template at .path (see above):
  scheduled-by-us: every other scheduler's objects never reach the webhook,
    so an outage of it can only ever touch our own.
  map-changed-on-update: an UPDATE reaches the webhook only when it changes
    the map (or makes the template ours). A controller removing a finalizer,
    a label added by hand, a rollout restart: none of them can be refused
    for a map that was there before, nor blocked while the webhook is down.
*/}}
{{- define "gpu-scheduler.matchConditions" -}}
{{- $new := .path -}}
{{- $old := printf "oldObject%s" (trimPrefix "object" .path) -}}
{{- $newMap := include "gpu-scheduler.celHasMap" $new -}}
{{- $oldMap := include "gpu-scheduler.celHasMap" $old -}}
- name: scheduled-by-us
  expression: >-
    {{ include "gpu-scheduler.celScheduledByUs" (dict "path" $new "schedulerName" .schedulerName) }}
{{- if .onUpdate }}
- name: map-changed-on-update
  expression: >-
    request.operation != 'UPDATE' ||
    !{{ include "gpu-scheduler.celScheduledByUs" (dict "path" $old "schedulerName" .schedulerName) }} ||
    {{ $newMap }} != {{ $oldMap }} ||
    ({{ $newMap }} && {{ $new }}.metadata.annotations['gpu-scheduling-map'] != {{ $old }}.metadata.annotations['gpu-scheduling-map'])
{{- end }}
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

{{/* A PodDisruptionBudget for one component (.budget: its values), only when it has more than one replica: with one, minAvailable would block every drain. */}}
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
  annotations:{{ include "gpu-scheduler.commonAnnotations" .root }}
    argocd.argoproj.io/sync-wave: {{ .wave | quote }}
spec:
  minAvailable: {{ .budget.minAvailable }}
  {{- with .budget.unhealthyPodEvictionPolicy }}
  unhealthyPodEvictionPolicy: {{ . }}
  {{- end }}
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
    {{- include "gpu-scheduler.podCommon" (dict "root" $root "values" $root.Values.certs.job) | nindent 4 }}
    {{- /* Where the hook Jobs and the renewal run: an all-tainted cluster otherwise never runs them, and the install waits for ever. */}}
    {{- with $root.Values.certs.job.priorityClassName }}
    priorityClassName: {{ . }}
    {{- end }}
    {{- with $root.Values.certs.job.nodeSelector }}
    nodeSelector:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $root.Values.certs.job.tolerations }}
    tolerations:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with $root.Values.certs.job.affinity }}
    affinity:
      {{- toYaml . | nindent 6 }}
    {{- end }}
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
          {{- include "gpu-scheduler.containerSecurityContext" (dict "root" $root "values" $root.Values.certs.job) | nindent 10 }}
        volumeMounts:
          {{- include "gpu-scheduler.tmpVolumeMount" $root | nindent 10 }}
    volumes:
      {{- include "gpu-scheduler.tmpVolume" $root | nindent 6 }}
{{- end -}}

{{/*
A new pod of ours gets its devices from the bind: the scheduler writes them in
the Binding and every container reads them through a fieldRef; pods that
arrive without that entry get it from a MutatingAdmissionPolicy where the API
server serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy
(Kubernetes 1.36+), else from the webhook (gpu-scheduler.bindByPolicy).
admission.mode webhook and policy, which wrote the map line's devices into
every pod at CREATE, were removed: a values file that still asks for one fails
the render rather than silently getting bind mode. ("bind" and "" are still
accepted, and admission.policyMaxLines is ignored, so that values files and
`--reuse-values` of earlier versions render.)
*/}}
{{- define "gpu-scheduler.refuseRemovedAdmissionModes" -}}
{{- $mode := (.Values.admission).mode | default "bind" -}}
{{- $only := "bind is the only admission mode (the scheduler writes a pod's devices in its Binding; containers read them through a fieldRef). Remove admission.mode (and admission.policyMaxLines) from your values" -}}
{{- if has $mode (list "webhook" "policy") -}}
{{- fail (printf "admission.mode=%s was removed: %s; CHANGELOG.md says what else changes" $mode $only) -}}
{{- else if ne $mode "bind" -}}
{{- fail (printf "admission.mode=%s is no admission mode: %s" $mode $only) -}}
{{- end -}}
{{- end -}}
{{/* "true" where the API server serves MutatingAdmissionPolicy v1, else "". */}}
{{- define "gpu-scheduler.mutatingPolicyServed" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}true{{- end -}}
{{- end -}}
{{/* "true" on 1.36+: the MutatingAdmissionPolicy, not the webhook, gives a pod the entry it lacks. */}}
{{- define "gpu-scheduler.bindByPolicy" -}}
{{- if include "gpu-scheduler.mutatingPolicyServed" . -}}true{{- end -}}
{{- end -}}

{{/*
CEL: the env entry whose value is the bind's devices annotation
(placement/environment.py: bind_env_entry, reads_bind_annotation), and
whether container c's CUDA_VISIBLE_DEVICES reads it (every entry of that
name does, and there is one: with the name twice the kubelet takes the last).
An entry with a value beside it does not: a server-side apply of a template
whose entry has a literal value merges that value into the stored entry the
policy wrote, and only replacing the entry again keeps the object valid.
*/}}
{{- define "gpu-scheduler.cel.bindFieldPath" -}}"metadata.annotations['gpu-scheduler/cuda-visible-devices']"{{- end -}}
{{- define "gpu-scheduler.cel.readsBind" -}}
(c.?env.orValue([]).exists(e, e.name == 'CUDA_VISIBLE_DEVICES') && c.env.all(e, e.name != 'CUDA_VISIBLE_DEVICES' || (e.?valueFrom.?fieldRef.?fieldPath.orValue('') == {{ include "gpu-scheduler.cel.bindFieldPath" . }} && e.?value.orValue('') == '')))
{{- end -}}
{{/* Some init container or container of the pod at .path lacks the bind entry. */}}
{{- define "gpu-scheduler.cel.lacksBindEntry" -}}
({{ .path }}.spec.?initContainers.orValue([]).exists(c, !{{ include "gpu-scheduler.cel.readsBind" . }}) ||
{{ .path }}.spec.?containers.orValue([]).exists(c, !{{ include "gpu-scheduler.cel.readsBind" . }}))
{{- end -}}
{{/*
The matchConditions of the workload mutation (the policy on 1.36+, the webhook
on 1.35): a template of ours with a map that lacks the bind entry, and on
UPDATE only when the template itself changed. An UPDATE that leaves it alone
(a label, a finalizer, a StatefulSet of before the install) would otherwise
change the template: a rollout nobody asked for. A server-side re-apply of a
manifest without the entries takes them out and so changes the template: they
are put back, and the object is as it was.
*/}}
{{- define "gpu-scheduler.cel.workloadEntryConditions" -}}
- name: scheduled-by-us
  expression: >-
    {{ include "gpu-scheduler.celScheduledByUs" (dict "path" "object.spec.template" "schedulerName" .Values.schedulerName) }}
- name: has-map
  expression: >-
    {{ include "gpu-scheduler.celHasMap" "object.spec.template" }}
- name: lacks-bind-entry
  expression: >-
    {{- include "gpu-scheduler.cel.lacksBindEntry" (dict "path" "object.spec.template") | nindent 4 }}
- name: template-changed-on-update
  expression: >-
    request.operation != 'UPDATE' || object.spec.template != oldObject.spec.template
{{- end -}}
{{- define "gpu-scheduler.mutatingPolicyVersion" -}}v1{{- end -}}

{{/*
`helm upgrade --reuse-values` renders with the previous chart's defaults, not this
chart's: a value added since (here commonLabels, the probes) is then missing, and a probe
would silently vanish. Refused instead, saying what to run.
*/}}
{{- define "gpu-scheduler.valuesOfThisChart" -}}
{{- if not (and (hasKey .Values "commonLabels") (hasKey .Values.scheduler "livenessProbe") (hasKey .Values.webhook "livenessProbe")) -}}
{{- fail "these values lack ones this chart version added (commonLabels, scheduler.livenessProbe, ...): `helm upgrade --reuse-values` takes the previous chart's defaults. Upgrade with your values files (-f), or --reset-then-reuse-values (Helm 3.14+), which starts from this chart's defaults and keeps what you set" -}}
{{- end -}}
{{- end -}}
