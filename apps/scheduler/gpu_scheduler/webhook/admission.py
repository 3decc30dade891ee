"""AdmissionReview in, AdmissionReview out: the webhook's decisions, as pure functions.

`mutate` gives every container of a new pod of our scheduler that lacks it
the CUDA_VISIBLE_DEVICES entry that reads the devices annotation the
scheduler's Binding writes. The map is read only for a pod created on a node
(spec.nodeName), which no Binding annotates: the webhook writes its
annotations instead, and refuses it when that node is not its map line's
(reading the node's alias label when it may read nodes).
`validate` rejects a workload whose map does not parse, so the mistake shows
at `kubectl apply` instead of as pods that never start.

Anything that is not a well-formed admission.k8s.io/v1 AdmissionReview raises
BadRequest; the API server never sends one, so it is a client's mistake, and
the HTTP layer answers 400 without the process noticing.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from ..placement import (
    CUDA_ENV,
    DEVICES_ANNOTATION,
    MAP_ANNOTATION,
    GpuRequest,
    InvalidMapError,
    MapEntry,
    PlacementError,
    annotation_bytes,
    bind_annotations,
    container_devices,
    may_be_alias,
    overflow_message,
    parse_map,
    placement_for,
    pod_key,
)
from . import gang_checks
from .nodes import NodeReader, NodeReadError
from .patch import (
    CONTAINER_LISTS,
    bind_patch,
    new_ephemeral_containers_patch,
)


def annotation_overflow(pod: Mapping, added: Mapping[str, str]) -> str | None:
    """Why the annotations this webhook adds (`added`) cannot be added, or None when they fit.

    Without this check the API server would refuse the patched pod with
    "metadata.annotations: Too long", which does not say that our annotation
    pushed it over nor what to shorten.
    """
    annotations = {**((pod.get("metadata") or {}).get("annotations") or {}), **added}
    return overflow_message(annotation_bytes(annotations), added, "this webhook adds")


API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# What Kubernetes answers for an object that fails validation; the API server
# passes the code and the message of a denial on to the client.
DENIED_CODE = 422
# Messages end up in kubectl output and events; a 3 MiB map must not.
MAX_MESSAGE = 4000

ALLOWED, PATCHED, DENIED = "allowed", "patched", "denied"


class BadRequest(ValueError):
    """The request is not an AdmissionReview this webhook can answer; str() says why."""


@dataclass(frozen=True)
class Answer:
    review: dict  # the AdmissionReview to send back
    result: str  # allowed, patched or denied
    fields: dict = field(default_factory=dict)  # what the log line reports
    # False when the object was let through unexamined (another scheduler's
    # pod, an operation we do not check): logged at debug level only, since
    # every pod in the cluster may pass through the webhook.
    examined: bool = True


# -- reading the request ---------------------------------------------------


def _mapping(value: object, where: str, optional: bool = True) -> dict:
    if value is None and optional:
        return {}
    if not isinstance(value, dict):
        raise BadRequest(f"{where} must be an object")
    return value


def _string(value: object, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"{where} must be a string")
    return value


def _list_of_objects(value: object, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise BadRequest(f"{where} must be a list of objects")
    return value


def _string_map(value: object, where: str) -> None:
    if value is not None and not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
        raise BadRequest(f"{where} must be an object of strings")


def read_review(review: object) -> dict:
    """The `request` of an admission.k8s.io/v1 AdmissionReview, checked."""
    review = _mapping(review, "the body", optional=False)
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        raise BadRequest(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got "
            f"{str(review.get('apiVersion'))[:60]!r} and {str(review.get('kind'))[:60]!r}; "
            "set admissionReviewVersions: [v1] in the webhook configuration"
        )
    request = _mapping(review.get("request"), "request", optional=False)
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadRequest("request.uid must be a non-empty string")
    _mapping(request.get("kind"), "request.kind", optional=False)
    for name in ("operation", "namespace", "name", "subResource"):
        _string(request.get(name), f"request.{name}")
    return request


def _request_kind(request: dict) -> tuple[str, str]:
    kind = request["kind"]
    return _string(kind.get("group"), "request.kind.group"), _string(kind.get("kind"), "request.kind.kind")


def _check_metadata(obj: dict, where: str) -> dict:
    metadata = _mapping(obj.get("metadata"), f"{where}.metadata")
    for name in ("name", "generateName", "namespace", "deletionTimestamp"):
        _string(metadata.get(name), f"{where}.metadata.{name}")
    _string_map(metadata.get("labels"), f"{where}.metadata.labels")
    _string_map(metadata.get("annotations"), f"{where}.metadata.annotations")
    _list_of_objects(metadata.get("ownerReferences"), f"{where}.metadata.ownerReferences")
    return metadata


def _check_pod_spec(spec: dict, where: str) -> None:
    for name in CONTAINER_LISTS:
        for position, container in enumerate(_list_of_objects(spec.get(name), f"{where}.{name}")):
            # Names tell a new debug container from those already there.
            _string(container.get("name"), f"{where}.{name}[{position}].name")
            _list_of_objects(container.get("env"), f"{where}.{name}[{position}].env")


def _named_object(request: dict, kind: str) -> tuple[dict, dict, str]:
    """The request's object, its checked metadata, and how messages name it: "<kind> <namespace>/<name>"."""
    obj = _mapping(request.get("object"), "request.object", optional=False)
    metadata = _check_metadata(obj, "request.object")
    namespace = request.get("namespace") or metadata.get("namespace") or "default"
    name = metadata.get("name") or request.get("name") or f"{metadata.get('generateName') or ''}<generated>"
    return obj, metadata, f"{kind} {namespace}/{name}"


