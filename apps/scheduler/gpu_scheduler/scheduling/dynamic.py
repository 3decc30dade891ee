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

Cost: nodes are read in packing order from scheduling.free_index and a node's set of GPUs is
chosen only when the order reaches it, so a decision looks at the few nodes it needs, not at
all of them; where GPUs are kept for pinned pods or gangs (not in the index's counts), every
node is looked at, a few set lookups each.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from ..placement import GpuRequest, MapEntry
from .inventory import NVLINK, Inventory
from .ledger import GpuLedger
from .map_plan import CLOSENESS
from .nodes import NodeInfo

# Beyond this many sets a pod's GPUs are grown greedily from each free GPU instead of
# searched exhaustively (C(16, 8) = 12,870 sets of 28 pairs each would cost a pod 0.1 s).
MAX_SEARCHED_SETS = 500

NOT_SELECTED = "node(s) didn't match the line's node selector"
NO_GPUS = "node(s) had no GPUs (no inventory published, no nvidia.com/gpu capacity)"
SPELLED_ELSEWISE = "node(s) had GPUs held under UUIDs and no inventory to tell which ordinals those are"


@dataclass(frozen=True, slots=True)
class GpuTable:
    """What a count line may take of a node: its whole GPUs as (ordinal, ledger key), and how
    close each pair is. Shared by every node with the same inventory (or capacity)."""

    gpus: tuple[tuple[int, str], ...]  # (ordinal, key) as the ledger keys a node with an inventory
    by_ordinal: tuple[tuple[int, str], ...]  # ... and one without (or before it knows the inventory)
    closeness: Mapping[frozenset[int], int]
    best_link: int  # the closest any two of its GPUs are: the best a set of several can have
    # The keys of `gpus` and of `by_ordinal` as sets: how many a node's pods hold is one
    # intersection.
    keys: frozenset[str] = frozenset()
    ordinal_keys: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "keys", frozenset(key for _, key in self.gpus))
        object.__setattr__(self, "ordinal_keys", frozenset(key for _, key in self.by_ordinal))

    @property
    def total(self) -> int:
        return len(self.gpus)


def _inventory_table(inventory: Inventory) -> GpuTable | None:
    whole = sorted((g for g in inventory.gpus if not g.mig_enabled), key=lambda g: g.index)
    if not whole:
        return None
    closeness = {frozenset((link.a, link.b)): CLOSENESS.get(link.common_ancestor, 0) for link in inventory.links}
    # Keyed as the ledger holds a GPU of a node that publishes its inventory (GpuLedger._key).
    ordinals = tuple((g.index, str(g.index)) for g in whole)
    by_uuid = tuple((g.index, g.uuid.lower()) for g in whole)
    return GpuTable(by_uuid, ordinals, closeness, max(closeness.values(), default=0))


@functools.lru_cache(maxsize=64)
def _capacity_table(count: int) -> GpuTable:
    ordinals = tuple((i, str(i)) for i in range(count))
    return GpuTable(ordinals, ordinals, {}, 0)


# node name -> (the inventory its table was made from, the table): hashing an inventory to look
# it up would read all of it, so a node's own entry is kept while its inventory is the same
# object (a node event that changes it makes a new one). At most one entry per node.
_tables: dict[str, tuple[Inventory, GpuTable | None]] = {}


def forget_table(name: str) -> None:
    """The node is gone: its table goes too (nodes come and go under an autoscaler)."""
    _tables.pop(name, None)


def gpu_table(node: NodeInfo) -> GpuTable | None:
    """The GPUs of the node a count line may take, None for a node without GPUs: the whole
    GPUs of its published inventory, else ordinals 0..n-1 of its nvidia.com/gpu capacity."""
    inventory = node.inventory
    if inventory is not None:
        cached = _tables.get(node.name)
        if cached is None or cached[0] is not inventory:
            cached = _tables[node.name] = (inventory, _inventory_table(inventory))
        return cached[1]
    if node.gpus_advertised and node.gpus > 0:
        return _capacity_table(node.gpus)
    return None


def free_gpus(node: NodeInfo, ledger: GpuLedger) -> int:
    """How many of the node's GPUs a count line could take that no pod holds."""
    table = gpu_table(node)
    if table is None:
        return 0
    held = ledger.held_keys(node.name)
    return sum(1 for _, key in _keyed(table, node, ledger) if key not in held)


def ordinal_of(node: NodeInfo | None, key: str, ledger: GpuLedger) -> str | None:
    """The ordinal of the node's GPU the ledger holds under `key`, or None."""
    table = gpu_table(node) if node is not None else None
    if table is None:
        return None
    return next((str(ordinal) for ordinal, held in _keyed(table, node, ledger) if held == key), None)


