"""The JSON Patch (RFC 6902) that gives a pod the entry that reads its devices.

Every operation is an `add` that sets a whole value: a container's complete
`env` list, or an annotation. `add` on an existing object member
replaces it (RFC 6902, 4.1), so the same patch works whether the member is
there or not, and applying it a second time changes nothing. Building the
patch from the pod's current state also means a pod that already carries the
right env and annotation gets no operation at all, which is what a reinvoked
webhook (reinvocationPolicy: IfNeeded) must see.

The entry is the one that reads the devices annotation the scheduler's Binding
writes (placement.bind_env_entry); a container that has it is left alone. Only
a debug container added to a pod whose containers hold a literal value gets
that value (new_ephemeral_containers_patch).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..placement import (
    CUDA_ENV,
    CUDA_ORDER,
    CUDA_ORDER_ENV,
    FROM_BIND,
    GIVEN_CONTAINER_LISTS,
    bind_env_entry,
    given_value,
)

# Every list of containers in a pod spec. Ephemeral containers only ever
# appear through the pods/ephemeralcontainers subresource (see
# new_ephemeral_containers_patch); a pod spec that carries some is patched alike.
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def pointer_token(key: str) -> str:
    """A key as one JSON Pointer (RFC 6901) reference token."""
    return key.replace("~", "~0").replace("/", "~1")


def env_with(env: list[dict], name: str, value: str) -> list[dict]:
    """`env` with exactly one entry `name`, set to `value`.

    The entry takes the place of the first existing one (so a container that
    reads it in a later `$(name)` reference still sees it defined first), any
    duplicates and any valueFrom are dropped, and every other entry keeps its
    order. A missing entry is appended.
    """
    return _env_with_entry(env, {"name": name, "value": value})


def _env_with_entry(env: list[dict], wanted: dict) -> list[dict]:
    """env_with for a whole entry (a literal value or a valueFrom)."""
    name = wanted["name"]
    result: list[dict] = []
    placed = False
    for item in env:
        if item.get("name") != name:
            result.append(item)
        elif not placed:
            result.append(dict(wanted))
            placed = True
    if not placed:
        result.append(dict(wanted))
    return result


def placement_env(env: list[dict], devices: str) -> list[dict]:
    """`env` with CUDA_VISIBLE_DEVICES set to `devices` and, right after it,
    CUDA_DEVICE_ORDER=PCI_BUS_ID, so CUDA numbers the GPUs as nvidia-smi and the
    map do. A container that sets CUDA_DEVICE_ORDER itself (value or valueFrom)
    keeps its own entry: it chose how its ordinals are read."""
    return _with_device_order(env, env_with(env, CUDA_ENV, devices))


def bind_env(env: list[dict]) -> list[dict]:
    """placement_env with the entry that reads the bind's devices annotation."""
    return _with_device_order(env, _env_with_entry(env, bind_env_entry()))


def _with_device_order(env: list[dict], result: list[dict]) -> list[dict]:
    if any(item.get("name") == CUDA_ORDER_ENV for item in env):
        return result
    after = next(i for i, item in enumerate(result) if item.get("name") == CUDA_ENV) + 1
    result.insert(after, {"name": CUDA_ORDER_ENV, "value": CUDA_ORDER})
    return result


def _env_operation(field: str, position: int, container: dict, devices: str) -> list[dict]:
    """The one `add` that gives a container its placement env; none when it has it."""
    env = container.get("env")
    wanted = placement_env(env or [], devices)
    if env == wanted:
        return []
    return [{"op": "add", "path": f"/spec/{field}/{position}/env", "value": wanted}]


def bind_patch(pod: dict, annotations: Mapping[str, str] | None = None) -> list[dict]:
    """The operations that give every init container and container of a new
    `pod` that lacks it the entry reading the bind's devices annotation (what the
    scheduler's fail-closed check reads: placement.given_value), and set `annotations`
    (a pod created on a node, which no Binding will annotate); empty when it has all."""
    operations = []
    spec = pod.get("spec") or {}
    for field in GIVEN_CONTAINER_LISTS:
        for position, container in enumerate(spec.get(field) or []):
            if given_value(container) is not FROM_BIND:
                wanted = bind_env(container.get("env") or [])
                operations.append({"op": "add", "path": f"/spec/{field}/{position}/env", "value": wanted})
    if annotations:
        operations.extend(_annotation_operations(pod, annotations))
    return operations


def new_ephemeral_containers_patch(pod: dict, old_pod: dict, devices: str | None) -> list[dict]:
    """The operations that give the ephemeral containers `pod` has and `old_pod`
    had not (by name, unique in a pod) the placement env: `devices` as a literal, or
    None for the entry that reads the bind's annotation. Existing ones are never
    touched: the API server refuses any change to an ephemeral container."""
    existing = {c.get("name") for c in (old_pod.get("spec") or {}).get("ephemeralContainers") or []}
    operations = []
    for position, container in enumerate((pod.get("spec") or {}).get("ephemeralContainers") or []):
        if container.get("name") in existing:
            continue
        if devices is not None:
            operations.extend(_env_operation("ephemeralContainers", position, container, devices))
        elif given_value(container) is not FROM_BIND:
            wanted = bind_env(container.get("env") or [])
            operations.append({"op": "add", "path": f"/spec/ephemeralContainers/{position}/env", "value": wanted})
    return operations


def _annotation_operations(pod: dict, wanted: Mapping[str, str]) -> list[dict]:
    """The operations that set each annotation of `wanted` on `pod`; none for those it has."""
    metadata = pod.get("metadata")
    if metadata is None:
        return [{"op": "add", "path": "/metadata", "value": {"annotations": dict(wanted)}}]
    annotations = metadata.get("annotations")
    if annotations is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(wanted)}]
    return [
        {"op": "add", "path": f"/metadata/annotations/{pointer_token(key)}", "value": value}
        for key, value in wanted.items()
        if annotations.get(key) != value
    ]