def _scheduler_name(template: dict, where: str) -> str:
    spec = _mapping(template.get("spec"), f"{where}.spec")
    return _string(spec.get("schedulerName"), f"{where}.spec.schedulerName")


# -- writing the response --------------------------------------------------


def _response(request: dict, **fields: object) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "response": {"uid": request["uid"], **fields},
    }


def _pass(request: dict, fields: dict) -> Answer:
    return Answer(_response(request, allowed=True), ALLOWED, fields, examined=False)


def _allow(request: dict, fields: dict, warnings: list[str] | None = None) -> Answer:
    extra = {"warnings": warnings} if warnings else {}
    return Answer(_response(request, allowed=True, **extra), ALLOWED, fields)


def _deny(request: dict, message: str, fields: dict) -> Answer:
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    status = {"code": DENIED_CODE, "message": message}
    return Answer(
        _response(request, allowed=False, status=status),
        DENIED,
        dict(fields, message=message),
    )


def _map_errors(err: InvalidMapError) -> str:
    return "; ".join(str(err).split("\n"))


# -- /mutate ---------------------------------------------------------------


def mutate(review: object, scheduler_name: str, nodes: NodeReader | None = None) -> Answer:
    """Give a new pod of `scheduler_name` the entry that reads the bind's devices, or deny
    a pod created on a node with the reason; give a debug container added to a running
    pod of ours the devices of its pod.

    Only a pod created on a node is judged by its map (see the module's doc). `nodes`
    reads a node's alias label; without it such a pod, on a node that may be its map
    line's alias, is allowed with a warning."""
    request = read_review(review)
    if _request_kind(request) != ("", "Pod"):
        raise BadRequest(f"/mutate handles Pods, got {_request_kind(request)[1][:60]!r}; fix the webhook's rules")
    operation, subresource = request.get("operation"), request.get("subResource") or ""
    if operation == "UPDATE" and subresource == "ephemeralcontainers":
        return _debug_containers(request, scheduler_name)
    if operation != "CREATE":
        # Any other update leaves a running pod alone.
        return _pass(request, {"operation": operation})
    pod = _mapping(request.get("object"), "request.object", optional=False)
    metadata = _check_metadata(pod, "request.object")
    namespace = request.get("namespace") or metadata.get("namespace") or None
    fields = {"pod": pod_key(pod, namespace)}
    if _scheduler_name(pod, "request.object") != scheduler_name:
        return _pass(request, fields)
    _check_pod_spec(pod.get("spec") or {}, "request.object.spec")
    node_name = _string((pod.get("spec") or {}).get("nodeName"), "request.object.spec.nodeName")
    if not node_name:
        return _bind_entries(request, pod, fields)
    try:
        entry = placement_for(pod, namespace)
    except InvalidMapError as err:
        return _deny(
            request,
            f"pod {fields['pod']}: {MAP_ANNOTATION}: {_map_errors(err)}",
            fields,
        )
    except PlacementError as err:
        return _deny(request, str(err), fields)
    if isinstance(entry, GpuRequest):
        # No scheduler runs for it, so nothing would choose its GPUs.
        return _deny(
            request,
            f"pod {fields['pod']}: line {entry.line} of its {MAP_ANNOTATION} asks the scheduler to choose "
            f"{entry.describe()}, but spec.nodeName {node_name} means no scheduler places it; leave "
            "spec.nodeName out, or give the pod a line that names its node and devices",
            fields,
        )
    fields.update(index=entry.index, node=entry.node, devices=entry.cuda_visible_devices)
    warnings = []
    if node_name and node_name != entry.node:
        # No scheduler runs for a pod created with spec.nodeName: only here can
        # anything say that its containers get the devices of another node.
        fields["nodeName"] = node_name
        refusal, warning = _judge_node_name(fields["pod"], node_name, entry, nodes)
        if refusal:
            return _deny(request, refusal, fields)
        if warning:
            warnings.append(warning)
    missing = _devices_not_on_node(fields["pod"], entry, nodes)
    if missing:
        return _deny(request, missing, fields)
    # Created on a node: no Binding will write its devices, so they are written here.
    annotations = bind_annotations(entry)
    overflow = annotation_overflow(pod, annotations)
    if overflow:
        return _deny(request, f"pod {fields['pod']}: {overflow}", fields)
    return _patched(request, bind_patch(pod, annotations), fields, warnings)


