"""The workloads the suite and the demo deploy: the task's check StatefulSet, Indexed Jobs, bare pods.

The check StatefulSet is rendered from charts/gpu-scheduler-check with
`helm template`, so the demo and the tests deploy what users deploy.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .charts import CHECK_CHART, helm_template
from .cluster import with_bind_entries

MAP_ANNOTATION = "gpu-scheduling-map"
PLACEMENT_ANNOTATION = "gpu-scheduler/placement"
SCHEDULER_NAME = "gpu-scheduler"
# Every pod the suite creates runs the check image: the one `make e2e` loaded
# into KinD (scripts/kind.sh sets E2E_CHECK_IMAGE); KWOK never pulls it.
IMAGE = os.environ.get("E2E_CHECK_IMAGE") or "gpu-scheduler-check:dev"


@dataclass(frozen=True)
class Expected:
    node: str
    devices: str


# The task's map (the check chart's default schedulingMap): pod <index> on
# <node> with CUDA_VISIBLE_DEVICES=<devices>.
TASK_EXPECTED = {
    0: Expected("node1", "0,1"),
    1: Expected("node2", "2"),
    2: Expected("node3", "0,1,2"),
    3: Expected("node4", "3"),
    4: Expected("node4", "3"),
}


def check_chart(namespace: str) -> list[dict]:
    """The objects of charts/gpu-scheduler-check with its default values, the task's map
    among them (a headless Service and the StatefulSet); only the image is ours (IMAGE,
    named in full: the chart's default registry is where a release is pushed)."""
    repository, _, tag = IMAGE.rpartition(":")
    if "/" in tag or not repository:
        raise AssertionError(f"E2E_CHECK_IMAGE={IMAGE!r} must be <repository>:<tag>")
    return helm_template(
        "gpu-scheduler-check",
        CHECK_CHART,
        namespace,
        "--set-string",
        f"image.repository={repository}",
        "--set-string",
        f"image.tag={tag}",
    )


def only(objects: list[dict], kind: str) -> dict:
    found = [obj for obj in objects if obj["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def container(name: str, command: list[str] | None = None) -> dict:
    spec = {"name": name, "image": IMAGE}
    if command:
        spec["command"] = command
    return spec


def bare_pod(
    name: str,
    scheduling_map: str,
    scheduler_name: str | None = SCHEDULER_NAME,
    labels: dict | None = None,
    bind_entries: bool = False,
    node_name: str | None = None,
) -> dict:
    """A pod without a controller; its index is the number its name ends with. Its container has
    no CUDA_VISIBLE_DEVICES entry (admission gives it one) unless `bind_entries`: then it has the
    README's entry, the devices the bind writes, as a user who runs no admission of ours writes it
    (without one the scheduler refuses the pod). With `node_name` it is created on that node
    (spec.nodeName): no Binding will come, so the webhook reads its map and writes its devices."""
    metadata = {"name": name, "labels": labels or {"app": "e2e"}, "annotations": {MAP_ANNOTATION: scheduling_map}}
    spec: dict = {"containers": [container("main")], "terminationGracePeriodSeconds": 0}
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if bind_entries:
        with_bind_entries(spec)
    if node_name is not None:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def indexed_job(name: str, scheduling_map: str, completions: int, parallelism: int) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {MAP_ANNOTATION: scheduling_map}},
                "spec": {"schedulerName": SCHEDULER_NAME, "restartPolicy": "Never", "containers": [container("train")]},
            },
        },
    }


def controller(kind: str, name: str, pod_spec: dict, annotations: dict | None = None, **spec) -> dict:
    """An apps/v1 `kind` (Deployment, StatefulSet, ReplicaSet, DaemonSet) of pods labelled app=<name>
    that carry `annotations`; `spec` adds fields to its spec (replicas, say)."""
    labels = {"app": name}
    metadata = {"labels": labels, **({"annotations": annotations} if annotations else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {**spec, "selector": {"matchLabels": labels}, "template": {"metadata": metadata, "spec": pod_spec}},
    }


def mapped_controller(kind: str, name: str, scheduling_map: str, **spec) -> dict:
    """A controller of `kind` whose pods are ours, with `scheduling_map`."""
    pod_spec = {"schedulerName": SCHEDULER_NAME, "containers": [container("main")]}
    return controller(kind, name, pod_spec, {MAP_ANNOTATION: scheduling_map}, **spec)


def deployment(name: str, scheduling_map: str) -> dict:
    return mapped_controller("Deployment", name, scheduling_map, replicas=1)


def replicaset(name: str, scheduling_map: str) -> dict:
    return mapped_controller("ReplicaSet", name, scheduling_map, replicas=0)


def statefulset(name: str, scheduling_map: str, replicas: int) -> dict:
    return mapped_controller(
        "StatefulSet", name, scheduling_map, replicas=replicas, podManagementPolicy="Parallel", serviceName=name
    )
