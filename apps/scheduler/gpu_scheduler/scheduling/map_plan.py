"""Which GPUs of a node go together into one pod's line, for `gpu-scheduler map generate`.

With a node's inventory, a pod's GPUs are chosen best connected first: GPUs
joined by NVLink, then GPUs under one PCIe switch (SINGLE, MULTIPLE), then one
host bridge or NUMA node, as NVML's topology levels rank them. The choice is
greedy, one pod at a time: the best-connected group of the GPUs left, ties to
the lowest indexes. A GPU with MIG on cannot run a CUDA process as a whole, so
each of its MIG devices is a line of its own (a MIG device stands alone on its
line). Without an inventory nothing is known of the links: ordinals in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from .inventory import NVLINK, Gpu, Inventory

# How close two GPUs are, by NVML's common ancestor: higher is closer.
CLOSENESS = {NVLINK: 5, "SINGLE": 4, "MULTIPLE": 3, "HOSTBRIDGE": 2, "NODE": 1, "SYSTEM": 0}
# Beyond this many GPUs on a node the groups are not searched exhaustively: in order instead.
MAX_SEARCHED_GPUS = 16

INDEX = "index"
UUID = "uuid"
DEVICE_SPELLINGS = (INDEX, UUID)


@dataclass(frozen=True, slots=True)
class NodePlan:
    """The device lists of one node's lines, and why some GPUs got none."""

    groups: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()


def plan_node(inventory: Inventory, gpus_per_pod: int | None, devices: str = INDEX) -> NodePlan:
    """Device groups for one node's lines. gpus_per_pod None: all its whole GPUs in one line."""
    whole = sorted((g for g in inventory.gpus if not g.mig_enabled), key=lambda g: g.index)
    notes: list[str] = []
    groups: list[tuple[str, ...]] = []
    if whole:
        size = gpus_per_pod or len(whole)
        chosen, left = _best_groups(whole, size, _closeness(inventory))
        groups.extend(tuple(_spell(g, devices) for g in group) for group in chosen)
        if left:
            notes.append(_left_over([g.index for g in left], size))
    for gpu in sorted((g for g in inventory.gpus if g.mig_enabled), key=lambda g: g.index):
        if not gpu.mig_devices:
            notes.append(f"GPU {gpu.index} has MIG on and no MIG devices: nothing to map")
        for mig in sorted(gpu.mig_devices, key=lambda m: (m.gpu_instance_id, m.compute_instance_id)):
            groups.append((mig.uuid,))
    return NodePlan(tuple(groups), tuple(notes))


def plan_ordinals(count: int, gpus_per_pod: int | None) -> NodePlan:
    """Without an inventory: ordinals in order, `gpus_per_pod` at a time."""
    size = gpus_per_pod or count
    full = count - count % size
    groups = tuple(tuple(str(d) for d in range(start, start + size)) for start in range(0, full, size))
    notes = (_left_over(range(full, count), size),) if full < count else ()
    return NodePlan(groups, notes)


def _left_over(indexes: Iterable[int], size: int) -> str:
    return f"GPUs {', '.join(str(i) for i in indexes)} left over (fewer than {size} per pod)"


def _spell(gpu: Gpu, devices: str) -> str:
    return gpu.uuid if devices == UUID else str(gpu.index)


def _closeness(inventory: Inventory) -> dict[frozenset[int], int]:
    return {frozenset((link.a, link.b)): CLOSENESS.get(link.common_ancestor, 0) for link in inventory.links}


def _best_groups(
    gpus: list[Gpu], size: int, closeness: dict[frozenset[int], int]
) -> tuple[list[tuple[Gpu, ...]], list[Gpu]]:
    left = list(gpus)
    chosen: list[tuple[Gpu, ...]] = []
    while len(left) >= size:
        if len(left) > MAX_SEARCHED_GPUS or size == 1:
            group = tuple(left[:size])
        else:
            # max() keeps the first of equals, and combinations() come lowest indexes first.
            group = max(itertools.combinations(left, size), key=lambda g: _score(g, closeness))
        chosen.append(group)
        left = [g for g in left if g not in group]
    return chosen, left


def _score(group: tuple[Gpu, ...], closeness: dict[frozenset[int], int]) -> tuple[int, int]:
    """(the weakest link of the group, the sum of its links): a group is as good as its slowest pair."""
    pairs = [closeness.get(frozenset((a.index, b.index)), 0) for a, b in itertools.combinations(group, 2)]
    return (min(pairs), sum(pairs)) if pairs else (0, 0)
