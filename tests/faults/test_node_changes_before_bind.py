"""A node deleted, cordoned or made NotReady after the scheduler chose it for a pod and before
a binding is stored: no pod is bound to it, the pod waits with a FailedScheduling Event that
says why, and is bound once the node is back.

Holding the scheduler between decision and bind: a gate. A ValidatingWebhookConfiguration
sends every pods/binding CREATE of the test's namespace to a port where nothing listens, with
failurePolicy Fail, so the API server refuses the scheduler's binding (500, "failed calling
webhook"); the scheduler's Event "binding to node N not confirmed" (reason BindingNotConfirmed:
a 5xx does not prove the binding was not stored) proves it had chosen the node. The node
changes while the gate is shut; then the gate opens, and the scheduler's next attempt must
decide again on the node as it now is, not reuse its choice.
(The API server itself does not check the node when it stores a binding; a change during the
binding request cannot be caught by any scheduler, kube-scheduler included.)

NotReady: kwok-controller keeps every node Ready (--manage-all-nodes, and its node-initialize
stage rewrites a Ready condition that is not True at once), so the test pauses kwok-controller
(SIGSTOP) while the node's Ready condition is False, and resumes it to make the node Ready again.

Under --gpu-sharing=deny, with pods competing for one GPU of each of node1..node4 all along
(contention.py): the node changes must not make the scheduler give any GPU twice.
"""

from __future__ import annotations

import time
import uuid

import pytest
from e2e.cluster import delete_node, get_pod, kwok_node, wait_for_event, wait_for_node_ready
from e2e.processes import free_port
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from kubernetes import client

from . import binding_gates
from .audit import verdict

pytestmark = [pytest.mark.faults, pytest.mark.disrupts_cluster]  # pauses kwok-controller

CHANGES = {
    "deleted": "not found",
    "cordoned": "1 node(s) were unschedulable",
    "not-ready": "1 node(s) were not Ready",
}
# Failed attempts before the node comes back (not-ready case): the next retry is then
# 8 s off (1, 2, 4, 8 s backoff), so a bind within WAKE_LIMIT seconds can only be the
# node event waking the pod.
ATTEMPTS_BEFORE_WAKE = 4
WAKE_LIMIT = 3.0


def set_ready(api_client, node: str, ready: bool) -> None:
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "faults test" if ready else "kubelet stopped posting node status (faults test)",
        "lastHeartbeatTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    # A strategic merge patch merges conditions by type.
    client.CoreV1Api(api_client).patch_node_status(node, {"status": {"conditions": [condition]}})


def _refusals_of(scheduler, pod_key: str) -> int:
    """How many attempts the scheduler logged as result=unschedulable for this pod."""
    lines = scheduler.log_path.read_text(errors="replace").splitlines()
    return sum(1 for line in lines if f" pod={pod_key} " in line and " result=unschedulable" in line)


def node_ready(api_client, node: str) -> str | None:
    status = client.CoreV1Api(api_client).read_node_status(node).status
    return next((c.status for c in status.conditions or [] if c.type == "Ready"), None)


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_node_that_changes_between_decision_and_bind_gets_no_pod_and_the_pod_says_why(
    change, api_client, ns, certs, scheduler_name, start_scheduler, healthy_afterwards, audit_log, gpu_contention
):
    plane = healthy_afterwards
    core = client.CoreV1Api(api_client)
    node = f"faults-{change}-{uuid.uuid4().hex[:6]}"
    core.create_node(kwok_node(node))
    wait_for_node_ready(api_client, node, timeout=60)
    contention = gpu_contention(scheduler_name)
    scheduler = start_scheduler("scheduler", "--gpu-sharing=deny", scheduler_name=scheduler_name)
    closed_port = f"https://127.0.0.1:{free_port()}/gate"
    gate = binding_gates.shut(
        api_client,
        ns,
        closed_port,
        certs.ca_bundle,
        lambda status, body: status == 500 and "failed calling webhook" in body,
    )
    paused = False
    try:
        core.create_namespaced_pod(ns, bare_pod("waits-0", f"0={node}:1\n", scheduler_name=scheduler_name))
        # The scheduler chose the node and tried to bind: the gate refused.
        wait_for_event(
            api_client, ns, "waits-0", "BindingNotConfirmed", f"binding to node {node} not confirmed", timeout=30
        )

        if change == "deleted":
            delete_node(api_client, node)
        elif change == "cordoned":
            core.patch_node(node, {"spec": {"unschedulable": True}})
        else:
            plane.pause("kwok-controller")
            paused = True
            set_ready(api_client, node, False)
        binding_gates.open_(api_client, gate)

        event = wait_for_event(api_client, ns, "waits-0", "FailedScheduling", CHANGES[change], timeout=30)
        time.sleep(2)  # room for a wrong bind, had the scheduler kept its old choice
        assert not get_pod(api_client, ns, "waits-0")["spec"].get("nodeName")
        assert verdict(audit_log, ns).stored["waits-0"] == 0, "a binding of waits-0 was stored"
        assert node in event["message"] and event["type"] == "Warning"
        if change == "not-ready":
            assert node_ready(api_client, node) == "False", "the node became Ready again while kwok was paused"
        print(f"\n{change}: {event['message']}")

        # The node comes back: the waiting pod is placed there.
        if change == "not-ready":
            # Let the backoff grow first: waking on the node event must beat it by far.
            def backed_off() -> None:
                # Read from its log, not the metric: the contenders' refusals count there too.
                failed = _refusals_of(scheduler, f"{ns}/waits-0")
                if failed < ATTEMPTS_BEFORE_WAKE:
                    raise NotYet(f"{failed} failed attempts")

            wait_for(f"{ATTEMPTS_BEFORE_WAKE} failed attempts", backed_off, 30, interval=0.05)
        back = time.monotonic()
        if change == "deleted":
            core.create_node(kwok_node(node))
        elif change == "cordoned":
            core.patch_node(node, {"spec": {"unschedulable": False}})
        else:
            plane.resume("kwok-controller")  # kwok rewrites the Ready condition to True
            paused = False
        # Ready is enough here: the pod binds once the scheduler sees the node
        # usable, and the time to that is what this test measures.
        wait_for_node_ready(api_client, node, timeout=60, untainted=False)

        def bound() -> str:
            node_name = get_pod(api_client, ns, "waits-0")["spec"].get("nodeName")
            if not node_name:
                raise NotYet("waits-0 is still unbound")
            return node_name

        assert wait_for("waits-0 to be bound once the node is back", bound, 70) == node
        if change == "not-ready":
            waited = time.monotonic() - back
            assert waited < WAKE_LIMIT, f"bound {waited:.1f}s after the node came back: the backoff, not the node event"
            print(f"bound {waited:.1f}s after kwok was resumed (the next retry was ~8 s off)")
        print(contention.verify())
    finally:
        if paused:
            plane.resume("kwok-controller")
        binding_gates.open_(api_client, gate)
        for pod in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        delete_node(api_client, node)
