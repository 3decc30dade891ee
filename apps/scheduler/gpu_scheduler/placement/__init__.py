"""The domain: the map grammar, the pod's index and its entry. Pure: no kubernetes import."""

from __future__ import annotations

from collections.abc import Mapping

from .annotations import MAP_ANNOTATION, TOTAL_ANNOTATION_BYTES, annotation_bytes, overflow_message
from .environment import (
    BIND_ANNOTATIONS,
    CUDA_ENV,
    DEVICES_ANNOTATION,
    DEVICES_FIELD_PATH,
    FROM_BIND,
    GIVEN_CONTAINER_LISTS,
    PLACEMENT_ANNOTATION,
    ContainerDevices,
    bind_annotations,
    bind_env_entry,
    chosen_reason,
    container_devices,
    given_value,
    placement_annotation,
    reads_bind_annotation,
)
from .errors import (
    DuplicateDeviceError,
    DuplicateIndexError,
    EmptyMapError,
    InvalidDeviceError,
    InvalidIndexError,
    InvalidMapError,
    InvalidNodeError,
    MalformedEntryError,
    MapLineError,
    MapTooLargeError,
    MigDeviceError,
    MissingEntryError,
    MissingMapError,
    MixedSpellingError,
    PlacementError,
    PodIndexError,
)
from .grammar import (
    GPU_UUID,
    MAX_MAP_BYTES,
    MIG_INSTANCE,
    MIG_UUID,
    ORDINAL,
    MapEntry,
    SchedulingMap,
    device_identity,
    device_spelling,
    is_device,
    is_node_reference,
    may_be_alias,
    parse_map,
    parse_map_uncached,
)
from .numbers import MAX_DEVICE_ORDINAL, MAX_INDEX
from .pod_index import controller_kind, pod_index, pod_key
from .requests import ANY_INDEX, ANY_NODE, GpuRequest, Requirement

# The map's ordinals are the host's nvidia-smi order, which is PCI bus order;
# CUDA's default order (fastest first) can differ, so the webhook sets this
# beside CUDA_ENV unless a container sets it itself. docs/gpus.md says more.
CUDA_ORDER_ENV = "CUDA_DEVICE_ORDER"
CUDA_ORDER = "PCI_BUS_ID"


def map_text(pod: Mapping, namespace: str | None = None) -> str:
    """The pod's map annotation; MissingMapError when it has none."""
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(MAP_ANNOTATION)
    if not isinstance(text, str):
        raise MissingMapError(
            f"pod {pod_key(pod, namespace)} has no {MAP_ANNOTATION} annotation; "
            "add one with a line <index>=<node>:<devices> for its index"
        )
    return text


def placement_for(pod: Mapping, namespace: str | None = None) -> MapEntry | GpuRequest:
    """The line that places this pod: a pinned entry, or a request whose node and devices the
    scheduler chooses; or the PlacementError that says why there is none. A map with a `*` line
    places pods without an index too (a Deployment's)."""
    scheduling_map = parse_map(map_text(pod, namespace))
    if None in scheduling_map.requests:
        try:
            index: int | None = pod_index(pod, namespace)
        except PodIndexError:
            index = None
    else:
        index = pod_index(pod, namespace)
    line = scheduling_map.line_for(index)
    if line is None:
        indexes = sorted((*scheduling_map, *(i for i in scheduling_map.requests if i is not None)))
        known = ", ".join(str(i) for i in indexes[:10])
        raise MissingEntryError(
            f"pod {pod_key(pod, namespace)} has index {index} but the {MAP_ANNOTATION} annotation "
            f"has no line for it (indexes given: {known}{', ...' if len(indexes) > 10 else ''}; "
            "a line `*=*:gpus=<count>` places every pod without one)"
        )
    return line


def pinned_placement_for(pod: Mapping, namespace: str | None = None) -> MapEntry | None:
    """The pod's pinned line, None when its line asks the scheduler to choose; PlacementError
    when it has none."""
    line = placement_for(pod, namespace)
    return line if isinstance(line, MapEntry) else None


__all__ = [
    "ANY_INDEX",
    "ANY_NODE",
    "GpuRequest",
    "Requirement",
    "pinned_placement_for",
    "BIND_ANNOTATIONS",
    "TOTAL_ANNOTATION_BYTES",
    "annotation_bytes",
    "overflow_message",
    "CUDA_ENV",
    "CUDA_ORDER",
    "CUDA_ORDER_ENV",
    "DEVICES_ANNOTATION",
    "DEVICES_FIELD_PATH",
    "FROM_BIND",
    "GIVEN_CONTAINER_LISTS",
    "GPU_UUID",
    "MIG_INSTANCE",
    "MIG_UUID",
    "ORDINAL",
    "MAX_DEVICE_ORDINAL",
    "MAX_INDEX",
    "MAX_MAP_BYTES",
    "MAP_ANNOTATION",
    "PLACEMENT_ANNOTATION",
    "ContainerDevices",
    "DuplicateDeviceError",
    "DuplicateIndexError",
    "EmptyMapError",
    "InvalidDeviceError",
    "InvalidIndexError",
    "InvalidMapError",
    "InvalidNodeError",
    "MalformedEntryError",
    "MapEntry",
    "MapLineError",
    "MapTooLargeError",
    "MissingEntryError",
    "MigDeviceError",
    "MissingMapError",
    "MixedSpellingError",
    "PlacementError",
    "PodIndexError",
    "SchedulingMap",
    "bind_annotations",
    "bind_env_entry",
    "chosen_reason",
    "container_devices",
    "controller_kind",
    "device_identity",
    "device_spelling",
    "given_value",
    "placement_annotation",
    "reads_bind_annotation",
    "is_device",
    "is_node_reference",
    "may_be_alias",
    "map_text",
    "parse_map",
    "parse_map_uncached",
    "placement_for",
    "pod_index",
    "pod_key",
]
