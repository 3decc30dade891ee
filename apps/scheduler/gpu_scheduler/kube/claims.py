"""Choosing the node a WaitForFirstConsumer claim's volume is provisioned for: the annotation
`volume.kubernetes.io/selected-node` on the claim, as kube-scheduler's VolumeBinding writes it
in PreBind (scheduling.provisioning says which claims, and when)."""

from __future__ import annotations

from gpu_scheduler.kube.client import ApiError, KubeClient
from gpu_scheduler.scheduling.provisioning import SelectNode
from gpu_scheduler.scheduling.volumes import SELECTED_NODE_ANNOTATION

SELECT_TIMEOUT_SECONDS = 5.0


def select_node(client: KubeClient, select: SelectNode, timeout: float = SELECT_TIMEOUT_SECONDS) -> str | None:
    """Writes the node on the claim; None when it was written, else why not. The patch carries
    the claim's resourceVersion as read: a claim changed since (bound, annotated by another
    scheduler) is refused with 409 and left alone, and the pod's next attempt reads it again."""
    path = f"/api/v1/namespaces/{select.namespace}/persistentvolumeclaims/{select.name}"
    metadata: dict = {"annotations": {SELECTED_NODE_ANNOTATION: select.node}}
    if select.resource_version:
        metadata["resourceVersion"] = select.resource_version
    try:
        status, data = client.request(
            "PATCH",
            path,
            body={"metadata": metadata},
            content_type="application/merge-patch+json",
            timeout=timeout,
        )
    except ApiError as err:
        return f"no answer ({err})"
    if status < 300:
        return None
    return f"{status} {data[:300].decode(errors='replace')}"