def _bind_entries(request: dict, pod: dict, fields: dict) -> Answer:
    """A pod the scheduler will bind: each container lacking it gets the entry
    that reads the bind's devices annotation. The map is not read here: the scheduler reads
    it once, at bind, and refuses a pod whose map is broken (FailedScheduling); a pod
    without a map is left alone, as the chart's matchConditions leave it."""
    if not isinstance(((pod.get("metadata") or {}).get("annotations") or {}).get(MAP_ANNOTATION), str):
        return _allow(request, dict(fields, map="none"))
    return _patched(request, bind_patch(pod), dict(fields, devices=f"from {DEVICES_ANNOTATION}"))


def _devices_not_on_node(who: str, entry: MapEntry, nodes: NodeReader | None) -> str | None:
    """Why the line's devices are not all on its node, when that node is found by name and
    publishes its GPUs; else None. A line naming an alias, a node that cannot be read, or one
    without an inventory is left to the scheduler, which checks before binding."""
    if nodes is None:
        return None
    try:
        inventory = nodes.inventory(entry.node)
    except NodeReadError:
        return None
    if inventory is None:
        return None
    unknown = [d for d in entry.devices if inventory.resolve(d) is None]
    if not unknown:
        return None
    return (
        f"pod {who}: line {entry.line} of its {MAP_ANNOTATION} names GPU {', '.join(unknown)} on node {entry.node}, "
        f"which has no such GPU (its GPUs: {inventory.describe()})"
    )


def _judge_node_name(
    who: str, node_name: str, entry: MapEntry, nodes: NodeReader | None
) -> tuple[str | None, str | None]:
    """(refusal, warning) for a pod created on `node_name`, which is not its line's node.

    The line may still name that node by its alias label value, as the
    scheduler resolves it (scheduling/nodes.py). A node too long for a label
    value can only be a node's name, so it is another node for certain;
    otherwise the node's label says, when the webhook may read nodes. A node
    that cannot be read gets a warning, never a failed admission.
    """
    if not may_be_alias(entry.node):
        return _created_on_another_node(who, node_name, entry, "and it is too long to be an alias"), None
    if nodes is None:
        return None, _created_on_maybe_another_node(who, node_name, entry, "the webhook may not read nodes")
    try:
        node = nodes.node(node_name)
    except NodeReadError as err:
        return None, _created_on_maybe_another_node(who, node_name, entry, str(err))
    if node is None:
        return _created_on_another_node(who, node_name, entry, f"and no node {node_name} exists"), None
    if node.alias == entry.node:
        return None, None
    label = nodes.alias_label
    why = f"and {node_name}'s {label} label is {node.alias}" if node.alias else f"and {node_name} has no {label} label"
    return _created_on_another_node(who, node_name, entry, why), None


