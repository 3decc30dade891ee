"""`gpu-scheduler gpus` on API objects: holders per physical GPU, MIG devices under their GPU,
devices no GPU of the inventory is, and nodes without an inventory."""

from __future__ import annotations

import json

import pytest
from gpu_scheduler.gpuscli import render_text, report
from gpu_scheduler.placement import bind_env_entry
from gpu_scheduler.scheduling.inventory import INVENTORY_ANNOTATION, Inventory
from inventories import GPU0, GPU1, INVENTORY, MIG_A


def node(name: str, inventory: Inventory | None) -> dict:
    annotations = {INVENTORY_ANNOTATION: inventory.to_annotation()} if inventory else {}
    return {"metadata": {"name": name, "annotations": annotations}, "status": {}}


def pod(name: str, node_name: str, devices: str, scheduler: str = "gpu-scheduler") -> dict:
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": name},
        "spec": {
            "schedulerName": scheduler,
            "nodeName": node_name,
            "containers": [{"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": devices}]}],
        },
        "status": {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-26T08:00:00Z"}]
        },
    }


def test_holders_are_listed_per_physical_gpu_whatever_the_spelling():
    pods = [
        pod("a-0", "node3", "0"),
        pod("b-0", "node3", "GPU-" + GPU0[4:].upper()),
        pod("c-0", "node3", MIG_A),
    ]
    pods.append(pod("other-0", "node3", "1", scheduler="default-scheduler"))  # not ours: holds nothing
    pods.append(pod("lost-0", "node3", "GPU-ffffffff-0000-4000-8000-000000000000"))
    (node3,) = report([node("node3", INVENTORY)], pods, "gpu-scheduler")
    document = node3.document()
    gpu0, gpu1, _ = document["gpus"]
    assert [h["pod"] for h in gpu0["heldBy"]] == ["ml/a-0", "ml/b-0"]
    assert gpu0["heldBy"][0]["since"] == "2026-11-26T08:00:00Z"
    assert [h["pod"] for h in gpu0["mig"][0]["heldBy"]] == ["ml/c-0"]
    assert gpu1["heldBy"] == []
    assert document["unresolved"] == [
        {
            "device": "GPU-ffffffff-0000-4000-8000-000000000000",
            "heldBy": [
                {
                    "pod": "ml/lost-0",
                    "device": "GPU-ffffffff-0000-4000-8000-000000000000",
                    "since": "2026-11-26T08:00:00Z",
                    "chosen": None,
                }
            ],
        }
    ]
    text = render_text([node3])
    rows = [line.split() for line in text.splitlines()]
    assert any(row[:3] == ["node3", "1", GPU1] and row[-1] == "(free)" for row in rows), text
    assert any(row[:2] == ["node3", "0"] and row[-1] == "map" for row in rows), text
    assert "not in its inventory" in text


def test_gpus_the_scheduler_chose_are_shown_so_with_why():
    chosen = pod("d-0", "node1", "1")
    why = "chosen for line 1 (1 GPU on any node); node1 was already in use (3 of 4 GPUs free)"
    chosen["metadata"]["annotations"] = {"gpu-scheduler/placement": json.dumps({"node": "node1", "chosen": why})}
    (node1,) = report([node("node1", None)], [pod("a-0", "node1", "0"), chosen], "gpu-scheduler")
    assert [h["chosen"] for h in node1.document()["unresolved"][1]["heldBy"]] == [why]
    rows = [line.split() for line in render_text([node1]).splitlines()]
    assert [row[-1] for row in rows if row[:2] == ["node1", "1"]] == ["chosen"]
    assert [row[-1] for row in rows if row[:2] == ["node1", "0"]] == ["map"]


def test_a_node_without_an_inventory_shows_its_held_devices_as_written():
    (node1,) = report([node("node1", None)], [pod("a-0", "node1", "0,1")], "gpu-scheduler")
    assert node1.document()["inventoryPublished"] is False
    assert sorted(node1.unresolved) == ["0", "1"]
    assert "no inventory published" in render_text([node1])


def test_nodes_with_nothing_of_gpus_are_left_out():
    control_plane = node("control-plane", None)
    advertised = {**node("node2", None), "status": {"capacity": {"nvidia.com/gpu": "4"}}}
    shown = report([control_plane, advertised, node("node3", INVENTORY)], [], "gpu-scheduler")
    assert [n.name for n in shown] == ["node2", "node3"]


@pytest.mark.parametrize(
    ("gang_map", "reserved"),
    [
        # Pending for node1:0 (held by a-0) and node1:1 (free): the free one is reserved.
        ("0=node1:0\n1=node1:1\n", {"1": "ml/StatefulSet/train"}),
        # Count lines, 2 + 3 GPUs of node1's 4 (a-0 holds GPU 0): the first member's 2 free
        # GPUs are reserved, shown as the ordinals the scheduler would write.
        ("0=*:gpus=2\n1=*:gpus=3\n", {"1": "ml/StatefulSet/train", "2": "ml/StatefulSet/train"}),
    ],
)
def test_gpus_a_waiting_gang_needs_are_shown_reserved_for_it(gang_map, reserved):
    def gang_pod(index: int) -> dict:
        return {
            "metadata": {
                "name": f"train-{index}",
                "namespace": "ml",
                "uid": f"t{index}",
                "creationTimestamp": "2026-11-26T08:00:00Z",
                "labels": {"apps.kubernetes.io/pod-index": str(index)},
                "annotations": {"gpu-scheduling-map": gang_map, "gpu-scheduler/gang": "true"},
                "ownerReferences": [{"kind": "StatefulSet", "name": "train", "controller": True}],
            },
            "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "main", "env": [bind_env_entry()]}]},
        }

    nodes = [{**node("node1", None), "status": {"capacity": {"nvidia.com/gpu": "4"}}}]
    nodes[0]["status"]["allocatable"] = nodes[0]["status"]["capacity"]
    nodes[0]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    now = 1_795_000_000.0  # within the gang's timeout of its pods' creation
    (node1,) = report(nodes, [pod("a-0", "node1", "0")], "gpu-scheduler", [gang_pod(0), gang_pod(1)], now, 10**9)
    assert node1.reserved == reserved
    assert "(reserved for gang ml/StatefulSet/train)" in render_text([node1])
