"""Gangs: the pods of one distributed job, bound all or none (docs/gangs.md).

A gang (placement.gang) is decided as one: every index its map names must have a pod,
pending or bound, and every pending one must pass its decision (filters, GPU ledger,
--gpu-sharing) with the others assumed beside it; then all of them are bound, else none.
Ranks that started alone would hold their GPUs and wait forever for the rest, and two
such jobs could each hold half of what the other needs.

Under --gpu-sharing=deny, the free GPUs a waiting gang needs are reserved for it, so that
a stream of small pods cannot take them one by one as they free up. Gangs are served in a
fixed order: a gang partly bound (a binding failed, the scheduler died mid-gang) first,
then by the creation of its oldest pending pod, then by name; a GPU goes to the first gang
in that order that needs it. A gang whose newest pod is older than the timeout, and none
of whose pods is bound, reserves nothing (it is still bound if all its GPUs come free).

Everything here is computed from the pods the scheduler lists (their annotations, labels,
owners, creation times) and the cache: nothing is stored that a new leader would miss.
Pure and single-threaded, like the cache it reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..placement import InvalidMapError, MissingMapError, SchedulingMap, map_text, parse_map, pod_index, pod_key
from ..placement.errors import PlacementError
from ..placement.gang import GangError, created_at, gang_of
from .cache import AssignedPod, ClusterCache
from .dynamic import Candidate, candidate, ordinal_of
from .nodes import NodeIndex, NodeResolutionError

# How long a gang waits with its GPUs reserved (the scheduler's --gang-timeout-seconds).
GANG_TIMEOUT_SECONDS = 300.0
# A message lists this many indexes or GPUs at most; an Event keeps 1 KiB.
MAX_LISTED = 8
GANG_WAITING = "GangWaiting"
GANG_PARTIAL = "GangPartial"
GANG_TIMEOUT = "GangTimeout"


def listed(items: Iterable[object]) -> str:
    items = [str(i) for i in items]
    more = f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more


@dataclass(frozen=True, slots=True)
class Member:
    """A pending pod of a gang."""

    uid: str
    pod: dict
    index: int | None  # None: the pod has no readable index (its own decision says why)
    created: float  # creationTimestamp, Unix time

    @property
    def key(self) -> str:
        return pod_key(self.pod)


def member(uid: str, pod: dict) -> Member:
    try:
        index: int | None = pod_index(pod)
    except PlacementError:
        index = None
    return Member(uid, pod, index, created_at(pod))


@dataclass(frozen=True, slots=True)
class GangView:
    """One gang as the scheduler sees it now: its pending pods and its pods on nodes."""

    key: str
    pending: tuple[Member, ...]
    placed: tuple[AssignedPod, ...]

    @property
    def partial(self) -> bool:
        """Some of its pods are bound (or being bound) and some are not."""
        return bool(self.placed) and bool(self.pending)

    @property
    def oldest(self) -> float:
        return min((m.created for m in self.pending), default=0.0)

    @property
    def newest(self) -> float:
        return max((m.created for m in self.pending), default=0.0)

    def order(self) -> tuple:
        """Gangs are served in this order: partly bound first, then oldest first."""
        return (0 if self.placed else 1, self.oldest, self.key)

    def timed_out(self, now: float, timeout: float) -> bool:
        """Waited longer than the timeout since its newest pod was created. A gang partly
        bound never times out: releasing what its unbound pods need would leave the bound
        ones waiting forever."""
        return not self.placed and self.pending != () and now - self.newest > timeout

    def scheduling_map(self) -> SchedulingMap | str:
        """The gang's map (its pending pods must all carry the same one), or why there is none."""
        texts = set()
        for m in self.pending:
            try:
                texts.add(map_text(m.pod))
            except MissingMapError as err:
                return str(err)
        if len(texts) != 1:
            return (
                f"the pending pods of gang {self.key} carry {len(texts)} different maps (a rollout of its "
                "workload?): its pods must agree on one map"
            )
        try:
            return parse_map(texts.pop())
        except InvalidMapError as err:
            return str(err)

    def by_index(self) -> dict[int, Member]:
        """One pending pod per index, the oldest where two claim one (bare pods may)."""
        chosen: dict[int, Member] = {}
        for m in sorted(self.pending, key=lambda m: (m.created, m.key)):
            if m.index is not None and m.index not in self.placed_indexes():
                chosen.setdefault(m.index, m)
        return chosen

    def placed_indexes(self) -> set[int]:
        return {p.index for p in self.placed if p.index is not None}

    def missing(self, scheduling_map: SchedulingMap) -> list[int]:
        """Indexes the map names (pinned lines and count lines) that no pod has, pending or bound."""
        have = self.placed_indexes() | {m.index for m in self.pending if m.index is not None}
        return sorted(i for i in map_indexes(scheduling_map) if i not in have)