def _created_on_another_node(who: str, node_name: str, entry: MapEntry, why: str) -> str:
    return (
        f"pod {who}: spec.nodeName is {node_name} but line {entry.line} of its {MAP_ANNOTATION} names node "
        f"{entry.node} ({why}), so it would run on {node_name} with {CUDA_ENV}={entry.cuda_visible_devices}, "
        f"devices of {entry.node}; leave spec.nodeName out (gpu-scheduler binds the pod to its line's node) "
        "or make the two agree"
    )


def _created_on_maybe_another_node(who: str, node_name: str, entry: MapEntry, why: str) -> str:
    return (
        f"pod {who}: spec.nodeName {node_name} is not {entry.node}, the node of line {entry.line} of its map; "
        f"unless {entry.node} is {node_name}'s alias label, it gets another node's devices "
        f"({entry.cuda_visible_devices}); not checked: {why}"
    )


def _patched(request: dict, operations: list[dict], fields: dict, warnings: list[str] | None = None) -> Answer:
    if not operations:
        return _allow(request, fields, warnings)
    extra = {"warnings": warnings} if warnings else {}
    patch = base64.b64encode(orjson.dumps(operations)).decode("ascii")
    review_out = _response(request, allowed=True, patchType="JSONPatch", patch=patch, **extra)
    return Answer(review_out, PATCHED, fields)


def _debug_containers(request: dict, scheduler_name: str) -> Answer:
    """`kubectl debug` on a pod of ours (the pods/ephemeralcontainers subresource).

    The new ephemeral containers get the devices the pod's other containers
    were given at creation, read from their environment: not the map's current
    line, which may have changed since, nor the placement annotation, which
    anyone who may edit the pod can rewrite. Containers already in oldObject
    are left alone, since the API server refuses any change to them; and
    nothing is ever denied here, since a map mistake must not stop anyone from
    debugging. A pod whose devices come from the bind (its containers read the
    annotation, or the bind wrote it) gives its new ephemeral containers the entry
    that reads it too: they see what its other containers see. A pod whose
    containers hold one literal value (written by their user, or by a webhook of
    an earlier version) gives them that value.
    """
    pod = _mapping(request.get("object"), "request.object", optional=False)
    metadata = _check_metadata(pod, "request.object")
    namespace = request.get("namespace") or metadata.get("namespace") or None
    fields = {"pod": pod_key(pod, namespace), "subresource": "ephemeralcontainers"}
    if _scheduler_name(pod, "request.object") != scheduler_name:
        return _pass(request, fields)
    _check_pod_spec(pod.get("spec") or {}, "request.object.spec")
    old = _mapping(request.get("oldObject"), "request.oldObject (required for UPDATE)", optional=False)
    _check_pod_spec(_mapping(old.get("spec"), "request.oldObject.spec"), "request.oldObject.spec")
    given = container_devices(pod)
    if given.from_bind or given.bound is not None:
        fields["devices"] = f"from {DEVICES_ANNOTATION}"
        return _patched(request, new_ephemeral_containers_patch(pod, old, None), fields)
    devices = given.agreed
    if devices is None:
        # Its containers have no one value to copy.
        return _allow(request, dict(fields, devices="none given"))
    fields["devices"] = devices
    return _patched(request, new_ephemeral_containers_patch(pod, old, devices), fields)


# -- /validate -------------------------------------------------------------

# (API group, kind) -> where the pod template sits; () is the object itself.
POD_TEMPLATES: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("", "Pod"): (),
    ("apps", "StatefulSet"): ("spec", "template"),
    ("apps", "Deployment"): ("spec", "template"),
    ("apps", "ReplicaSet"): ("spec", "template"),
    ("apps", "DaemonSet"): ("spec", "template"),
    ("batch", "Job"): ("spec", "template"),
    ("batch", "CronJob"): ("spec", "jobTemplate", "spec", "template"),
}
# Kinds whose pods never have a stable index; mutate will deny them.
UNINDEXED_KINDS = {"Deployment", "ReplicaSet", "DaemonSet"}
MAX_LISTED_INDEXES = 10


