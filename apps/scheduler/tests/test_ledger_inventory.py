"""One ledger key per physical GPU where a node publishes its inventory (issue 19, point 2),
and devices the node does not have refused before binding (point 3)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from gpu_scheduler.placement import bind_env_entry
from gpu_scheduler.scheduling import AssignedPod, ClusterCache, SharingPolicy, decide
from gpu_scheduler.scheduling.inventory import INVENTORY_ANNOTATION, Inventory
from gpu_scheduler.scheduling.ledger import GpuLedger
from gpu_scheduler.scheduling.nodes import NodeInfo
from inventories import GPU0, GPU1, INVENTORY, MIG_A, MIG_B


def ledger_with_inventory() -> GpuLedger:
    ledger = GpuLedger()
    ledger.set_inventory("node3", INVENTORY)
    return ledger


@pytest.mark.parametrize(
    ("held", "asked"),
    [
        ("0", GPU0),
        (GPU0, "0"),
        (GPU0.lower(), "GPU-" + GPU0[4:].upper()),
        ("1", GPU1.lower()),
        (MIG_A, "MIG-" + MIG_A[4:].upper()),
        (f"MIG-{GPU0}/1/0", MIG_A),  # the old spelling of the same MIG device
    ],
)
def test_one_gpu_in_any_spelling_is_one_key(held, asked):
    # Before the inventory, "0" and GPU-<uuid> of that GPU were two devices to the ledger.
    ledger = ledger_with_inventory()
    ledger.hold("u0", "ml/a-0", "node3", (held,))
    assert ledger.conflicts("u1", "node3", (asked,)) == [("ml/a-0", asked)]
    assert ledger.spelling_conflicts("u1", "node3", (asked,)) == []


@pytest.mark.parametrize(("held", "asked"), [("0", MIG_A), (MIG_B, "0"), (MIG_A, GPU0)])
def test_a_whole_gpu_conflicts_with_each_mig_device_on_it(held, asked):
    ledger = ledger_with_inventory()
    ledger.hold("u0", "ml/a-0", "node3", (held,))
    assert ledger.conflicts("u1", "node3", (asked,)) == [("ml/a-0", asked)]


def test_two_mig_devices_of_one_gpu_do_not_conflict_and_other_gpus_are_free():
    ledger = ledger_with_inventory()
    ledger.hold("u0", "ml/a-0", "node3", (MIG_A,))
    assert ledger.conflicts("u1", "node3", (MIG_B,)) == []
    assert ledger.conflicts("u1", "node3", ("1",)) == []
    ledger.release("u0")
    assert ledger.conflicts("u1", "node3", ("0",)) == []
    assert ledger.holders() == {}


def test_an_inventory_published_later_rekeys_the_pods_already_held():
    ledger = GpuLedger()
    ledger.hold("u0", "ml/a-0", "node3", ("0",))
    # Without the inventory the UUID may or may not be GPU 0: only a spelling conflict.
    assert ledger.conflicts("u1", "node3", (GPU0,)) == []
    assert ledger.spelling_conflicts("u1", "node3", (GPU0,)) == [("ml/a-0", "0", GPU0)]
    assert ledger.set_inventory("node3", INVENTORY) is True
    assert ledger.conflicts("u1", "node3", (GPU0,)) == [("ml/a-0", GPU0)]
    assert ledger.set_inventory("node3", INVENTORY) is False
    assert ledger.set_inventory("node3", None) is True
    assert ledger.conflicts("u1", "node3", (GPU0,)) == []


def node_info(inventory: Inventory | None) -> NodeInfo:
    """node3 as the scheduler's node watch reads it (kube.objects.node_info parses allocatable)."""
    return replace(NodeInfo.from_api(node(inventory)), allocatable={"pods": 110, "cpu": 8000})


def node(inventory: Inventory | None, name: str = "node3") -> dict:
    annotations = {INVENTORY_ANNOTATION: inventory.to_annotation()} if inventory else {}
    capacity = {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi", "pods": "110"}
    return {
        "metadata": {"name": name, "labels": {}, "annotations": annotations},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "capacity": capacity},
    }


def pending(uid: str, name: str, devices: str) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "annotations": {"gpu-scheduling-map": f"0=node3:{devices}\n"},
        },
        "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "main", "env": [bind_env_entry()]}]},
    }


def test_deny_refuses_a_uuid_of_the_gpu_a_running_pod_holds_by_its_ordinal():
    cache = ClusterCache()
    cache.upsert_node(node_info(INVENTORY))
    first = decide(pending("u0", "a-0", "0"), cache, SharingPolicy.DENY)
    assert first.bind, first.reason
    cache.assume(AssignedPod("u0", "ml/a-0", "node3", devices=("0",)))
    second = decide(pending("u1", "b-0", GPU0), cache, SharingPolicy.DENY)
    assert not second.bind
    assert f"GPU {GPU0} by ml/a-0" in second.reason
    assert "no inventory" not in second.reason


def test_a_device_the_node_does_not_have_is_refused_listing_its_gpus():
    cache = ClusterCache()
    cache.upsert_node(node_info(INVENTORY))
    missing = "GPU-ffffffff-0000-4000-8000-000000000000"
    decision = decide(pending("u0", "a-0", f"{GPU1},{missing}"), cache, SharingPolicy.WARN)
    assert not decision.bind and decision.plugin == "GPUDevices"
    assert f"node(s) had no GPU {missing} (its GPUs: 0 {GPU0}" in decision.reason
    assert f"1 {GPU1}" in decision.reason


def test_an_unreadable_inventory_is_reported_and_the_node_scheduled_without_one():
    broken = node(INVENTORY)
    broken["metadata"]["annotations"][INVENTORY_ANNOTATION] = '{"version": 1, "gpus": 3}'
    info = NodeInfo.from_api(broken)
    assert info.inventory is None
    assert info.inventory_problem.startswith(f"node node3's annotation {INVENTORY_ANNOTATION}: ")
    cache = ClusterCache()
    cache.upsert_node(broken)
    assert cache.ledger.inventory("node3") is None
