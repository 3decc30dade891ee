"""Pods created as the webhook would have left them, for gpu-scheduler without admission.

ours_unadmitted's pods are not sent to the webhook (contenders.OURS_UNADMITTED).
Created bare, they would each make gpu-scheduler post a second Event (its
EnvNotInjected warning: no container has CUDA_VISIBLE_DEVICES) and be smaller
objects than ours' admitted pods, for every write and watch event after. So
they are created already carrying what the webhook adds, computed by the
webhook's own code (placement_for, placement_patch): the same objects, the
same requests, and only the admission call missing.
"""

from __future__ import annotations

import copy

from gpu_scheduler.placement import placement_for
from gpu_scheduler.webhook.patch import placement_patch


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_adds(document: dict, operations: list[dict]) -> dict:
    """A copy of document with the JSON Patch's operations applied; only `add` to an object
    member, which is all placement_patch writes (patch.py), is accepted."""
    result = copy.deepcopy(document)
    for operation in operations:
        if operation.get("op") != "add":
            raise ValueError(f"only add operations are applied here, got {operation!r}")
        tokens = [_unescape(t) for t in operation["path"].split("/")[1:]]
        parent = result
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        if not isinstance(parent, dict):
            raise ValueError(f"{operation['path']}: only object members are added here")
        parent[tokens[-1]] = copy.deepcopy(operation["value"])
    return result


def as_admitted(pod: dict) -> dict:
    """pod as gpu-scheduler's webhook would admit it: its placement env and annotation added."""
    entry = placement_for(pod, pod["metadata"].get("namespace"))
    return apply_adds(pod, placement_patch(pod, entry))