def validate(review: object, scheduler_name: str) -> Answer:
    """Deny a Pod or workload of `scheduler_name` whose map annotation is invalid."""
    request = read_review(review)
    group, kind = _request_kind(request)
    path = POD_TEMPLATES.get((group, kind))
    if path is None:
        supported = ", ".join(k for _, k in POD_TEMPLATES)
        raise BadRequest(f"/validate handles {supported}; got {group or 'core'}/{kind}; fix the webhook's rules")
    if request.get("operation") not in ("CREATE", "UPDATE") or request.get("subResource"):
        return _pass(request, {"operation": request.get("operation")})
    obj, metadata, what = _named_object(request, kind)
    fields = {"object": what}
    if metadata.get("deletionTimestamp"):
        # Removing finalizers must never be blocked by a map mistake.
        return _pass(request, fields)
    template = obj
    for step in path:
        template = _mapping(template.get(step), "request.object." + ".".join(path))
    # Where the map sits, as the user wrote it: metadata.annotations of a Pod,
    # spec.template.metadata.annotations of a workload.
    where = ".".join([*path, "metadata", "annotations"])
    if path:
        _check_metadata(template, "request.object." + ".".join(path))
    if _scheduler_name(template, ".".join(["request.object", *path])) != scheduler_name:
        return _pass(request, fields)
    text = _map_of(template)
    if request.get("operation") == "UPDATE" and _judged_before(request, path, scheduler_name, text):
        # The Job controller removing a finalizer, a label, a rollout restart:
        # only a change to the map is judged, never a map that was already there.
        return _pass(request, dict(fields, map="unchanged"))
    if text is None:
        warning = (
            f"{what} uses schedulerName {scheduler_name} but {where} has no {MAP_ANNOTATION}: "
            "its pods will be denied until one is added"
        )
        return _allow(request, fields, [warning])
    try:
        scheduling_map = parse_map(text)
    except InvalidMapError as err:
        return _deny(request, f"{what}: {MAP_ANNOTATION} in {where}: {_map_errors(err)}", fields)
    never = gang_checks.refusal(kind, obj, template, what)
    if never is not None:
        return _deny(request, never, fields)
    warnings = _index_warnings(kind, obj, scheduling_map, what)
    indexes = sorted([*scheduling_map, *(i for i in scheduling_map.requests if i is not None)])
    unreachable = gang_checks.unreachable_indexes(kind, obj, template, indexes, what)
    if unreachable is None and None in scheduling_map.requests:
        unreachable = gang_checks.every_pod_line(template, what)
    return _allow(request, fields, warnings + ([unreachable] if unreachable else []))


def _map_of(template: dict) -> object:
    return ((template.get("metadata") or {}).get("annotations") or {}).get(MAP_ANNOTATION)


def _judged_before(request: dict, path: tuple[str, ...], scheduler_name: str, text: object) -> bool:
    """Whether oldObject already had this map, in a template of our scheduler.

    The chart's map-changed-on-update matchCondition keeps such updates from
    reaching the webhook at all; this is the same rule for a webhook
    registered without it. Without a usable oldObject, the map is judged.
    """
    old = request.get("oldObject")
    for step in path:
        old = old.get(step) if isinstance(old, dict) else None
    if not isinstance(old, dict):
        return False
    spec = old.get("spec")
    if not isinstance(spec, dict) or spec.get("schedulerName") != scheduler_name:
        return False
    metadata = old.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    old_text = annotations.get(MAP_ANNOTATION) if isinstance(annotations, dict) else None
    return old_text == text


def _index_warnings(kind: str, obj: dict, scheduling_map: Mapping, what: str) -> list[str]:
    """Warnings about pods that will be denied although the map itself is valid. None for a map
    with a `*` line, which places every pod, with an index or without."""
    requests = getattr(scheduling_map, "requests", {})
    if None in requests:
        return []
    spec = obj.get("spec") or {}
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
        kind = "Job"
    if kind in UNINDEXED_KINDS or (kind == "Job" and spec.get("completionMode") != "Indexed"):
        shape = "a non-Indexed Job" if kind == "Job" else f"a {kind}"
        warning = (
            f"{what}: pods of {shape} have no stable index, so gpu-scheduler will deny them; "
            "use a StatefulSet or an Indexed Job, or a line `*=*:gpus=<count>` for every pod"
        )
        return [warning]
    if kind == "StatefulSet":
        ordinals = spec.get("ordinals")
        start = ordinals.get("start", 0) if isinstance(ordinals, dict) else 0
        expected = _index_range(start, spec.get("replicas", 1))
    elif kind == "Job":
        expected = _index_range(0, spec.get("completions", 1))
    else:
        return []
    missing = [index for index in expected if index not in scheduling_map and index not in requests]
    if not missing:
        return []
    listed = ", ".join(str(i) for i in missing[:MAX_LISTED_INDEXES])
    more = f" and {len(missing) - MAX_LISTED_INDEXES} more" if len(missing) > MAX_LISTED_INDEXES else ""
    return [f"{what}: {MAP_ANNOTATION} has no line for index {listed}{more}; those pods will be denied"]


