"""Pods of any other scheduler are none of our business: neither the webhook nor the scheduler touches them.

The local control plane has no kube-scheduler, so there a default-scheduler
pod stays unbound; on KinD the real kube-scheduler binds it, and the events
must then come from it alone.
"""

from __future__ import annotations

import time

import pytest

from .cluster import container_env, create, get_json, get_pod, pod_events, wait_for_pods
from .waiting import NotYet, wait_for
from .workloads import PLACEMENT_ANNOTATION, bare_pod

pytestmark = pytest.mark.e2e

MAP = "0=node1:0\n"


def kube_scheduler_runs(api_client) -> bool:
    """kubeadm clusters (KinD) run kube-scheduler as a static pod in kube-system."""
    pods = get_json(api_client, "/api/v1/namespaces/kube-system/pods", {"labelSelector": "component=kube-scheduler"})
    return any(p["status"].get("phase") == "Running" for p in pods["items"])


def scheduled_by_the_default_scheduler(api_client, ns: str, name: str) -> dict:
    """Waits until kube-scheduler has bound the pod; returns it."""

    def bound() -> dict:
        pod = get_pod(api_client, ns, name)
        if not pod["spec"].get("nodeName"):
            raise NotYet("not bound yet")
        return pod

    return wait_for(f"kube-scheduler to bind {ns}/{name}", bound, timeout=60)


def test_pods_of_other_schedulers_keep_their_spec_and_stay_unbound(api_client, product, ns):
    create(
        api_client,
        ns,
        [
            bare_pod("foreign-0", MAP, scheduler_name="other-scheduler"),
            bare_pod("default-0", MAP, scheduler_name=None),  # the API server makes it default-scheduler
        ],
    )
    # A pod of ours created after them: once it is bound, the scheduler has
    # seen the namespace's earlier pods, so leaving them alone was a decision.
    create(api_client, ns, [bare_pod("ours-0", MAP, labels={"app": "ours"})])
    wait_for_pods(api_client, ns, 1, timeout=60, label_selector="app=ours", phases=None)
    time.sleep(2)

    for name, scheduler_name in (("foreign-0", "other-scheduler"), ("default-0", "default-scheduler")):
        pod = get_pod(api_client, ns, name)
        assert pod["spec"]["schedulerName"] == scheduler_name
        assert container_env(pod) == {"main": None}, f"{name} was mutated"
        assert PLACEMENT_ANNOTATION not in pod["metadata"].get("annotations", {})
        if scheduler_name == "default-scheduler" and kube_scheduler_runs(api_client):
            scheduled_by_the_default_scheduler(api_client, ns, name)
            events = pod_events(api_client, ns, name)
            # Scheduled by kube-scheduler, then the kubelet's own events; none of ours.
            reporters = {(e.get("source") or {}).get("component") or e.get("reportingComponent") for e in events}
            assert "Scheduled" in {e["reason"] for e in events}, events
            assert reporters <= {"default-scheduler", "kubelet"}, events
            continue
        assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}"
        assert pod["status"]["phase"] == "Pending"
        assert [e["reason"] for e in pod_events(api_client, ns, name)] == []
