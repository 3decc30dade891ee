{{/*
<release>-gpu-scheduler-check, or the release name when it already contains
the chart's name, so that two releases in one namespace never share an
object. 52 characters at most: a StatefulSet's pods carry the label
controller-revision-hash=<name>-<10 characters>, which must fit in 63.
*/}}
{{- define "gpu-scheduler-check.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpu-scheduler-check.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: check
{{- end -}}

{{- define "gpu-scheduler-check.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "gpu-scheduler-check.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpu-scheduler
{{- end -}}

{{/*
The default image.registry is a placeholder: nobody can pull from it, and a
first install with it would leave every pod in ImagePullBackOff. Refused
before anything is created, saying what to set.
*/}}
{{- define "gpu-scheduler-check.image" -}}
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

{{/*
The map checked against the cluster's nodes (nodeCheck), as JSON:
  checked: whether nodes were looked up. Not with nodeCheck.mode off, nor
           without a cluster (helm template, Argo CD, --dry-run=client): lookup
           then returns nothing, and nothing is claimed about the nodes.
  missing: "<index>=<node>" of each map line whose node no node of the cluster
           is called or carries as its nodeCheck.aliasLabel value: the
           scheduler can never place that pod, which would stay Pending.
  nodes, aliases: the cluster's node names and alias values (at most 10 each),
           for the message.
Map lines are read as the scheduler reads them: blank lines and # comments
skipped, the node between "=" and ":"; a line that asks for a count (`*`,
`*[<selector>]`) names no node.
*/}}
{{- define "gpu-scheduler-check.nodeCheck" -}}
{{- $result := dict "checked" false "missing" list "nodes" list "aliases" list -}}
{{- if ne .Values.nodeCheck.mode "off" -}}
{{- $found := (lookup "v1" "Node" "" "").items | default list -}}
{{- if $found -}}
{{- $known := dict -}}
{{- $names := list -}}
{{- $aliases := list -}}
{{- range $found -}}
{{- $_ := set $known .metadata.name true -}}
{{- $names = append $names .metadata.name -}}
{{- with index (.metadata.labels | default dict) $.Values.nodeCheck.aliasLabel -}}
{{- $_ := set $known . true -}}
{{- $aliases = append $aliases . -}}
{{- end -}}
{{- end -}}
{{- $missing := list -}}
{{- range splitList "\n" .Values.schedulingMap -}}
{{- $line := trim . -}}
{{- if and $line (not (hasPrefix "#" $line)) (contains "=" $line) -}}
{{- $index := regexReplaceAll "=.*$" $line "" | trim -}}
{{- $node := regexReplaceAll ":.*$" (regexReplaceAll "^[^=]*=" $line "") "" | trim -}}
{{- if and $node (not (hasPrefix "*" $node)) (not (hasKey $known $node)) -}}
{{- $missing = append $missing (printf "%s=%s" $index $node) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $result = dict "checked" true "missing" $missing "nodes" (sortAlpha $names | uniq) "aliases" (sortAlpha $aliases | uniq) -}}
{{- end -}}
{{- end -}}
{{- toJson $result -}}
{{- end -}}

{{/* "a, b, c" of at most 10 names, then how many more. */}}
{{- define "gpu-scheduler-check.someNames" -}}
{{- $names := . -}}
{{- if gt (len $names) 10 -}}
{{- printf "%s and %d more" (join ", " (slice $names 0 10)) (sub (len $names) 10) -}}
{{- else -}}
{{- join ", " $names | default "none" -}}
{{- end -}}
{{- end -}}

{{/* What the check found, in words (the notes' warning and the refusal share it). */}}
{{- define "gpu-scheduler-check.missingNodesMessage" -}}
{{- $check := include "gpu-scheduler-check.nodeCheck" . | fromJson -}}
the map names nodes this cluster does not have, so these pods can never be placed and would stay Pending: {{ join ", " $check.missing }}. The cluster's nodes: {{ include "gpu-scheduler-check.someNames" $check.nodes }}; values of their {{ .Values.nodeCheck.aliasLabel }} label: {{ include "gpu-scheduler-check.someNames" $check.aliases }}. Give the chart a map of your nodes and GPUs: --set-file schedulingMap=<file>, one <index>=<node>:<devices> line per pod (replicas: {{ .Values.replicas }}); `gpu-scheduler map generate` writes one from the GPUs your nodes publish (docs/gpu-inventory.md).
{{- end -}}

{{/* As in the gpu-scheduler chart: `helm upgrade --reuse-values` keeps the previous chart's defaults, without the values added since (nodeCheck, persistence). */}}
{{- define "gpu-scheduler-check.valuesOfThisChart" -}}
{{- $lacking := list -}}
{{- range list "nodeCheck" "persistence" -}}
{{- if not (hasKey $.Values .) }}{{ $lacking = append $lacking . }}{{ end -}}
{{- end -}}
{{- with $lacking -}}
{{- fail (printf "these values lack ones this chart version added (%s): `helm upgrade --reuse-values` takes the previous chart's defaults. Upgrade with your values files (-f), or --reset-then-reuse-values (Helm 3.14+), which starts from this chart's defaults and keeps what you set" (join ", " .)) -}}
{{- end -}}
{{- end -}}
