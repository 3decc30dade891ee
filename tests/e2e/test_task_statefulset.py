"""The task itself: the gpu-scheduler-check StatefulSet with the five-line map."""

from __future__ import annotations

import json

import pytest

from .cluster import (
    FROM_BIND,
    create,
    devices_entry,
    get_json,
    node_aliases,
    pod_events,
    pod_log,
    wait_for_event,
    wait_for_pods,
    with_bind_entries,
)
from .placement_check import statefulset_placements, table
from .waiting import NotYet, wait_for
from .workloads import PLACEMENT_ANNOTATION, TASK_EXPECTED, check_chart, container, only

pytestmark = pytest.mark.e2e

CHECK_PODS = "app.kubernetes.io/name=gpu-scheduler-check"


def check_statefulset_with_every_kind_of_container(namespace: str) -> list[dict]:
    """The check chart's objects, its StatefulSet given a second container and an init container:
    CUDA_VISIBLE_DEVICES must reach every one of them, not just the first."""
    objects = check_chart(namespace)
    spec = only(objects, "StatefulSet")["spec"]["template"]["spec"]
    image = spec["containers"][0]["image"]
    spec["containers"].append(dict(container("sidecar", ["gpu-scheduler-check", "--interval=60"]), image=image))
    spec["initContainers"] = [dict(container("setup", ["gpu-scheduler-check", "--once"]), image=image)]
    return objects


@pytest.mark.compat
@pytest.mark.pipeline_sample
def test_check_statefulset_pods_run_on_the_mapped_nodes_with_their_devices_in_every_container(api_client, product, ns):
    create(api_client, ns, check_statefulset_with_every_kind_of_container(ns))

    pods = wait_for_pods(api_client, ns, 5, timeout=90, label_selector=CHECK_PODS)

    rows = statefulset_placements(pods, TASK_EXPECTED, node_aliases(api_client))
    print("\n" + table(rows))
    assert [row.pod for row in rows] == [f"gpu-scheduler-check-{i}" for i in range(5)]
    assert {row.pod: row.problems() for row in rows} == {row.pod: [] for row in rows}, table(rows)
    for row in rows:
        assert sorted(row.cuda_by_container) == ["check", "init:setup", "sidecar"], row


@pytest.mark.compat
@pytest.mark.local_only
def test_the_check_statefulset_with_the_readmes_entry_and_no_admission_sees_the_devices_the_bind_wrote(
    api_client, product, new_namespace
):
    """The same StatefulSet, every container given the README's entry, in a namespace no webhook
    of ours reaches: nothing writes devices at creation, the scheduler's binding writes them, and
    every container (the init container too) sees its line's devices through the downward API."""
    ns = new_namespace("e2e-bind", labelled=False)
    objects = check_statefulset_with_every_kind_of_container(ns)
    with_bind_entries(only(objects, "StatefulSet")["spec"]["template"]["spec"])
    create(api_client, ns, objects)

    pods = wait_for_pods(api_client, ns, 5, timeout=90, label_selector=CHECK_PODS)

    rows = statefulset_placements(pods, TASK_EXPECTED, node_aliases(api_client))
    print("\n" + table(rows))
    assert {row.pod: row.problems() for row in rows} == {f"gpu-scheduler-check-{i}": [] for i in range(5)}, table(rows)
    for pod in pods:
        spec = pod["spec"]
        given = {c["name"]: devices_entry(c) for c in spec["initContainers"] + spec["containers"]}
        # No literal anywhere: no admission touched them, what they see is the bind's.
        assert given == {"setup": FROM_BIND, "check": FROM_BIND, "sidecar": FROM_BIND}, given


def test_check_pods_record_their_placement_and_get_scheduled_and_gpu_sharing_events(api_client, product, ns):
    create(api_client, ns, check_chart(ns))

    pods = wait_for_pods(api_client, ns, 5, timeout=90, label_selector=CHECK_PODS)

    for pod in pods:
        index = int(pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"])
        expected = TASK_EXPECTED[index]
        # What the check app compares against, through the downward API.
        assert json.loads(pod["metadata"]["annotations"][PLACEMENT_ANNOTATION]) == {
            "index": index,
            "node": expected.node,
            "cudaVisibleDevices": expected.devices,
        }
        # The chart's env, as it writes it: CUDA_VISIBLE_DEVICES (read from the bind) and the
        # order its ordinals are counted in first; admission adds nothing (bind mode), or
        # replaces the first in place with its literal (the legacy modes).
        assert [e["name"] for e in pod["spec"]["containers"][0]["env"]] == [
            "CUDA_VISIBLE_DEVICES",
            "CUDA_DEVICE_ORDER",
            "NODE_NAME",
            "POD_NAME",
            "EXPECTED_PLACEMENT",
        ]
        wait_for_event(
            api_client,
            ns,
            pod["metadata"]["name"],
            "Scheduled",
            f"to {pod['spec']['nodeName']} with GPUs {expected.devices}",
            timeout=20,
        )
    # Pods 3 and 4 both hold GPU 3 of node4: whichever is bound second is warned.
    node4 = next(p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].endswith("-3"))
    shared = [
        e for i in (3, 4) for e in pod_events(api_client, ns, f"gpu-scheduler-check-{i}") if e["reason"] == "GPUShared"
    ]
    assert any(f"node {node4}" in e["message"] and "GPU 3" in e["message"] for e in shared), shared


def tick_fields(line: str) -> dict[str, str]:
    """The key=value words of one tick line of gpu-scheduler-check (after its timestamp)."""
    return dict(word.split("=", 1) for word in line.split()[1:] if "=" in word)


def test_check_pods_log_the_node_they_run_on_and_the_devices_their_own_process_has(
    api_client, product, ns, containers_run
):
    """Where containers run (KinD), each check pod's `kubectl logs` is the kubelet's record of
    what the process printed from its own environment: the node and CUDA_VISIBLE_DEVICES."""
    create(api_client, ns, check_chart(ns))
    pods = wait_for_pods(api_client, ns, 5, timeout=120, label_selector=CHECK_PODS)
    node_ips = {
        n["metadata"]["name"]: next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP")
        for n in get_json(api_client, "/api/v1/nodes")["items"]
    }
    aliases = node_aliases(api_client)

    lines = {}
    for pod in pods:
        name = pod["metadata"]["name"]

        def last_tick(name=name) -> str:
            # Ticks only: stderr lines (e.g. that NVML is missing) share the log.
            ticks = [line for line in pod_log(api_client, ns, name, "check").splitlines() if " node=" in line]
            if not ticks:
                raise NotYet("no tick logged yet")
            return ticks[-1]

        lines[name] = wait_for(f"a tick in the log of {ns}/{name}", last_tick, timeout=60)
    print("\n" + "\n".join(f"{name}: {line}" for name, line in sorted(lines.items())))

    for pod in pods:
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        expected = TASK_EXPECTED[int(pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"])]
        (status,) = pod["status"]["containerStatuses"]
        # A container containerd really started, on the node the pod is bound to.
        assert status["containerID"].startswith("containerd://"), status
        assert "running" in status["state"], status
        assert pod["status"]["hostIP"] == node_ips[node], (name, pod["status"]["hostIP"], node_ips)
        fields = tick_fields(lines[name])
        assert fields["pod"] == name, lines[name]
        assert fields["node"] == node and aliases[node] == expected.node, lines[name]
        assert fields["CUDA_VISIBLE_DEVICES"] == expected.devices, lines[name]
        assert fields["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", lines[name]
        assert fields["match"] == "true", lines[name]
