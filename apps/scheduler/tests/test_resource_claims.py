"""Pods with DRA resourceClaims: refused, not retried, saying gpu-scheduler does not support
DynamicResourceAllocation claims yet."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import node_info, trim_pending_pod, watched_pod
from gpu_scheduler.scheduler.queue import UNSCHEDULABLE
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import ClusterCache, Code, SharingPolicy, decide
from recorded import KUBE_SCHEDULER

NODE = "node3"


def api_node(name: str = NODE) -> dict:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": name},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def api_pod(name: str, uid: str, **spec) -> dict:
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{name}-0",
            "uid": uid,
            "annotations": {"gpu-scheduling-map": f"0={NODE}:0\n"},
        },
        "spec": {
            "schedulerName": "gpu-scheduler",
            "containers": [{"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}],
            **spec,
        },
    }


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_node(node_info(api_node()))
    return cache


def test_a_pod_with_resource_claims_is_refused_until_it_changes_saying_dra_is_not_supported(cache):
    claims = [{"name": "gpu", "resourceClaimName": "gpu"}, {"name": "nic", "resourceClaimTemplateName": "nic"}]
    pod = trim_pending_pod(api_pod("train", "t", resourceClaims=claims))
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu"}, {"name": "nic"}]
    decision = decide(pod, cache)
    assert decision.code is Code.UNRESOLVABLE
    assert decision.plugin == "DynamicResources"
    assert "resourceClaims (gpu, nic)" in decision.reason
    assert "gpu-scheduler does not support DynamicResourceAllocation claims yet" in decision.reason
    # kube-scheduler, for comparison, refused a claim of a class that does not exist with its
    # own words, and kept a pod whose ResourceClaim did not exist out of its queue in silence.
    assert (
        "device class nobody.example.com does not exist"
        in KUBE_SCHEDULER["cases"]["resource-claim"]["FailedScheduling"]
    )
    assert KUBE_SCHEDULER["cases"]["missing-resource-claim"]["FailedScheduling"] is None
    state = SchedulerState("gpu-node-name", SharingPolicy.WARN)
    state.nodes_listed([node_info(api_node())])
    state.pod_changed(watched_pod(api_pod("train", "t", resourceClaims=claims), "gpu-scheduler"))
    uid, taken = state.pop(0.0)
    state.refused(uid, state.decide(uid, taken), now=0.0, jitter=0.5)
    assert state.queue_state("t") == UNSCHEDULABLE


def test_the_refusal_needs_no_node_and_pods_without_claims_keep_nothing_for_them():
    claims = [{"name": "gpu", "resourceClaimName": "gpu"}]
    assert decide(trim_pending_pod(api_pod("train", "t", resourceClaims=claims)), ClusterCache()).plugin == (
        "DynamicResources"
    )
    assert "resourceClaims" not in trim_pending_pod(api_pod("plain", "p"))["spec"]
