"""--gpu-sharing=deny in the everyday path: many pods want one GPU, its holder goes, exactly one
of them gets it, again and again, while other pods' updates keep the pods-on-nodes watch busy.

Issue 16, point 1: kube-apiserver reports a pod that leaves the pending watch's selector
(bound) as DELETED with its previous object, nodeName still empty; the scheduler took that for
"deleted unbound" and dropped the pod's hold at once, so until the pods-on-nodes watch delivered
the pod, its GPU looked free and a second contender was bound to it. The oracle is the
cluster's own pod list (gpu_oracle), read while it happens; it does not ask the scheduler.
"""

from __future__ import annotations

import threading
import time

import pytest
from e2e.cluster import create, get_json, kwok_fake_nodes
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod
from kubernetes import client
from kubernetes.client.rest import ApiException

from .gpu_oracle import double_grants, holders

pytestmark = [pytest.mark.faults]

CONTENDERS = 24
# Fewer than the contenders: each release deletes one of them, and the last needs a successor.
RELEASES = 20
NOISE_PODS = 30
GPU_NODE = "node1"
NOISE_NODE = "node2"
# From the holder's deletion to the next contender's binding: the contenders wait in backoff
# and are woken by the freed GPU, so this is seconds; generous for a loaded CI machine.
HANDOVER_LIMIT = 20.0
# How long each handover is watched for a second grant after the first one appeared.
WATCH_AFTER_GRANT = 1.5


def _bound(api_client, namespace: str) -> list[str]:
    pods = get_json(api_client, f"/api/v1/namespaces/{namespace}/pods", {"fieldSelector": "spec.nodeName!="})
    return sorted(
        p["metadata"]["name"]
        for p in pods["items"]
        if p["metadata"]["name"].startswith("gpu-") and not p["metadata"].get("deletionTimestamp")
    )


class _BusyWatch:
    """Keeps the pods-on-nodes watch busy: pods bound to another node by spec.nodeName (no
    scheduler involved) whose annotations are rewritten in a loop, each write a MODIFIED event
    for every watch of pods on nodes."""

    def __init__(self, api_client, namespace: str) -> None:
        self._core = client.CoreV1Api(api_client)
        self._namespace = namespace
        self._stop = threading.Event()
        self.writes = 0
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True) for i in range(2)]

    def start(self) -> None:
        pods = []
        for i in range(NOISE_PODS):
            pod = bare_pod(f"noise-{i}", "", scheduler_name=None)
            del pod["metadata"]["annotations"]
            pod["spec"]["nodeName"] = NOISE_NODE
            pods.append(pod)
        create(self._core.api_client, self._namespace, pods)
        for thread in self._threads:
            thread.start()

    def _loop(self, offset: int) -> None:
        i = offset
        while not self._stop.is_set():
            name = f"noise-{i % NOISE_PODS}"
            try:
                self._core.patch_namespaced_pod(
                    name, self._namespace, {"metadata": {"annotations": {"faults/noise": str(i)}}}
                )
                self.writes += 1
            except ApiException:
                pass  # the test's namespace is going away
            i += 2

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)


# The contenders' devices: written by the binding (the README's entry, read through the
# downward API), which is then also what the scheduler's ledger reads.
def test_deny_gives_a_freed_gpu_to_exactly_one_of_many_contenders(api_client, ns, start_scheduler, scheduler_name):
    assert RELEASES < CONTENDERS
    nodes = kwok_fake_nodes(api_client)
    assert {GPU_NODE, NOISE_NODE} <= nodes, f"the local cluster's KWOK nodes are {sorted(nodes)}"
    start_scheduler("deny", "--gpu-sharing=deny", scheduler_name=scheduler_name)
    busy = _BusyWatch(api_client, ns)
    busy.start()
    core = client.CoreV1Api(api_client)
    scheduling_map = "".join(f"{i}={GPU_NODE}:0\n" for i in range(CONTENDERS))
    try:
        contenders = [
            bare_pod(f"gpu-{i}", scheduling_map, scheduler_name, bind_entries=True) for i in range(CONTENDERS)
        ]
        create(api_client, ns, contenders)
        seen: list[tuple[int, dict]] = []
        handovers = []
        holder = wait_for("a first contender to be bound", lambda: _one_bound(api_client, ns), HANDOVER_LIMIT)
        # The oracle sees the holder (its containers' environment names the GPU): it is not blind.
        assert holders(api_client, scheduler_name).get((GPU_NODE, "0")) == [f"{ns}/{holder}"]
        for release in range(RELEASES):
            core.delete_namespaced_pod(holder, ns, grace_period_seconds=0)
            released = time.monotonic()
            holder = wait_for(
                f"release {release}: another contender to be bound after {holder} was deleted",
                lambda gone=holder: _one_bound(api_client, ns, gone),
                HANDOVER_LIMIT,
            )
            handovers.append(time.monotonic() - released)
            # A second grant shows up right after the first, if at all: watch the cluster a while.
            until = time.monotonic() + WATCH_AFTER_GRANT
            while time.monotonic() < until:
                doubles = double_grants(api_client, scheduler_name)
                if doubles:
                    seen.append((release, doubles))
                    break
                time.sleep(0.1)
        assert not seen, f"one GPU held by two live pods under deny (release, holders): {seen}"
        print(
            f"\n{RELEASES} handovers of {GPU_NODE}:0 among {CONTENDERS} contenders, {busy.writes} noise writes; "
            f"holder deleted -> next bound: max {max(handovers):.2f}s"
        )
    finally:
        busy.stop()


def _one_bound(api_client, namespace: str, gone: str | None = None) -> str:
    """The one contender bound now (not `gone`); NotYet while none is. Two is a double grant."""
    bound = [name for name in _bound(api_client, namespace) if name != gone]
    if len(bound) > 1:
        raise AssertionError(f"two contenders bound to one GPU under deny: {bound}")
    if not bound:
        raise NotYet("none bound yet")
    return bound[0]
