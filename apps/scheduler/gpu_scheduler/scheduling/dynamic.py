"""The node and GPUs for a line that asks for a number of GPUs (placement.requests).

A node can serve such a pod when its labels match the line's selector and it has that many
GPUs free: whole GPUs of its published inventory (scheduling.inventory; a GPU with MIG on
is left to lines that name its MIG devices), else ordinals 0..n-1 of its nvidia.com/gpu
capacity. A GPU is free when no other pod holds it (under every --gpu-sharing policy: the
scheduler never chooses to share), no waiting gang has it reserved, and no pending pod's
pinned line names it: pinned pods keep priority over what they name.

Of the nodes that can, the choice is, in this order:
1. for a pod of several GPUs, the node where the best-connected free set is best connected
   (NVLink first, then one PCIe switch, ...: NVML's topology levels, as map_plan ranks them);
2. a node already in use before an untouched one, so that whole nodes stay free for pods
   that need a whole node;
3. the node left with the fewest free GPUs (best fit);
4. the node's name.
The nodes are then tried in that order through kube-scheduler's filters (scheduling.filters),
and the first that passes is the choice. On the node, one GPU goes where it breaks no free
NVLink pair: the GPU whose linked neighbours are busy first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ..placement import GpuRequest, MapEntry
from .inventory import NVLINK, Inventory
from .ledger import GpuLedger
from .map_plan import CLOSENESS
from .nodes import NodeInfo

# Beyond this many sets a pod's GPUs are grown greedily from each free GPU instead of
# searched exhaustively (C(16, 8) = 12,870 sets of 28 pairs each would cost a pod 0.1 s).
MAX_SEARCHED_SETS = 500
# Messages name this many nodes at most.
MAX_NODES_NAMED = 5

NOT_SELECTED = "node(s) didn't match the line's node selector"
NO_GPUS = "node(s) had no GPUs (no inventory published, no nvidia.com/gpu capacity)"
SPELLED_ELSEWISE = "node(s) had GPUs held under UUIDs and no inventory to tell which ordinals those are"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node that has enough free GPUs, with the set it would give the pod."""

    node: NodeInfo
    devices: tuple[str, ...]
    quality: int  # the weakest link within the set (map_plan's closeness); 0 for one GPU
    in_use: bool  # some GPU of the node is held
    free: int  # free GPUs before the pod
    total: int  # GPUs the node has for whole-GPU lines

    @property
    def rank(self) -> tuple:
        return (-self.quality, not self.in_use, self.free - len(self.devices), self.node.name)

    def entry(self, request: GpuRequest) -> MapEntry:
        """The line this choice stands for: what the Binding writes, as for a pinned line."""
        return MapEntry(request.index, self.node.name, self.devices, request.line)  # type: ignore[arg-type]

    def explain(self, request: GpuRequest, fitting: int) -> str:
        """Why this node and these GPUs, for the pod's Scheduled Event."""
        said = [f"chosen for line {request.line} ({request.describe()})"]
        if len(self.devices) > 1:
            said.append(_link_words(self.quality))
        if self.in_use:
            said.append(
                f"{self.node.name} was already in use ({self.free} of {self.total} GPUs free), which keeps "
                "untouched nodes whole for larger pods"
            )
        else:
            said.append(f"{self.node.name} had all {self.total} GPUs free and no node in use had room")
        if fitting > 1:
            said.append(f"{fitting} nodes had room")
        return "; ".join(said)


def _link_words(quality: int) -> str:
    names = {v: k for k, v in CLOSENESS.items()}
    level = names.get(quality)
    if level == NVLINK:
        return "the GPUs are joined by NVLink"
    if level is None or quality == 0:
        return "no link between the GPUs is known to be better than across the system"
    return f"the GPUs' closest common ancestor is {level} (NVML's topology level): no NVLink set was free"


def node_gpus(node: NodeInfo) -> tuple[tuple[str, ...], Mapping[frozenset[int], int]] | None:
    """The ordinals of the node's GPUs a count may take, and how close each pair is; None
    for a node without GPUs."""
    inventory: Inventory | None = node.inventory
    if inventory is not None:
        whole = sorted(g.index for g in inventory.gpus if not g.mig_enabled)
        closeness = {frozenset((link.a, link.b)): CLOSENESS.get(link.common_ancestor, 0) for link in inventory.links}
        return (tuple(str(i) for i in whole), closeness) if whole else None
    if node.gpus_advertised and node.gpus > 0:
        return tuple(str(i) for i in range(node.gpus)), {}
    return None


def free_gpus(node: NodeInfo, ledger: GpuLedger) -> int:
    """How many of the node's GPUs a count line could take that no pod holds."""
    gpus = node_gpus(node)
    if gpus is None:
        return 0
    return sum(1 for device in gpus[0] if not ledger.conflicts("", node.name, (device,)))


