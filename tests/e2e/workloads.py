"""The workloads the suite and the demo deploy: the task's check StatefulSet, Indexed Jobs, bare pods.

The check StatefulSet is rendered from charts/gpu-scheduler-check with
`helm template`, so the demo and the tests deploy what users deploy.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
CHECK_CHART = REPO / "charts" / "gpu-scheduler-check"
HELM = REPO / ".cache" / "bin" / "helm"
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
    rendered = subprocess.run(
        [
            str(HELM),
            "template",
            "gpu-scheduler-check",
            str(CHECK_CHART),
            "--namespace",
            namespace,
            "--set-string",
            "image.registry=",
            "--set-string",
            f"image.repository={repository}",
            "--set-string",
            f"image.tag={tag}",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if rendered.returncode != 0:
        raise AssertionError(f"helm template {CHECK_CHART} failed: {rendered.stderr}")
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


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
    name: str, scheduling_map: str, scheduler_name: str | None = SCHEDULER_NAME, labels: dict | None = None
) -> dict:
    """A pod without a controller; its index is the number its name ends with."""
    metadata = {"name": name, "labels": labels or {"app": "e2e"}, "annotations": {MAP_ANNOTATION: scheduling_map}}
    spec: dict = {"containers": [container("main")], "terminationGracePeriodSeconds": 0}
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
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


def deployment(name: str, scheduling_map: str) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {MAP_ANNOTATION: scheduling_map}},
                "spec": {"schedulerName": SCHEDULER_NAME, "containers": [container("main")]},
            },
        },
    }


def statefulset(name: str, scheduling_map: str, replicas: int) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "serviceName": name,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {MAP_ANNOTATION: scheduling_map}},
                "spec": {"schedulerName": SCHEDULER_NAME, "containers": [container("main")]},
            },
        },
    }
