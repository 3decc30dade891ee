"""The GPUs a pod's containers see: CUDA_VISIBLE_DEVICES as their environment gives it.

A container gets the variable one of two ways:

- from the bind (the default): an env entry whose value comes through the downward API
  from the pod's DEVICES_ANNOTATION, which the scheduler writes in the same Binding that
  gives the pod its node. The kubelet reads it at every container start; until the bind
  the key is absent and the value would be empty, so CUDA would see no GPU (fails closed).
- a literal value the user wrote (or an admission webhook of an earlier version, which
  wrote the map line's devices at creation).

A container with neither sees every GPU the runtime gives it, so the scheduler binds no
pod with a map while one of its containers lacks the entry (scheduling.decide). The
entry itself cannot change once the pod exists; the annotation is guarded against
change after the bind by a ValidatingAdmissionPolicy of the chart. Ephemeral containers
(`kubectl debug`) come later through their own subresource and are not read here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from .errors import quote
from .grammar import MapEntry, device_identity, is_device

CUDA_ENV = "CUDA_VISIBLE_DEVICES"
# The devices the bind gave the pod, as CUDA_VISIBLE_DEVICES spells them ("0,1"): what
# every container's entry reads through the downward API.
DEVICES_ANNOTATION = "gpu-scheduler/cuda-visible-devices"
DEVICES_FIELD_PATH = f"metadata.annotations['{DEVICES_ANNOTATION}']"
# Informational JSON, written beside the devices: {"index": 0, "node": "node1",
# "cudaVisibleDevices": "0,1"}, and "chosen" (why) where the scheduler chose them.
PLACEMENT_ANNOTATION = "gpu-scheduler/placement"
# The annotations the Binding writes (bind_annotations).
BIND_ANNOTATIONS = (DEVICES_ANNOTATION, PLACEMENT_ANNOTATION)
# The containers that get devices at creation, in spec order.
GIVEN_CONTAINER_LISTS = ("initContainers", "containers")
# A message names this many containers at most; a pod may have hundreds.
_MAX_DESCRIBED = 8


class _FromBind:
    """A container whose CUDA_VISIBLE_DEVICES comes from DEVICES_ANNOTATION."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FROM_BIND"


FROM_BIND: Final = _FromBind()
# What one container was given: a literal value, FROM_BIND, or None (no entry it can use).
Given = str | _FromBind | None


def bind_env_entry() -> dict:
    """The env entry that gives a container the devices the bind wrote."""
    return {"name": CUDA_ENV, "valueFrom": {"fieldRef": {"fieldPath": DEVICES_FIELD_PATH}}}


def reads_bind_annotation(item: Mapping) -> bool:
    """Whether an env entry's value is the bind's DEVICES_ANNOTATION (any fieldRef apiVersion:
    the API server stores "v1" where the pod left it out)."""
    value_from = item.get("valueFrom")
    if not isinstance(value_from, Mapping):
        return False
    field_ref = value_from.get("fieldRef")
    return isinstance(field_ref, Mapping) and field_ref.get("fieldPath") == DEVICES_FIELD_PATH


def given_value(container: Mapping) -> Given:
    """What the container's CUDA_VISIBLE_DEVICES is taken from: its literal value, FROM_BIND,
    or None when it has no entry, or one from elsewhere (another field, a ConfigMap), whose
    value the scheduler cannot know at bind time. With the name twice the last entry wins, as
    for the kubelet. An entry without "value" is the empty string, as the API omits it. A
    literal value beside a valueFrom (never in a stored pod: a workload template after a
    server-side apply merged the user's value into the entry admission wrote) is that literal:
    the entry must be written again, or the object is invalid."""
    value: Given = None
    for item in container.get("env") or ():
        if isinstance(item, Mapping) and item.get("name") == CUDA_ENV:
            if item.get("valueFrom") is None or item.get("value"):
                value = str(item.get("value") or "")
            else:
                value = FROM_BIND if reads_bind_annotation(item) else None
    return value


