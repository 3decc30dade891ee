{{/*
The placement rules of the webhook (apps/scheduler/gpu_scheduler/placement,
webhook/patch.py) in CEL, for admission.mode policy: kube-apiserver evaluates
them itself, so no pod of ours waits for a webhook call. The two are held
equal by tests/e2e/test_admission_policy_equality.py, which sends the same
pods through the policy and through the webhook and compares what each
admitted, field by field, and the lines each refusal names.

CEL has no functions of our own: a rule that several expressions need is a
Helm define or a variable, and each line of the map is read once into fields
(variables.fields):
  ['skip']                                  blank line or # comment
  ['no=' | 'no:']                           not <index>=<node>:<devices>
  ['entry', index, node, devices]           its parts, index and node trimmed
Whitespace is what Go's strings.TrimSpace strips (CEL's trim()); the Python
grammar strips the same set (placement/grammar.py, SPACE).
*/}}

{{/* The pod's index as Kubernetes gave it, "" when none may be read (placement/pod_index.py). */}}
{{- define "gpu-scheduler.cel.indexText" -}}
variables.labels[?'apps.kubernetes.io/pod-index'].orValue(
variables.labels[?'batch.kubernetes.io/job-completion-index'].orValue(
variables.annotations[?'batch.kubernetes.io/job-completion-index'].orValue(
object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false) && r.kind != 'StatefulSet') ? '' :
object.metadata.?name.orValue('').find('-[0-9]+$').replace('-', ''))))
{{- end -}}

{{/* The value of decimal digits as canonical digits ("007" is "7"). */}}
{{- define "gpu-scheduler.cel.canonical" -}}
({{ . }}.find('[1-9][0-9]*$') == '' ? '0' : {{ . }}.find('[1-9][0-9]*$'))
{{- end -}}

{{/* Decimal digits of a value of at most 2^31-1: StatefulSet ordinals and Job indexes are int32, CUDA ordinals a C int. */}}
{{- define "gpu-scheduler.cel.int32" -}}
({{ . }}.matches('^[0-9]+$') && (size({{ include "gpu-scheduler.cel.canonical" . }}) < 10 || (size({{ include "gpu-scheduler.cel.canonical" . }}) == 10 && int({{ include "gpu-scheduler.cel.canonical" . }}) <= 2147483647)))
{{- end -}}

{{/* One device of a line, trimmed, as the map accepts it: an ordinal or a GPU-/MIG- UUID. */}}
{{- define "gpu-scheduler.cel.device" -}}
({{ include "gpu-scheduler.cel.int32" . }} || {{ . }}.matches('^(GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}|MIG-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}|MIG-GPU-[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}/[0-9]+/[0-9]+)$'))
{{- end -}}

