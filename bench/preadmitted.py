"""Pods created as the webhook would have left them, for gpu-scheduler without admission.

ours_unadmitted's pods are not sent to the webhook (contenders.OURS_UNADMITTED).
Created bare, they would be refused (gpu-scheduler binds no pod with a map whose
containers lack a CUDA_VISIBLE_DEVICES entry: each would see every GPU), and
they would be smaller objects than ours' admitted pods, for every write and
watch event after. So
they are created already carrying what the webhook adds, computed by the
webhook's own code (placement_for, placement_patch) and applied as the
apiserver applies its JSON Patch: the same objects, the same requests, and only
the admission call missing.
"""

from __future__ import annotations

import jsonpatch
from gpu_scheduler.placement import placement_for
from gpu_scheduler.webhook.patch import placement_patch


def as_admitted(pod: dict) -> dict:
    """A copy of pod as gpu-scheduler's webhook would admit it: its placement env and annotation added."""
    entry = placement_for(pod, pod["metadata"].get("namespace"))
    return jsonpatch.JsonPatch(placement_patch(pod, entry)).apply(pod)