def _index_range(start: object, count: object) -> range:
    # The API server validates these later; a wrong type here must only skip the warning.
    if not isinstance(start, int) or not isinstance(count, int) or isinstance(start, bool) or isinstance(count, bool):
        return range(0)
    return range(start, start + max(0, min(count, 100_000)))


# -- /mutate-workloads -----------------------------------------------------

# The workloads whose pod template gets the bind entries at apply (the chart's
# MutatingAdmissionPolicy of workload-bind-policies.yaml on 1.36+, this on 1.35), and
# the operations at which: a Job's template cannot change after its creation.
# Not ReplicaSets (a Deployment's would no longer match its Deployment, which then
# makes another), nor Deployments and DaemonSets (no index), nor CronJobs (each of
# their Jobs is mutated when created).
ENTRY_WORKLOADS = {("apps", "StatefulSet"): ("CREATE", "UPDATE"), ("batch", "Job"): ("CREATE",)}


def mutate_workload(review: object, scheduler_name: str) -> Answer:
    """Give a StatefulSet or Job of `scheduler_name` with a map the entry that reads the
    bind's devices annotation in every init container and container of its pod template
    that lacks it: its pods are then created complete, and no pod of it calls anything of
    ours at creation. At CREATE, and at a StatefulSet's UPDATE that changes its template:
    one that leaves the template alone (a label, a StatefulSet of before the install) must
    not start a rollout. The map is not read (validate does)."""
    request = read_review(review)
    group, kind = _request_kind(request)
    if (group, kind) not in ENTRY_WORKLOADS:
        supported = ", ".join(k for _, k in sorted(ENTRY_WORKLOADS))
        got = f"{group or 'core'}/{kind}"
        raise BadRequest(f"/mutate-workloads handles {supported}; got {got}; fix the webhook's rules")
    operation = request.get("operation")
    if operation not in ENTRY_WORKLOADS[(group, kind)] or request.get("subResource"):
        return _pass(request, {"operation": operation})
    if operation == "UPDATE" and _template_unchanged(request):
        return _pass(request, {"operation": operation, "template": "unchanged"})
    obj, _, what = _named_object(request, kind)
    fields = {"object": what}
    spec = _mapping(obj.get("spec"), "request.object.spec")
    template = _mapping(spec.get("template"), "request.object.spec.template")
    _check_metadata(template, "request.object.spec.template")
    if _scheduler_name(template, "request.object.spec.template") != scheduler_name:
        return _pass(request, fields)
    if not isinstance(_map_of(template), str):
        return _allow(request, dict(fields, map="none"))
    _check_pod_spec(template.get("spec") or {}, "request.object.spec.template.spec")
    # bind_patch's operations address a pod; the template is one, one level down.
    operations = [dict(op, path="/spec/template" + op["path"]) for op in bind_patch(template)]
    return _patched(request, operations, dict(fields, devices=f"from {DEVICES_ANNOTATION}"))


def _template_unchanged(request: dict) -> bool:
    """Whether the UPDATE leaves the pod template as oldObject had it (the chart's
    template-changed-on-update matchCondition, for a webhook registered without it)."""
    old, new = request.get("oldObject"), request.get("object")
    old_spec = old.get("spec") if isinstance(old, dict) else None
    new_spec = new.get("spec") if isinstance(new, dict) else None
    if not isinstance(old_spec, dict) or not isinstance(new_spec, dict):
        return False
    return old_spec.get("template") == new_spec.get("template")
