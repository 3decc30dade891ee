"""The scheduler's choice is what the containers see: bind mode on a real kube-apiserver.

Pods whose every container and init container reads CUDA_VISIBLE_DEVICES from the
`gpu-scheduler/cuda-visible-devices` annotation (a downward-API fieldRef, as the check chart
and the README's snippet write it) pass no admission of ours. A real scheduler process binds
them; the oracle is the pods as kube-apiserver stores them, resolved as the kubelet resolves a
fieldRef (e2e.cluster.container_env: an absent key is the empty string): each container must
see its map line's devices.
A pod with a container lacking the entry would see every GPU: it must stay unbound, with a
FailedScheduling that names the container.

BIND_BROKEN=1 runs the same test against a deliberately broken build (binder_hooks/) that
binds without the annotations: it must fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e.cluster import BIND_ENTRY, DEVICES_FIELD_PATH, container_env, get_pod, list_pods, wait_for_event
from e2e.waiting import NotYet, wait_for
from kubernetes import client

pytestmark = pytest.mark.faults

MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n3=node4:3\n4=node4:1\n"
EXPECTED = {"w-0": ("node1", "0,1"), "w-1": ("node2", "2"), "w-2": ("node3", "0,1,2"), "w-3": ("node4", "3")}
BROKEN = os.environ.get("BIND_BROKEN") == "1"
BROKEN_BUILD = {"PYTHONPATH": str(Path(__file__).parent / "binder_hooks"), "BINDER_HOOK_NO_ANNOTATIONS": "1"}


def pod(name: str, scheduler_name: str, sidecar_entry: bool = True) -> dict:
    def container(cname: str, entry: bool = True) -> dict:
        return {"name": cname, "image": "registry.k8s.io/pause:3.10", "env": [BIND_ENTRY] if entry else []}

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"gpu-scheduling-map": MAP}},
        "spec": {
            "schedulerName": scheduler_name,
            "terminationGracePeriodSeconds": 0,
            "initContainers": [container("setup")],
            "containers": [container("main"), container("sidecar", sidecar_entry)],
        },
    }


def test_every_container_sees_the_devices_its_binding_wrote_and_a_pod_missing_the_entry_stays_unbound(
    api_client, ns, scheduler_name, start_scheduler
):
    scheduler = start_scheduler("bind-mode", scheduler_name=scheduler_name, extra_env=BROKEN_BUILD if BROKEN else None)
    core = client.CoreV1Api(api_client)
    for name in EXPECTED:
        core.create_namespaced_pod(ns, pod(name, scheduler_name))
    core.create_namespaced_pod(ns, pod("w-4", scheduler_name, sidecar_entry=False))

    refused = wait_for_event(api_client, ns, "w-4", "FailedScheduling", "sidecar", timeout=60)
    bound = {p["metadata"]["name"]: p for p in _bound_within(api_client, ns, set(EXPECTED))}
    if BROKEN:
        assert "bindings without annotations" in scheduler.log_path.read_text(), "the broken build did not load"

    wrong = {}
    for name, (node, devices) in EXPECTED.items():
        stored = bound[name]
        sees = container_env(stored)
        if stored["spec"].get("nodeName") != node or set(sees.values()) != {devices}:
            wrong[name] = (stored["spec"].get("nodeName"), sees)
    assert not wrong, f"pods whose containers do not see their map line's devices: {wrong}"

    missing = get_pod(api_client, ns, "w-4")
    assert not missing["spec"].get("nodeName"), "a pod whose sidecar would see every GPU was bound"
    assert "CUDA_VISIBLE_DEVICES" in refused["message"] and DEVICES_FIELD_PATH in refused["message"], refused["message"]


def _bound_within(api_client, namespace: str, names: set[str], timeout: float = 60) -> list[dict]:
    def probe() -> list[dict]:
        pods = [p for p in list_pods(api_client, namespace) if p["metadata"]["name"] in names]
        if sum(1 for p in pods if p["spec"].get("nodeName")) != len(names):
            raise NotYet(", ".join(f"{p['metadata']['name']}={p['spec'].get('nodeName')}" for p in pods))
        return pods

    return wait_for(f"{sorted(names)} bound", probe, timeout)