{{/*
What is wrong with line i (fields f, its devices trimmed in variables.lineDevices[i]), "" when nothing;
the checks and their order are grammar.py's.
*/}}
{{- define "gpu-scheduler.cel.lineError" -}}
f[0] == 'skip' ? '' :
f[0] == 'no=' ? 'expected <index>=<node>:<devices> (no \'=\')' :
f[0] == 'no:' ? 'expected <index>=<node>:<devices> (no \':\' after the node)' :
!f[1].matches('^[0-9]+$') ? 'the index is not a non-negative integer' :
!{{ include "gpu-scheduler.cel.int32" "f[1]" }} ? 'the index is larger than 2147483647' :
f[2] == '' ? 'missing node name before \':\'' :
!((size(f[2]) <= 253 && f[2].matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')) ||
  (size(f[2]) <= 63 && f[2].matches('^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$'))) ?
  'the node is neither a Kubernetes node name (lowercase DNS-1123 subdomain, at most 253 characters) nor an alias label value (at most 63 characters)' :
f[3].trim() == '' ? 'no devices after \':\'' :
variables.lineDevices[i].exists(d, d == '') ? 'empty device (stray comma?)' :
!variables.lineDevices[i].all(d, {{ include "gpu-scheduler.cel.device" "d" }}) ?
  'a device is neither a non-negative integer of at most 2147483647 nor a GPU-<uuid> / MIG-<uuid> identifier' :
variables.lineIds[i].exists(j, x, j > 0 && variables.lineIds[i][j - 1] == x) ?
  'a device appears twice' :
variables.lineDevices[i].filter(d, d.startsWith('MIG-')).size() > 1 ?
  'more than one MIG device: one CUDA process sees at most one MIG device, so give each pod a single MIG device' :
variables.lineDevices[i].exists(d, d.startsWith('MIG-')) && variables.lineDevices[i].size() > 1 ?
  'a MIG device beside whole GPUs: one CUDA process sees at most one MIG device and no GPU beside it' :
variables.lineDevices[i].exists(d, d.matches('^[0-9]+$')) && variables.lineDevices[i].exists(d, d.startsWith('GPU-')) ?
  'GPUs named by ordinal and by UUID, which may be one GPU twice: write every device of a line the same way (all ordinals or all UUIDs)' :
''
{{- end -}}

{{/*
The JSON patch operations that give each container of one list (.field) its
placement env, as webhook/patch.py's placement_env leaves it:
CUDA_VISIBLE_DEVICES takes the place of the first such entry (later ones and
any valueFrom are dropped) or is appended, and CUDA_DEVICE_ORDER=PCI_BUS_ID
follows it unless the container sets that itself. Entries are edited in
place (replace, remove from the last, add): a patch value can only hold
entries built here, not the pod's own. None for a container that has it.
.bind (bind mode): the entry is the constant one that reads the bind's
devices annotation (gpu-scheduler.cel.readsBind), not variables.devices.
.spec: where the pod spec sits in the object, "spec" (a Pod, the default)
or "spec.template.spec" (a workload's pod template).
*/}}
{{- define "gpu-scheduler.cel.envPatches" -}}
{{- $spec := .spec | default "spec" -}}
{{- $type := printf "Object.%s.%s.env" $spec .field -}}
{{- $path := printf "'/%s/%s/' + string(i) + '/env'" ($spec | replace "." "/") .field -}}
{{- $cuda := printf "%s{name: 'CUDA_VISIBLE_DEVICES', value: variables.devices}" $type -}}
{{- $has := "c.?env.orValue([]).filter(e, e.name == 'CUDA_VISIBLE_DEVICES').size() == 1 &&\n    c.env.exists(e, e.name == 'CUDA_VISIBLE_DEVICES' && e.?value.orValue('') == variables.devices && !has(e.valueFrom)) &&\n    c.env.exists(e, e.name == 'CUDA_DEVICE_ORDER')" -}}
{{- if .bind -}}
{{- $cuda = printf "%s{name: 'CUDA_VISIBLE_DEVICES', valueFrom: %s.valueFrom{fieldRef: %s.valueFrom.fieldRef{fieldPath: %s}}}" $type $type $type (include "gpu-scheduler.cel.bindFieldPath" .) -}}
{{- $has = include "gpu-scheduler.cel.readsBind" . -}}
{{- end -}}
{{- $order := printf "%s{name: 'CUDA_DEVICE_ORDER', value: 'PCI_BUS_ID'}" $type -}}
object.{{ $spec }}.?{{ .field }}.orValue([]).transformList(i, c,
  !({{ $has }}),
  c.?env.orValue([]).size() == 0 ?
    [JSONPatch{op: 'add', path: {{ $path }}, value: [{{ $cuda }}, {{ $order }}]}] :
  !c.env.exists(e, e.name == 'CUDA_VISIBLE_DEVICES') ?
    [JSONPatch{op: 'add', path: {{ $path }} + '/-', value: {{ $cuda }}}] +
    (c.env.exists(e, e.name == 'CUDA_DEVICE_ORDER') ? [] : [JSONPatch{op: 'add', path: {{ $path }} + '/-', value: {{ $order }}}]) :
  [JSONPatch{op: 'replace', path: {{ $path }} + '/' + string(c.env.map(e, e.name).indexOf('CUDA_VISIBLE_DEVICES')), value: {{ $cuda }}}] +
  c.env.transformList(k, e, e.name == 'CUDA_VISIBLE_DEVICES' && k > c.env.map(e, e.name).indexOf('CUDA_VISIBLE_DEVICES'), k).reverse()
    .map(k, JSONPatch{op: 'remove', path: {{ $path }} + '/' + string(k)}) +
  (c.env.exists(e, e.name == 'CUDA_DEVICE_ORDER') ? [] :
    [JSONPatch{op: 'add', path: {{ $path }} + '/' + string(c.env.map(e, e.name).indexOf('CUDA_VISIBLE_DEVICES') + 1), value: {{ $order }}}])
).flatten()
{{- end }}

{{/*
A plain map, as grammar.py's fast path has it: every line <index>=<node>:<ordinals>
with no space, comment or CR, numbers of at most 9 digits (never above
2^31-1) and no run of 254 node characters (no node name too long). One
regex over the whole text reads it, at a cost that grows with its length
only: 10,000 lines fit CEL's limit. Other maps are read line by line, up to
admission.policyMaxLines lines.
*/}}
{{- define "gpu-scheduler.cel.plainMap" -}}
{{- $node := `[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:[.][a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*` -}}
{{- $entry := printf `[0-9]{1,9}=%s:[0-9]{1,9}(?:,[0-9]{1,9})*` $node -}}
(variables.mapText.matches('^(?:{{ $entry }}\n)*{{ $entry }}\n?$') && !variables.mapText.matches('[-a-z0-9.]{254}'))
{{- end -}}

{{/* The variables both policies read: the pod, its map, its index and the line that gives it. */}}
{{- define "gpu-scheduler.cel.commonVariables" -}}
- name: annotations
  expression: "object.metadata.?annotations.orValue({})"
- name: labels
  expression: "object.metadata.?labels.orValue({})"
- name: mapText
  expression: "variables.annotations[?'gpu-scheduling-map'].orValue('')"
# The pod's index as Kubernetes gave it.
- name: indexText
  expression: >-
    {{- include "gpu-scheduler.cel.indexText" . | nindent 4 }}
# Its value as canonical digits; "" when it is no index a line can have.
- name: index
  expression: >-
    {{ include "gpu-scheduler.cel.int32" "variables.indexText" }} ? {{ include "gpu-scheduler.cel.canonical" "variables.indexText" }} : ''
- name: plain
  expression: >-
    {{ include "gpu-scheduler.cel.plainMap" . }}
- name: stripped
  expression: "variables.mapText.split('\\n').map(l, l.trim())"
# Each line in fields (see the top of this file); read for maps that are not plain.
- name: fields
  expression: >-
    variables.stripped.map(t,
      t == '' || t.startsWith('#') ? ['skip'] :
      !t.contains('=') ? ['no='] :
      !t.substring(t.indexOf('=') + 1).contains(':') ? ['no:'] :
      [ 'entry',
        t.substring(0, t.indexOf('=')).trim(),
        t.substring(t.indexOf('=') + 1).substring(0, t.substring(t.indexOf('=') + 1).indexOf(':')).trim(),
        t.substring(t.indexOf('=') + 1).substring(t.substring(t.indexOf('=') + 1).indexOf(':') + 1) ])
# The fields of the lines that give the pod's index (one in a valid map). In
# a plain map one regex finds the first; another map is read line by line
# unless it has more lines than CEL may read (the validating policy refuses it).
- name: entries
  expression: >-
    variables.index == '' ? [] :
    variables.plain ?
      [variables.mapText.find('(?:^|\n)0*' + variables.index + '=[^\n]*').trim()].filter(l, l != '')
        .map(l, ['entry', l.split('=')[0], l.split('=')[1].split(':')[0], l.split(':')[1]]) :
    size(variables.stripped) > {{ .maxLines }} ? [] :
    variables.fields.filter(f, f[0] == 'entry' && f[1].endsWith(variables.index == '0' ? '0' : variables.index) &&
      f[1].matches('^[0-9]+$') && {{ include "gpu-scheduler.cel.canonical" "f[1]" }} == variables.index)
- name: devices
  expression: >-
    size(variables.entries) == 1 ? variables.entries[0][3].split(',').map(d, d.trim()).join(',') : ''
{{- end -}}
