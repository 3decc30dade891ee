"""A map may name a node that does not exist yet: the pod waits, says why, and is placed when it comes."""

from __future__ import annotations

import time
import uuid

import pytest

from .cluster import create, env_seen, get_pod, kwok_node, wait_for_event, wait_for_node_ready
from .waiting import NotYet, wait_for
from .workloads import bare_pod

pytestmark = [pytest.mark.e2e, pytest.mark.local_only]

BIND_AFTER_NODE_SECONDS = 10


def test_pod_for_a_missing_node_waits_with_a_failed_scheduling_event_and_is_bound_once_the_node_exists(
    api_client, product, ns, kwok_nodes
):
    node = f"e2e-late-{uuid.uuid4().hex[:6]}"
    create(api_client, ns, [bare_pod("waiting-0", f"0={node}:1\n")])

    event = wait_for_event(api_client, ns, "waiting-0", "FailedScheduling", node, timeout=30)
    assert "not found" in event["message"], event["message"]
    assert event["type"] == "Warning"
    assert not get_pod(api_client, ns, "waiting-0")["spec"].get("nodeName")

    kwok_nodes(kwok_node(node))
    # KWOK marks the node Ready, within seconds on an idle machine, later under
    # load; the scheduler rightly places nothing on a node that is not Ready,
    # so the clock for the scheduler starts when the node is.
    wait_for_node_ready(api_client, node, timeout=60)
    ready = time.monotonic()

    def bound() -> dict:
        pod = get_pod(api_client, ns, "waiting-0")
        if not pod["spec"].get("nodeName"):
            raise NotYet("waiting-0 is not bound yet")
        return pod

    pod = wait_for(f"waiting-0 to be bound after node {node} became Ready", bound, BIND_AFTER_NODE_SECONDS)
    print(f"\nbound {time.monotonic() - ready:.1f}s after the node became Ready")
    assert pod["spec"]["nodeName"] == node
    assert env_seen(pod, pod["spec"]["containers"][0]) == {
        "CUDA_VISIBLE_DEVICES": "1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
    }
