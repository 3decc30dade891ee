"""Who holds which GPU, read from the cluster's state alone, never from the scheduler.

The oracle of every "a GPU is never given twice" claim: the live pods of one
scheduler (they exist in the API and have not finished), each on its node with
the devices its containers see (CUDA_VISIBLE_DEVICES as the workload gets it:
the value the webhook wrote at creation, or the devices the binding wrote on
the pod for an entry that reads them through the downward API). Under
--gpu-sharing=deny no (node, device) may be named by two of them. A pod being
deleted still counts: its containers may still run until the API forgets it.
"""

from __future__ import annotations

from collections import defaultdict

from e2e.cluster import container_env, get_json

TERMINAL_PHASES = ("Succeeded", "Failed")


def devices_of(pod: dict) -> tuple[str, ...]:
    """The GPUs a pod's containers see: the union of their CUDA_VISIBLE_DEVICES (e2e.cluster.container_env)."""
    found: dict[str, None] = {}
    for value in container_env(pod).values():
        for device in (value or "").split(","):
            if device.strip():
                found[device.strip()] = None
    return tuple(found)


def holders(api_client, scheduler_name: str, namespace: str = "") -> dict[tuple[str, str], list[str]]:
    """(node, device) -> namespace/name of every live bound pod of this scheduler naming it, in
    the whole cluster or in one namespace."""
    where = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
    pods = get_json(api_client, where, {"fieldSelector": f"spec.schedulerName={scheduler_name},spec.nodeName!="})[
        "items"
    ]
    held: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        for device in devices_of(pod):
            held[(pod["spec"]["nodeName"], device)].append(key)
    return dict(held)


def double_grants(api_client, scheduler_name: str) -> dict[tuple[str, str], list[str]]:
    """The (node, device) pairs that two or more live pods of this scheduler hold at once."""
    return {where: sorted(pods) for where, pods in holders(api_client, scheduler_name).items() if len(pods) > 1}
