"""The map's annotation; Kubernetes' limit on the annotations of one object, and whether ours
still fit a pod.

kube-apiserver refuses a pod whose annotations (every key and value, in bytes) exceed the
limit at create and at every update, but not at bind: a Binding's annotations are stored
on the pod without that check (seen on kube-apiserver 1.37). A pod pushed over the limit by
the bind's annotations is then stuck: the kubelet's status updates and every other update
are refused ("metadata.annotations: Too long"). So the scheduler refuses to bind such a pod
and the webhook to admit one, each saying what to shorten.
"""

from __future__ import annotations

from collections.abc import Mapping

# The map: on a pod, or on a workload's pod template.
MAP_ANNOTATION = "gpu-scheduling-map"
# apimachinery's TotalAnnotationSizeLimitB.
TOTAL_ANNOTATION_BYTES = 256 * 1024


def annotation_bytes(annotations: Mapping[str, object] | None) -> int:
    """The annotations' size as kube-apiserver counts it: the bytes of every key and value."""
    return sum(len(key.encode()) + len(str(value).encode()) for key, value in (annotations or {}).items())


def overflow_message(total: int, added: Mapping[str, str], who: str) -> str | None:
    """Why annotations of `total` bytes, once `added` is set on the pod by `who` ("this webhook
    adds"), do not fit; None when they do."""
    if total <= TOTAL_ANNOTATION_BYTES:
        return None
    which = " and ".join(added)
    return (
        f"the pod's annotations would be {total} bytes with the {which} annotation{'s' if len(added) > 1 else ''} "
        f"{who}; Kubernetes allows {TOTAL_ANNOTATION_BYTES}: shorten the {MAP_ANNOTATION} annotation "
        "(drop comments and lines of other indexes) or other annotations"
    )