def map_indexes(scheduling_map: SchedulingMap) -> list[int]:
    """Every index a gang's map gives a line: its members."""
    return [*scheduling_map, *(i for i in scheduling_map.requests if i is not None)]


def reservations(
    gangs: Iterable[GangView], cache: ClusterCache, now: float, timeout: float
) -> dict[tuple[str, str], str]:
    """(node, GPU key) -> the gang it is reserved for: every GPU a waiting gang's unbound
    indexes name that no live pod holds, to the first gang in order that needs it."""
    reserved: dict[tuple[str, str], str] = {}
    for gang in sorted(gangs, key=GangView.order):
        if gang.timed_out(now, timeout):
            continue
        scheduling_map = gang.scheduling_map()
        if isinstance(scheduling_map, str):
            continue
        placed = gang.placed_indexes()
        _reserve_counts(gang.key, scheduling_map, placed, cache, reserved)
        for index, entry in scheduling_map.items():
            if index in placed:
                continue
            try:
                node = cache.nodes.resolve(entry.node).name
            except NodeResolutionError:
                continue
            for device in entry.devices:
                where = (node, cache.ledger.key(node, device))
                if where in reserved or cache.ledger.conflicts("", node, (device,)):
                    continue  # another gang's first, or held: a live pod's until it ends
                reserved[where] = gang.key
    return reserved


def _reserve_counts(
    gang: str, scheduling_map: SchedulingMap, placed: set[int], cache: ClusterCache, reserved: dict
) -> None:
    """The free GPUs the gang's unplaced count lines would be given now (scheduling.dynamic's
    choice, without the filters), one line after the other, reserved for it: as GPUs free up
    they go to the gang first, until it fits whole."""
    for index, request in sorted((i, r) for i, r in scheduling_map.requests.items() if i is not None):
        if index in placed:
            continue
        found = [
            c
            for n in cache.nodes.all()
            if isinstance(c := candidate(request, n, "", cache.ledger, reserved), Candidate)
        ]
        if not found:
            continue
        best = min(found, key=lambda c: c.rank)
        for device in best.devices:
            reserved[(best.node.name, cache.ledger.key(best.node.name, device))] = gang


def reserved_for_others(
    reserved: Mapping[tuple[str, str], str], cache: ClusterCache, node: str, devices: Iterable[str], gang: str | None
) -> list[tuple[str, str]]:
    """(device, gang) for each of these devices reserved for a gang other than `gang`."""
    found = []
    for device in devices:
        owner = reserved.get((node, cache.ledger.key(node, device)))
        if owner is not None and owner != gang:
            found.append((device, owner))
    return found


class PendingGangs:
    """The pending pods of each gang, kept beside the scheduling queue (by UID) so that a
    decision finds a gang's pods without reading every pending pod."""

    def __init__(self) -> None:
        self._members: dict[str, dict[str, Member]] = {}  # gang -> uid -> member
        self._gang_of: dict[str, str] = {}  # uid -> gang

    def upsert_pod(self, uid: str, pod: dict | None) -> None:
        """A pending pod was added or changed: kept under the gang it asks for, if any. A pod
        whose gang cannot be told is in none (its own decision says why)."""
        try:
            gang = gang_of(pod) if pod is not None else None
        except GangError:
            gang = None
        self.upsert(uid, pod or {}, gang)

    def upsert(self, uid: str, pod: dict, gang: str | None) -> None:
        """A pending pod was added or changed (gang None: not, or no longer, in a gang). A pod
        being deleted counts as gone: its replacement is the member to wait for."""
        self.delete(uid)
        if gang is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
            return
        self._members.setdefault(gang, {})[uid] = member(uid, pod)
        self._gang_of[uid] = gang

    def delete(self, uid: str) -> None:
        gang = self._gang_of.pop(uid, None)
        if gang is None:
            return
        members = self._members[gang]
        members.pop(uid, None)
        if not members:
            del self._members[gang]

    def gangs(self) -> list[str]:
        return list(self._members)

    def pending(self, gang: str) -> tuple[Member, ...]:
        return tuple(self._members.get(gang, {}).values())

    def __len__(self) -> int:
        return len(self._members)

    def __contains__(self, uid: str) -> bool:
        return uid in self._gang_of