def candidate(
    request: GpuRequest,
    node: NodeInfo,
    uid: str,
    ledger: GpuLedger,
    kept: Mapping[tuple[str, str], str],
) -> Candidate | str:
    """The node's candidate for the pod, or the reason (a FailedScheduling phrase) it has none.
    `kept`: (node, ledger key) -> who it is kept for (a waiting gang, a pinned pending pod)."""
    if not request.admits(node.labels):
        return NOT_SELECTED
    gpus = node_gpus(node)
    if gpus is None:
        return NO_GPUS
    ordinals, closeness = gpus
    if node.inventory is None and ledger.spelling_conflicts(uid, node.name, ordinals[:1]):
        return SPELLED_ELSEWISE
    busy = {d for d in ordinals if ledger.conflicts(uid, node.name, (d,))}
    free = [d for d in ordinals if d not in busy and (node.name, ledger.key(node.name, d)) not in kept]
    if len(free) < request.count:
        return f"node(s) had fewer than {request.count} free GPUs"
    devices, quality = best_set([int(d) for d in free], request.count, closeness, busy={int(d) for d in busy})
    return Candidate(node, tuple(str(d) for d in devices), quality, bool(busy), len(free), len(ordinals))


def best_set(
    free: list[int], count: int, closeness: Mapping[frozenset[int], int], busy: set[int] = frozenset()
) -> tuple[tuple[int, ...], int]:
    """The `count` GPUs of `free` that are best connected (their weakest link, then the sum of
    their links), ties to the set that breaks the fewest free NVLink links of the others, then
    to the lowest ordinals; and the set's weakest link."""
    nvlinked = {pair for pair, level in closeness.items() if level == CLOSENESS[NVLINK]}

    def links_broken(group: tuple[int, ...]) -> int:
        inside = set(group)
        return sum(1 for pair in nvlinked if len(pair & inside) == 1 and not (pair - inside) & busy)

    def score(group: tuple[int, ...]) -> tuple:
        pairs = [closeness.get(frozenset(p), 0) for p in itertools.combinations(group, 2)]
        weakest, total = (min(pairs), sum(pairs)) if pairs else (0, 0)
        return (weakest, total, -links_broken(group), tuple(-g for g in group))

    groups: Iterable[tuple[int, ...]]
    if _combinations(len(free), count) <= MAX_SEARCHED_SETS:
        groups = itertools.combinations(free, count)
    else:
        groups = (_grown(seed, free, count, closeness) for seed in free)
    best = max(groups, key=score)
    return tuple(sorted(best)), score(best)[0]


def _grown(seed: int, free: list[int], count: int, closeness: Mapping[frozenset[int], int]) -> tuple[int, ...]:
    """A set grown from `seed`, each time by the free GPU closest to all of the set."""
    group = [seed]
    left = [g for g in free if g != seed]
    while len(group) < count:
        nearest = max(left, key=lambda g: (min(closeness.get(frozenset((g, m)), 0) for m in group), -g))
        group.append(nearest)
        left.remove(nearest)
    return tuple(sorted(group))


def _combinations(n: int, k: int) -> int:
    from math import comb

    return comb(n, k)


@dataclass(frozen=True, slots=True)
class Choice:
    entry: MapEntry
    why: str


def choose(
    request: GpuRequest,
    nodes: Iterable[NodeInfo],
    uid: str,
    ledger: GpuLedger,
    kept: Mapping[tuple[str, str], str],
    passes: Callable[[NodeInfo, tuple[str, ...]], str | None],
) -> Choice | tuple[dict[str, int], list[str]]:
    """The choice for the pod, or why there is none: (phrase -> node count, the nodes that had
    room but that a filter refused, with the filter's reason). `passes(node, devices)` runs
    kube-scheduler's filters and returns the first failing one's reason, or None."""
    reasons: dict[str, int] = {}
    fitting: list[Candidate] = []
    for node in nodes:
        found = candidate(request, node, uid, ledger, kept)
        if isinstance(found, str):
            reasons[found] = reasons.get(found, 0) + 1
        else:
            fitting.append(found)
    fitting.sort(key=lambda c: c.rank)
    refused: list[str] = []
    for found in fitting:
        failure = passes(found.node, found.devices)
        if failure is None:
            return Choice(found.entry(request), found.explain(request, len(fitting)))
        reasons[failure] = reasons.get(failure, 0) + 1
        refused.append(found.node.name)
    return reasons, refused


def no_fit_message(request: GpuRequest, reasons: Mapping[str, int], total: int) -> str:
    """kube-scheduler's form: `0/4 nodes are available for line 2 (2 GPUs on any node): ...`."""
    said = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda r: (-r[1], r[0])))
    return f"0/{total} nodes are available for line {request.line} ({request.describe()}): {said or 'no nodes'}."