def held_count(table: GpuTable, node: NodeInfo, ledger: GpuLedger) -> int:
    """How many of the table's GPUs pods hold on the node (one set intersection)."""
    held = ledger.held_keys(node.name)
    if not held:
        return 0
    return len((table.keys if ledger.inventory(node.name) is not None else table.ordinal_keys) & held)


def _keyed(table: GpuTable, node: NodeInfo, ledger: GpuLedger) -> tuple[tuple[int, str], ...]:
    """The table's GPUs with the keys the ledger holds them under on this node."""
    return table.gpus if ledger.inventory(node.name) is not None else table.by_ordinal


@dataclass(slots=True)
class Candidate:
    """A node with enough free GPUs. The set it would give the pod is chosen when first asked:
    choose() asks only of the nodes its order reaches."""

    node: NodeInfo
    table: GpuTable
    free: tuple[int, ...]  # free ordinals
    busy: frozenset[int]  # ordinals other pods hold
    count: int
    _chosen: tuple[tuple[int, ...], int] | None = None

    @property
    def in_use(self) -> bool:
        return bool(self.busy)

    @property
    def packing(self) -> tuple:
        """Nodes in use before untouched ones, then the fewest free GPUs left, then the name."""
        return (not self.in_use, len(self.free) - self.count, self.node.name)

    def chosen(self) -> tuple[tuple[int, ...], int]:
        if self._chosen is None:
            self._chosen = best_set(list(self.free), self.count, self.table.closeness, set(self.busy))
        return self._chosen

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(str(d) for d in self.chosen()[0])

    @property
    def quality(self) -> int:
        """The weakest link within the set (map_plan's closeness); 0 for one GPU."""
        return self.chosen()[1]

    @property
    def rank(self) -> tuple:
        return (-self.quality, *self.packing)

    def entry(self, request: GpuRequest) -> MapEntry:
        """The line this choice stands for: what the Binding writes, as for a pinned line."""
        return MapEntry(request.index, self.node.name, self.devices, request.line)  # type: ignore[arg-type]

    def explain(self, request: GpuRequest) -> str:
        """Why this node and these GPUs, for the pod's Scheduled Event."""
        said = [f"chosen for line {request.line} ({request.describe()})"]
        if self.count > 1:
            said.append(_link_words(self.quality))
        total = self.table.total
        if self.in_use:
            said.append(
                f"{self.node.name} was already in use ({len(self.free)} of {total} GPUs free), which keeps "
                "untouched nodes whole for larger pods"
            )
        else:
            said.append(f"{self.node.name} had all {total} GPUs free and no node in use had room")
        return "; ".join(said)


def _link_words(quality: int) -> str:
    names = {v: k for k, v in CLOSENESS.items()}
    level = names.get(quality)
    if level == NVLINK:
        return "the GPUs are joined by NVLink"
    if level is None or quality == 0:
        return "no link between the GPUs is known to be better than across the system"
    return f"the GPUs' closest common ancestor is {level} (NVML's topology level): no NVLink set was free"


def candidate(
    request: GpuRequest,
    node: NodeInfo,
    uid: str,
    ledger: GpuLedger,
    kept: Mapping[tuple[str, str], str],
) -> Candidate | str:
    """The node's candidate for the pod, or the reason (a FailedScheduling phrase) it has none.
    `kept`: (node, ledger key) -> who it is kept for (a waiting gang, a pinned pending pod)."""
    if request.selector and not request.admits(node.labels):
        return NOT_SELECTED
    table = gpu_table(node)
    if table is None:
        return NO_GPUS
    held = ledger.held_keys(node.name)
    if not held and not kept:  # most nodes of a large cluster: all free, or full
        if table.total < request.count:
            return f"node(s) had fewer than {request.count} free GPUs"
        return Candidate(node, table, tuple(ordinal for ordinal, _ in table.gpus), frozenset(), request.count)
    if held and node.inventory is None and ledger.spelling_conflicts(uid, node.name, ("0",)):
        return SPELLED_ELSEWISE
    if len(held) >= table.total and not kept and table.total - held_count(table, node, ledger) < request.count:
        return f"node(s) had fewer than {request.count} free GPUs"
    gpus = _keyed(table, node, ledger)
    busy = frozenset(ordinal for ordinal, key in gpus if key in held)
    free = tuple(ordinal for ordinal, key in gpus if key not in held and (not kept or (node.name, key) not in kept))
    if len(free) < request.count:
        return f"node(s) had fewer than {request.count} free GPUs"
    return Candidate(node, table, free, busy, request.count)


