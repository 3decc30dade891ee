"""Pods of any other scheduler are none of our business: neither the webhook nor the scheduler touches them."""

from __future__ import annotations

import time

import pytest

from .cluster import container_env, create, get_pod, pod_events, wait_for_pods
from .workloads import PLACEMENT_ANNOTATION, bare_pod

pytestmark = pytest.mark.e2e

MAP = "0=node1:0\n"


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
        assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec']['nodeName']}"
        assert pod["status"]["phase"] == "Pending"
        assert [e["reason"] for e in pod_events(api_client, ns, name)] == []
