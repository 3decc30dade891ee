"""The writes of kube-scheduler's VolumeBinding in PreBind for WaitForFirstConsumer claims
(scheduling.provisioning says which claims, and when): the node a claim's volume is provisioned
for, the annotation `volume.kubernetes.io/selected-node` on the claim; and an existing volume
given to a claim, its claimRef (and `pv.kubernetes.io/bound-by-controller: "yes"`), as
kube-scheduler writes them (recorded: tests/testdata/kube_scheduler_messages.json)."""

from __future__ import annotations

import json

from gpu_scheduler.kube.client import ApiError, KubeClient
from gpu_scheduler.scheduling.provisioning import BOUND_BY_CONTROLLER_ANNOTATION, BindVolume, SelectNode
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


def claim_volume(client: KubeClient, bind: BindVolume, timeout: float = SELECT_TIMEOUT_SECONDS) -> dict | str:
    """Writes the claim in the volume's claimRef; the volume as stored when it was written,
    else why not. The patch carries the volume's resourceVersion as read: a volume changed
    since (given to another claim, by another scheduler or by hand) is refused with 409 and
    left alone, and the pod's next attempt chooses again from the volume as the watch brings it."""
    claim_ref = {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": bind.namespace,
        "name": bind.name,
        "uid": bind.uid,
        "resourceVersion": bind.claim_resource_version,
    }
    body = {
        "metadata": {
            "resourceVersion": bind.volume_resource_version,
            "annotations": {BOUND_BY_CONTROLLER_ANNOTATION: "yes"},
        },
        "spec": {"claimRef": claim_ref},
    }
    try:
        status, data = client.request(
            "PATCH",
            f"/api/v1/persistentvolumes/{bind.volume}",
            body=body,
            content_type="application/merge-patch+json",
            timeout=timeout,
        )
    except ApiError as err:
        return f"no answer ({err})"
    if status >= 300:
        return f"{status} {data[:300].decode(errors='replace')}"
    try:
        return json.loads(data)
    except ValueError as err:
        return f"{status} an answer that is not JSON ({err})"