def best_set(
    free: list[int], count: int, closeness: Mapping[frozenset[int], int], busy: set[int] = frozenset()
) -> tuple[tuple[int, ...], int]:
    """The `count` GPUs of `free` that are best connected (their weakest link, then the sum of
    their links), ties to the set that breaks the fewest free NVLink links of the others, then
    to the lowest ordinals; and the set's weakest link."""
    if not closeness:
        return tuple(sorted(free)[:count]), 0  # nothing is known of links: the lowest ordinals
    nvlinked = {pair for pair, level in closeness.items() if level == CLOSENESS[NVLINK]}

    def links_broken(group: tuple[int, ...]) -> int:
        inside = set(group)
        return sum(1 for pair in nvlinked if len(pair & inside) == 1 and not (pair - inside) & busy)

    def score(group: tuple[int, ...]) -> tuple:
        pairs = [closeness.get(frozenset(p), 0) for p in itertools.combinations(group, 2)]
        weakest, total = (min(pairs), sum(pairs)) if pairs else (0, 0)
        return (weakest, total, -links_broken(group), tuple(-g for g in group))

    groups: Iterable[tuple[int, ...]]
    if math.comb(len(free), count) <= MAX_SEARCHED_SETS:
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


def in_rank_order(packed: Callable[[], Iterator[Candidate]], count: int, top: int | None = None) -> Iterator[Candidate]:
    """The candidates in rank order (best connected set, then packing), from `packed()`, which
    yields them in packing order, anew at each call. A node's set is chosen only when the order
    reaches it: once for each quality a set can have, from the best down, skipping qualities
    no node's links allow once one pass has seen them all. One GPU has no links: packing order
    alone, in one pass. `top`: the best link any node has, when known (scheduling.free_index)."""
    if count == 1:
        yield from packed()
        return
    qualities: dict[str, int] = {}  # node -> its set's quality, once chosen
    best_link = top  # the best any candidate's links allow: known, or once a pass saw them all
    for level in sorted({0, *CLOSENESS.values()}, reverse=True):
        if best_link is not None and level > best_link:
            continue
        seen_best = 0
        for found in packed():
            seen_best = max(seen_best, found.table.best_link)
            if found.table.best_link < level:
                continue
            quality = qualities.get(found.node.name)
            if quality is None:
                quality = qualities[found.node.name] = found.quality
            if quality == level:
                yield found
        best_link = seen_best


@dataclass(frozen=True, slots=True)
class Choice:
    entry: MapEntry
    why: str


def choose(
    request: GpuRequest,
    nodes: Callable[[], Iterable[NodeInfo]],
    uid: str,
    ledger: GpuLedger,
    kept: Mapping[tuple[str, str], str],
    passes: Callable[[NodeInfo, tuple[str, ...]], str | None],
    packed: Callable[[], Iterable[NodeInfo]] | None = None,
    top: int | None = None,
) -> Choice | dict[str, int]:
    """The choice for the pod, or why there is none (phrase -> how many nodes). `nodes()`: the
    nodes it may go to; `packed()`, when given, the same nodes with at least request.count free
    GPUs in packing order (scheduling.free_index), so that only the nodes the order reaches are
    looked at, and `top` the best link any of its nodes has. `passes(node, devices)` runs
    kube-scheduler's filters and returns the first failing one's reason, or None."""
    refused: dict[str, int] = {}
    if packed is not None:

        def in_order() -> Iterator[Candidate]:
            for node in packed():
                found = candidate(request, node, uid, ledger, kept)
                if not isinstance(found, str):
                    yield found

    else:
        fitting = [c for n in nodes() if not isinstance(c := candidate(request, n, uid, ledger, kept), str)]
        fitting.sort(key=lambda c: c.packing)

        def in_order() -> Iterator[Candidate]:
            yield from fitting

    for found in in_rank_order(in_order, request.count, top if packed is not None else None):
        failure = passes(found.node, found.devices)
        if failure is None:
            return Choice(found.entry(request), found.explain(request))
        refused[failure] = refused.get(failure, 0) + 1
    # Nothing took it: every node is looked at once, to say why (the rare path).
    reasons = dict(refused)
    for node in nodes():
        found = candidate(request, node, uid, ledger, kept)
        if isinstance(found, str):
            reasons[found] = reasons.get(found, 0) + 1
    return reasons


def no_fit_message(request: GpuRequest, reasons: Mapping[str, int], total: int) -> str:
    """kube-scheduler's form: `0/4 nodes are available for line 2 (2 GPUs on any node): ...`."""
    said = ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items(), key=lambda r: (-r[1], r[0])))
    return f"0/{total} nodes are available for line {request.line} ({request.describe()}): {said or 'no nodes'}."
