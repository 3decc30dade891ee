"""What kube-apiserver's watch really delivers to the scheduler's pod informer, recorded from
the real one, and compared with testdata/watch_shapes.json, which the state machine of
test_scheduler_state.py reads to model it: a model fed the wrong event shapes proves nothing.

The watch is the scheduler's own (kube.client.KubeClient.stream, the field selector of
scheduler/runner.py), scoped to the test's namespace. Two lives of a pod are recorded: bound
and then deleted, deleted while pending. KWOK's status updates add MODIFIED events in between,
whose number depends on timing, so the events for a pod are summed up as its first, the first
that carries a node (the binding's), and its last.

RECORD_WATCH_SHAPES=1 writes the file from this cluster instead of comparing.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from gpu_scheduler.kube.client import KubeClient, load_configuration
from gpu_scheduler.kube.objects import UNFINISHED_SELECTOR
from kubernetes import client

pytestmark = pytest.mark.cluster

SHAPES_FILE = Path(__file__).parent / "testdata" / "watch_shapes.json"
WAIT_SECONDS = 30.0


class _Recorder:
    """One watch on its own thread, keeping (type, pod name, nodeName, being deleted)."""

    def __init__(self, kube: KubeClient, path: str, selector: str, resource_version: str) -> None:
        self.events: list[dict] = []
        self._kube = kube
        self._query = {
            "watch": "1",
            "fieldSelector": selector,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "120",
        }
        self._path = path
        self._stream = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with self._kube.stream(self._path, self._query, 60.0) as lines:
            self._stream = lines
            for line in lines:
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "BOOKMARK":
                    continue
                pod = event["object"]
                self.events.append(
                    {
                        "type": event["type"],
                        "pod": pod["metadata"]["name"],
                        "nodeName": (pod.get("spec") or {}).get("nodeName") or "",
                        "deleting": bool(pod["metadata"].get("deletionTimestamp")),
                    }
                )

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.interrupt()
        self._thread.join(timeout=10)

    def wait(self, kind: str, pod: str) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not any(e["type"] == kind and e["pod"] == pod for e in self.events):
            assert time.monotonic() < deadline, f"no {kind} for {pod} on {self._path} ({self._query}): {self.events}"
            time.sleep(0.05)


def _summary(events: list[dict], pod: str, node: str) -> dict:
    """First event of one pod, first with a node (none: absent) and last, the node name made
    generic."""
    mine = [{k: v for k, v in e.items() if k != "pod"} for e in events if e["pod"] == pod]
    for event in mine:
        event["nodeName"] = "<node>" if event["nodeName"] == node else event["nodeName"]
    if not mine:
        return {"events": 0}
    summary = {"first": mine[0], "last": mine[-1]}
    bound = [e for e in mine if e["nodeName"]]
    if bound:
        summary["bound"] = bound[0]
    return summary


def _pod(name: str, scheduler_name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.invalid/none:1"}],
        },
    }


@pytest.mark.compat
@pytest.mark.pipeline_sample
def test_the_watch_events_the_state_machine_models_are_the_ones_kube_apiserver_sends(kubeconfig, api_client, namespace):
    core = client.CoreV1Api(api_client)
    nodes = [n.metadata.name for n in core.list_node().items if not n.spec.unschedulable]
    assert nodes, "the cluster has no schedulable node"
    node = sorted(nodes)[0]
    scheduler_name = f"shapes-{uuid.uuid4().hex[:6]}"
    kube = KubeClient(load_configuration(kubeconfig), pool_size=4)
    path = f"/api/v1/namespaces/{namespace}/pods"
    version = kube.get(path)["metadata"]["resourceVersion"]
    watch = _Recorder(kube, path, UNFINISHED_SELECTOR, version)
    watch.start()
    try:
        core.create_namespaced_pod(namespace, _pod("bound", scheduler_name))
        watch.wait("ADDED", "bound")
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound"}, "target": {"name": node}}
        kube.call("POST", f"{path}/bound/binding", body=binding)
        watch.wait("MODIFIED", "bound")
        core.delete_namespaced_pod("bound", namespace, grace_period_seconds=0)
        watch.wait("DELETED", "bound")

        core.create_namespaced_pod(namespace, _pod("unbound", scheduler_name))
        watch.wait("ADDED", "unbound")
        core.delete_namespaced_pod("unbound", namespace, grace_period_seconds=0)
        watch.wait("DELETED", "unbound")
        time.sleep(1)  # anything more the watch would say of them
    finally:
        watch.stop()

    recorded = {
        "bound, then deleted": {"pod watch": _summary(watch.events, "bound", node)},
        "deleted while pending": {"pod watch": _summary(watch.events, "unbound", node)},
    }
    server = client.VersionApi(api_client).get_code().git_version
    if os.environ.get("RECORD_WATCH_SHAPES") == "1":
        SHAPES_FILE.write_text(json.dumps({"recorded from": f"kube-apiserver {server}", **recorded}, indent=2) + "\n")
        return
    expected = json.loads(SHAPES_FILE.read_text())
    expected.pop("recorded from")
    assert recorded == expected, (
        f"kube-apiserver {server} sends other watch events than {SHAPES_FILE.name} says (and the state "
        f"machine models): {json.dumps(recorded, indent=2)}"
    )
