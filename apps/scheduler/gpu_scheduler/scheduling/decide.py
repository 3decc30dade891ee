"""One scheduling decision: resolve the map's node, filter it (scheduling.filters) and
check the GPU ledger under the sharing policy.

Pure: the caller passes the pod (as kube.objects.trim_pending_pod leaves it) and
the cache, acts on the Decision (assume, bind, events, retry).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..placement import PLACEMENT_ANNOTATION, MapEntry, PlacementError, placement_for, pod_key
from .cache import ClusterCache
from .filters import run_filters, unavailable_message
from .ledger import SharingPolicy
from .nodes import NodeResolutionError


@dataclass(frozen=True, slots=True)
class BindWarning:
    """Something the user should know about a pod that is bound anyway; one Warning Event each."""

    reason: str  # the Event's reason, CamelCase like kube-scheduler's
    message: str


GPU_SHARED = "GPUShared"
ENV_NOT_INJECTED = "CUDAEnvNotInjected"


@dataclass(frozen=True, slots=True)
class Decision:
    pod_key: str
    entry: MapEntry | None
    node: str | None  # the resolved node's real name
    bind: bool
    reason: str | None = None  # why not, for a FailedScheduling event
    warnings: tuple[BindWarning, ...] = ()  # bind, but tell the user
    retryable: bool = False  # True: time or a node change can help; False: only a change to the pod can
    plugin: str | None = None  # the filter that refused the node, if one did

    @property
    def index(self) -> int | None:
        return self.entry.index if self.entry else None

    @property
    def devices(self) -> str | None:
        return self.entry.cuda_visible_devices if self.entry else None


def injected_devices(pod: Mapping) -> str | None:
    """The CUDA_VISIBLE_DEVICES the webhook recorded at creation, or None."""
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(PLACEMENT_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw).get("cudaVisibleDevices")
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


def _sharing_message(conflicts: list[tuple[str, str]], node: str) -> str:
    held = ", ".join(f"GPU {device} by {other}" for other, device in conflicts)
    return f"on node {node}, {held}"


def decide(pod: Mapping, cache: ClusterCache, policy: SharingPolicy = SharingPolicy.WARN) -> Decision:
    key = pod_key(pod)
    uid = (pod.get("metadata") or {}).get("uid") or ""
    try:
        entry = placement_for(pod)
    except PlacementError as err:
        return Decision(key, None, None, bind=False, reason=str(err), retryable=False)

    injected = injected_devices(pod)
    if injected is not None and injected != entry.cuda_visible_devices:
        # Container env is immutable: binding would hand the pod other GPUs than the map says.
        return Decision(
            key,
            entry,
            None,
            bind=False,
            retryable=False,
            reason=(
                f"the map now gives index {entry.index} the devices {entry.cuda_visible_devices}, but the pod "
                f"was created with CUDA_VISIBLE_DEVICES={injected}; delete the pod so that it is recreated"
            ),
        )

    try:
        node = cache.nodes.resolve(entry.node)
    except NodeResolutionError as err:
        return Decision(key, entry, None, bind=False, reason=str(err), retryable=True)
    failure = run_filters(pod.get("spec") or {}, pod.get("requests") or (), entry.devices, node, cache.usage(node.name))
    if failure is not None:
        return Decision(
            key,
            entry,
            node.name,
            bind=False,
            retryable=True,
            reason=unavailable_message(failure, node.name, entry.line),
            plugin=failure.plugin,
        )

    warnings = []
    if injected is None:
        warnings.append(
            BindWarning(
                ENV_NOT_INJECTED,
                f"CUDA_VISIBLE_DEVICES was not injected at creation (annotation {PLACEMENT_ANNOTATION} missing); "
                "is the gpu-scheduler webhook installed?",
            )
        )
    conflicts = cache.ledger.conflicts(uid, node.name, entry.devices)
    if conflicts and policy is SharingPolicy.DENY:
        return Decision(
            key,
            entry,
            node.name,
            bind=False,
            retryable=True,
            reason=f"GPUs already held ({_sharing_message(conflicts, node.name)}) and --gpu-sharing=deny",
        )
    if conflicts and policy is SharingPolicy.WARN:
        warnings.append(
            BindWarning(GPU_SHARED, f"sharing GPUs with running pods: {_sharing_message(conflicts, node.name)}")
        )
    return Decision(key, entry, node.name, bind=True, warnings=tuple(warnings))
