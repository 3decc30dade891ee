{{/*
The JSON patch operations that give each container of one list (.field) the
entry that reads the bind's devices annotation (gpu-scheduler.cel.readsBind),
as webhook/patch.py's bind_env leaves it: CUDA_VISIBLE_DEVICES takes the
place of the first such entry (later ones are dropped) or is appended, and
CUDA_DEVICE_ORDER=PCI_BUS_ID follows it unless the container sets that
itself. Entries are edited in place (replace, remove from the last, add): a
patch value can only hold entries built here, not the pod's own. None for a
container that has it. The entry is a constant: no CEL here reads the map.
.spec: where the pod spec sits in the object, "spec" (a Pod, the default)
or "spec.template.spec" (a workload's pod template).
*/}}
{{- define "gpu-scheduler.cel.envPatches" -}}
{{- $spec := .spec | default "spec" -}}
{{- $type := printf "Object.%s.%s.env" $spec .field -}}
{{- $path := printf "'/%s/%s/' + string(i) + '/env'" ($spec | replace "." "/") .field -}}
{{- $cuda := printf "%s{name: 'CUDA_VISIBLE_DEVICES', valueFrom: %s.valueFrom{fieldRef: %s.valueFrom.fieldRef{fieldPath: %s}}}" $type $type $type (include "gpu-scheduler.cel.bindFieldPath" .) -}}
{{- $has := include "gpu-scheduler.cel.readsBind" . -}}
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