@dataclass(frozen=True, slots=True)
class GangPlan:
    """A gang that can go: every pending pod decided and assumed, to be bound now. The pod the
    worker took comes first; the others were taken off the queue (claimed) with it."""

    gang: str
    members: tuple[tuple[str, dict, object], ...]  # (uid, pod, Decision)
    complete: bool  # binding these completes the gang (nothing else pending or missing)
    newest: float  # creation of its newest pending pod: time to complete is measured from it


# -- what the scheduler and `gpu-scheduler gpus` both read of the gangs -----------------------------


def gang_view(gang: str, pending: PendingGangs, cache: ClusterCache) -> GangView:
    return GangView(gang, pending.pending(gang), tuple(cache.gang_pods(gang)))


def gang_views(pending: PendingGangs, cache: ClusterCache) -> list[GangView]:
    return [gang_view(gang, pending, cache) for gang in pending.gangs()]


def gang_counts(views: Iterable[GangView], now: float, timeout: float) -> dict[str, int]:
    """Gangs with pending pods by state: waiting, partial (some pods bound), timed-out."""
    counts = {"waiting": 0, "partial": 0, "timed-out": 0}
    for view in views:
        state = "partial" if view.placed else "timed-out" if view.timed_out(now, timeout) else "waiting"
        counts[state] += 1
    return counts


def reserved_devices(
    views: Iterable[GangView], cache: ClusterCache, reserved: Mapping[tuple[str, str], str]
) -> dict[str, dict[str, str]]:
    """node -> device, as the gang's map writes it -> the gang: `reserved` (ledger keys) read
    back through the maps of the gangs that hold them; for a gang of count lines, by the
    ordinal the scheduler would write."""
    found: dict[str, dict[str, str]] = {}
    for view in views:
        scheduling_map = view.scheduling_map()
        if isinstance(scheduling_map, str):
            continue
        if scheduling_map.requests:
            for (node, key), gang in reserved.items():
                ordinal = ordinal_of(cache.nodes.get(node), key, cache.ledger) if gang == view.key else None
                if ordinal is not None:
                    found.setdefault(node, {})[ordinal] = gang
        for entry in scheduling_map.values():
            try:
                node = cache.nodes.resolve(entry.node).name
            except NodeResolutionError:
                continue
            for device in entry.devices:
                if reserved.get((node, cache.ledger.key(node, device))) == view.key:
                    found.setdefault(node, {})[device] = view.key
    return found


def map_nodes(scheduling_map: SchedulingMap, nodes: NodeIndex) -> tuple[str, ...]:
    """Every node a gang's map names, as written and as resolved: a change to any of them may
    be what lets the whole gang on."""
    names: dict[str, None] = {}
    for entry in scheduling_map.values():
        names[entry.node] = None
        try:
            names[nodes.resolve(entry.node).name] = None
        except NodeResolutionError:
            pass
    return tuple(names)


def waiting(view: GangView, why: str, now: float, timeout: float) -> tuple[str, str]:
    """(Event reason, message) of a pod held back on behalf of its gang."""
    bound = ""
    event = GANG_WAITING
    if view.placed:
        event = GANG_PARTIAL
        bound = (
            f" is partly bound (index {listed(sorted(view.placed_indexes()))} bound: they stay bound, "
            "and the GPUs of the rest stay reserved for it until they are bound too) and"
        )
    message = f"gang {view.key}{bound} {why}; none of its waiting pods is bound until all of them can be"
    if view.timed_out(now, timeout):
        event = GANG_TIMEOUT
        message += (
            f"; it has waited more than {timeout:g} s since its newest pod was created, so the GPUs "
            "it needs are no longer reserved for it (a change to its pods starts the clock again)"
        )
    return event, message
