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