def placement_annotation(entry: MapEntry, chosen: str | None = None) -> str:
    """PLACEMENT_ANNOTATION's value: compact JSON a pod can read through the downward API.
    `chosen`: why the scheduler chose the node and devices, for a line that asked it to
    (the index is null for a pod placed by the map's `*` line)."""
    document: dict[str, object] = {
        "index": entry.index,
        "node": entry.node,
        "cudaVisibleDevices": entry.cuda_visible_devices,
    }
    if chosen is not None:
        document["chosen"] = chosen
    return json.dumps(document, separators=(",", ":"))


def chosen_reason(pod: Mapping) -> str | None:
    """Why the scheduler chose the pod's node and GPUs, as its placement annotation says; None
    for a pod placed by a pinned line (or an annotation that is not ours to trust: it is
    informational, for people, never read to decide anything)."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(PLACEMENT_ANNOTATION)
    try:
        document = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    chosen = document.get("chosen") if isinstance(document, dict) else None
    return chosen if isinstance(chosen, str) else None


def bind_annotations(entry: MapEntry, chosen: str | None = None) -> dict[str, str]:
    """What the Binding writes on the pod with its node."""
    return {DEVICES_ANNOTATION: entry.cuda_visible_devices, PLACEMENT_ANNOTATION: placement_annotation(entry, chosen)}


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """(container name, what it was given) for every init container and container, in spec
    order, and the pod's DEVICES_ANNOTATION (None before the bind)."""

    values: tuple[tuple[str, Given], ...]
    bound: str | None = None

    @property
    def none_given(self) -> bool:
        """No container has an entry."""
        return all(value is None for _, value in self.values)

    @property
    def missing(self) -> tuple[str, ...]:
        """The containers without an entry: each would see every GPU of its node."""
        return tuple(name for name, value in self.values if value is None)

    @property
    def from_bind(self) -> bool:
        return any(value is FROM_BIND for _, value in self.values)

    @property
    def literals(self) -> frozenset[str]:
        return frozenset(value for _, value in self.values if isinstance(value, str))

    @property
    def agreed(self) -> str | None:
        """The one literal value the containers that have one share; None when none has one or
        two differ."""
        literals = self.literals
        return next(iter(literals)) if len(literals) == 1 else None

    @property
    def disagree(self) -> bool:
        """Containers with literal values that differ: nothing of ours writes those, so the
        scheduler cannot tell which GPUs the pod would use."""
        return len(self.literals) > 1

    def seen(self, name: str, value: Given) -> str | None:
        """What a container sees: its literal, the bind's annotation (empty before the bind, as
        the kubelet resolves an absent key), or None without an entry."""
        if value is FROM_BIND:
            return self.bound or ""
        return value if isinstance(value, str) else None

    def devices(self) -> tuple[str, ...]:
        """Every device any container sees, once each (by identity), in order; tokens the map
        could not hold (`all`, `-1`) are left out, since no map line can ask for them."""
        seen: dict[str, str] = {}
        for name, value in self.values:
            for token in _tokens(self.seen(name, value)):
                if is_device(token):
                    seen.setdefault(device_identity(token), token)
        return tuple(seen.values())

    def describe(self) -> str:
        """`main='0,1', sidecar from the bind, debug unset`, for messages."""
        shown = [_described(name, value) for name, value in self.values]
        if len(shown) > _MAX_DESCRIBED:
            shown = [*shown[:_MAX_DESCRIBED], f"and {len(shown) - _MAX_DESCRIBED} more"]
        return ", ".join(shown)


def _described(name: str, value: Given) -> str:
    if value is FROM_BIND:
        return f"{name} from the bind"
    return f"{name}={quote(value)}" if isinstance(value, str) else f"{name} unset"


def _tokens(value: str | None) -> Iterable[str]:
    return (token.strip() for token in (value or "").split(",") if token.strip())


def container_devices(pod: Mapping) -> ContainerDevices:
    """What the pod's init containers and containers were given (pod as API JSON, or as
    kube.objects trims it)."""
    spec = pod.get("spec") or {}
    values = tuple(
        (str(container.get("name") or ""), given_value(container))
        for field in GIVEN_CONTAINER_LISTS
        for container in spec.get(field) or ()
        if isinstance(container, Mapping)
    )
    bound = ((pod.get("metadata") or {}).get("annotations") or {}).get(DEVICES_ANNOTATION)
    return ContainerDevices(values, bound if isinstance(bound, str) else None)
