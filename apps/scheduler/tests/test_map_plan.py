"""`map generate` from inventories: each pod's GPUs best connected first (issue 19, point 4)."""

from __future__ import annotations

from gpu_scheduler.mapcli import render_generated_map
from gpu_scheduler.placement import parse_map_uncached
from gpu_scheduler.scheduling.inventory import Gpu, Inventory, Link, MigDevice
from gpu_scheduler.scheduling.map_plan import UUID, plan_node, plan_ordinals
from gpu_scheduler.scheduling.nodes import NodeInfo


def uuid(i: int) -> str:
    return f"GPU-0a1b2c3d-0000-4000-8000-{i:012x}"


def gpus(count: int, mig: dict[int, tuple[MigDevice, ...]] | None = None) -> tuple[Gpu, ...]:
    mig = mig or {}
    return tuple(
        Gpu(i, uuid(i), f"00000000:{i + 7:02X}:00.0", "NVIDIA H100 80GB HBM3", 81559, 0, i in mig, mig.get(i, ()))
        for i in range(count)
    )


def links(*pairs: tuple[int, int, str], count: int = 4) -> tuple[Link, ...]:
    """Every pair of `count` GPUs, SYSTEM unless given."""
    given = {frozenset((a, b)): ancestor for a, b, ancestor in pairs}
    out = []
    for a in range(count):
        for b in range(a + 1, count):
            ancestor = given.get(frozenset((a, b)), "SYSTEM")
            out.append(Link(a, b, 4 if ancestor == "NVLINK" else 0, ancestor))
    return tuple(out)


def test_pairs_follow_nvlink_not_the_index_order():
    # NVLink joins 0-2 and 1-3: pairs in index order (0,1 and 2,3) would cross the slow link.
    inventory = Inventory("550", gpus(4), links((0, 2, "NVLINK"), (1, 3, "NVLINK")))
    assert plan_node(inventory, 2).groups == (("0", "2"), ("1", "3"))


def test_a_shared_pcie_switch_beats_a_numa_node_and_a_leftover_gpu_is_said():
    inventory = Inventory("550", gpus(5, {}), links((0, 3, "SINGLE"), (1, 2, "NODE"), count=5))
    plan = plan_node(inventory, 2)
    assert plan.groups == (("0", "3"), ("1", "2"))
    assert plan.notes == ("GPUs 4 left over (fewer than 2 per pod)",)


def test_a_group_is_as_good_as_its_weakest_pair():
    # {0,1,2}: two NVLink pairs but 1-2 across the system, the largest sum; {0,1,3}: one
    # NVLink pair and GPU 3 on the same NUMA node as both, no pair worse than that.
    pairs = ((0, 1, "NVLINK"), (0, 2, "NVLINK"), (0, 3, "NODE"), (1, 3, "NODE"), (2, 3, "NODE"))
    inventory = Inventory("550", gpus(4), links(*pairs))
    assert plan_node(inventory, 3).groups[0] == ("0", "1", "3")


def test_uuids_and_mig_devices_each_on_a_line_of_their_own():
    migs = (
        MigDevice("MIG-5e6f7a8b-0000-4000-8000-00000000000b", "2g.10gb", 2, 0, 9984),
        MigDevice("MIG-5e6f7a8b-0000-4000-8000-00000000000a", "3g.20gb", 1, 0, 20096),
    )
    inventory = Inventory("550", gpus(3, {0: migs}), links(count=3))
    plan = plan_node(inventory, None, UUID)
    assert plan.groups == ((uuid(1), uuid(2)), (migs[1].uuid,), (migs[0].uuid,))


def test_without_an_inventory_ordinals_go_in_order():
    assert plan_ordinals(5, 2).groups == (("0", "1"), ("2", "3"))
    assert plan_ordinals(3, None).groups == (("0", "1", "2"),)


def test_the_generated_map_parses_and_says_what_it_left_out():
    inventory = Inventory("550", gpus(4), links((0, 2, "NVLINK"), (1, 3, "NVLINK")))
    nodes = [
        NodeInfo("node4", None, True, "", False, 4, True, inventory=inventory),
        NodeInfo("node2", None, True, "", False, 3, True),
        NodeInfo("cpu-only", None, True, "", False, 0),
    ]
    text = render_generated_map(nodes, 2)
    assert "# node2: ordinals in order, links unknown: it publishes no inventory (gpu-scheduler agent)" in text
    assert "# node2: GPUs 2 left over (fewer than 2 per pod)" in text
    parsed = parse_map_uncached(text)
    assert {i: (e.node, e.cuda_visible_devices) for i, e in parsed.items()} == {
        0: ("node2", "0,1"),
        1: ("node4", "0,2"),
        2: ("node4", "1,3"),
    }
    by_uuid = render_generated_map(nodes, 2, UUID)
    assert "# node2: skipped: GPU UUIDs unknown" in by_uuid
    assert parse_map_uncached(by_uuid)[0].cuda_visible_devices == f"{uuid(0)},{uuid(2)}"
