"""Everything a scheduler process believes, every way it changes, and the lock that guards it.

SchedulerState owns the queue of pending pods (queue.SchedulingQueue), the cluster cache of
nodes, pods on nodes, GPUs, claims, volumes and StorageClasses (scheduling.ClusterCache) and
the pending pods of each gang (scheduling.gangs.PendingGangs). Nothing outside this class holds them: every thread (the
watches, the bind workers, the metrics scrape) calls the named methods below, each of which
takes the state's one lock, and makes its API calls outside it. Reading this file tells every
way a pod is queued, decided, a GPU held or freed. The methods come in four groups:

  events     what the watches saw: a pod changed, was deleted, the pods were listed; a node
             changed, was deleted, the nodes were listed; the same of claims, volumes and
             StorageClasses
  work       a bind worker takes the next due pod (blocking) and says when its attempt ended;
             a stop waits for the attempts in flight to end
  decisions  the scheduling cycle: one pod decided, or its whole gang, and on success assumed
  outcomes   what became of an attempt: bound, refused, binding failed or in doubt, pod gone,
             leadership lost, the attempt raised

An event that makes pods due wakes one worker (notify, not notify_all: with 32 workers, waking
them all for every watch event cost more CPU than the binding itself); a worker that takes a
pod and sees more due wakes the next. Apart from the lock and the blocking take(), everything
is a function of the calls made and the `now` passed in, so tests drive it directly
(tests/test_scheduler_state.py runs it as a hypothesis state machine). Pods are keyed by UID.

A refused pod waits on names (queue.retry_later): its node's name and alias, the nodes of its
gang's map, and for VolumeBinding the keys of its claims and their StorageClasses
(scheduling.volumes.claim_wait_key), and for PodTopologySpread and InterPodAffinity the key
PODS_ON_NODES. A change to a node wakes the pods waiting on its name or alias; a change to a
claim wakes those waiting on it, a change to a volume those waiting on the claims that name it
(and, for a volume offered to claims or no longer, those waiting on its class), a change to a
StorageClass those waiting on it. A pod that comes to a node, leaves it or is
relabelled there, and a node that comes, goes or is relabelled, wake those waiting on
PODS_ON_NODES: the simplest rule that cannot miss a change of a topology domain, and free
while no pod waits on it. For VolumeRestrictions a pod waits on its ReadWriteOncePod claims
that another pod uses, and is woken when the last such pod leaves the cache; for
NodeVolumeLimits on its node, woken by a pod leaving it or a change of its CSINode.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TypeVar

from gpu_scheduler.kube.objects import WatchedPod, claim_keys, pod_uid
from gpu_scheduler.placement import (
    MapEntry,
    PlacementError,
    pinned_placement_for,
    placement_for,
    pod_key,
)
from gpu_scheduler.placement.gang import GangError, gang_of, gang_topology
from gpu_scheduler.scheduling import (
    ANY_NODE_CHANGE,
    AssignedPod,
    Claim,
    ClusterCache,
    Code,
    Decision,
    NodeInfo,
    SharingPolicy,
    Volume,
    decide,
)
from gpu_scheduler.scheduling.decide import FAILOVER_AFTER_SECONDS, Failover
from gpu_scheduler.scheduling.dynamic import free_gpus
from gpu_scheduler.scheduling.filters import PODS_ON_NODES
from gpu_scheduler.scheduling.gangs import (
    GANG_TIMEOUT_SECONDS,
    GangPlan,
    GangView,
    Member,
    PendingGangs,
    gang_counts,
    gang_view,
    gang_views,
    listed,
    map_indexes,
    map_nodes,
    reservations,
    waiting,
)
from gpu_scheduler.scheduling.provisioning import (
    VOLUME_BINDING_TIMEOUT_SECONDS,
    WAITING_FOR_VOLUMES,
    BindVolume,
    SelectNode,
    timed_out_message,
)
from gpu_scheduler.scheduling.selectors import pod_terms, required_terms
from gpu_scheduler.scheduling.volume_limits import CSINode
from gpu_scheduler.scheduling.volumes import StorageClass

from .queue import IN_FLIGHT, INITIAL_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, SchedulingQueue

FAILED_SCHEDULING = "FailedScheduling"

_Result = TypeVar("_Result")


def _locked(method: Callable[..., _Result]) -> Callable[..., _Result]:
    """The method runs under the state's lock."""

    @functools.wraps(method)
    def run(self: SchedulerState, *args, **kwargs) -> _Result:
        with self._lock:
            return method(self, *args, **kwargs)

    return run


def _event(method: Callable[..., bool]) -> Callable[..., bool]:
    """An event: runs under the lock, and wakes one worker when it made pods due. An event made
    of others (a pod seen on a node leaves the queue and takes its hold) wakes one worker once."""

    @functools.wraps(method)
    def run(self: SchedulerState, *args, **kwargs) -> bool:
        with self._lock:
            self._depth += 1
            try:
                woke = method(self, *args, **kwargs)
            finally:
                self._depth -= 1
            if woke and not self._depth:
                self._work.notify()
            return woke

    return run


class SchedulerState:
    def __init__(
        self,
        alias_label: str,
        policy: SharingPolicy,
        initial_backoff: float = INITIAL_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        gang_timeout: float = GANG_TIMEOUT_SECONDS,
        volume_timeout: float = VOLUME_BINDING_TIMEOUT_SECONDS,
        failover_after: float = FAILOVER_AFTER_SECONDS,
    ) -> None:
        self.policy = policy
        self.failover_after = failover_after
        self.gang_timeout = gang_timeout
        self.volume_timeout = volume_timeout
        # uid -> when (Unix time) the pod began waiting for its claims' volumes, or last said
        # it timed out: only in memory, so a restart starts the clock again
        self._volume_waits: dict[str, float] = {}
        self._cache = ClusterCache(alias_label)
        self._queue = SchedulingQueue(initial_backoff, max_backoff)
        self._gangs = PendingGangs()  # the pending pods of each gang, beside the queue
        # uid -> the pinned line of each pending pod that has one: the GPUs count lines leave
        # alone (_pinned_wants). Kept beside the queue, like _gangs.
        self._pinned: dict[str, MapEntry] = {}
        # Reentrant, so that one named method may call another; the workers wait on _work for
        # due pods, a stop waits on _idle for the attempts in flight to end.
        self._lock = threading.RLock()
        self._work = threading.Condition(self._lock)
        self._idle = threading.Condition(self._lock)
        self._attempts = 0  # taken by a worker and not yet ended
        self._depth = 0  # events in progress, one inside another

    # == events: the pod watch (every pod not finished, of every scheduler) ==========================
    # Each returns whether pods became due (and then one worker is woken).

    @_event
    def pod_changed(self, pod: WatchedPod) -> bool:
        """An ADDED or MODIFIED event. A pod on a node has left the pending set (bound, by us or
        by anyone) and holds what it takes there; a pending pod of ours is queued; any other
        pod (pending for another scheduler, or out of our namespace) is none of our business."""
        if pod.assigned is not None:
            self.pending_delete(pod.uid)
            return self.assigned_upsert(pod.assigned)
        if pod.pending is not None:
            return self.pending_upsert(pod.pending)
        return False

    @_event
    def pod_deleted(self, pod: WatchedPod) -> bool:
        """A DELETED event: the pod was deleted, or finished (it left the selector). It leaves the
        queue; what it held on a node is freed. A pod deleted with no node frees nothing: a hold
        assumed for it waits for its binding's answer or a list (see pending_delete)."""
        self.pending_delete(pod.uid)
        return self.assigned_delete(pod.assigned) if pod.assigned is not None else False

    @_locked
    def pods_listed(self, pods: Iterable[WatchedPod], listed_at: float) -> tuple[bool, list[str]]:
        """A list of the pod watch, started at listed_at (monotonic). The pods on nodes replace
        the cache's first, then the pending pods the queue's, so that a listed pending pod the
        cache now holds as bound is left out. Every worker is woken. Returns whether pods became
        due, and the keys of the pending pods it dropped (their Event series are forgotten)."""
        pods = list(pods)
        woke = self.assigned_replace([p.assigned for p in pods if p.assigned is not None], listed_at)
        dropped = self.pending_replace([p.pending for p in pods if p.pending is not None])
        self._work.notify_all()
        return woke, dropped

    # The parts of those events, each on its own. Pending pods touch only the queue, never the
    # cache: a pod leaves the pending set when it is bound as well as when it is deleted, and a
    # pending pod's DELETED says the same for both (see scheduling/cache.py). Only a pod seen on
    # a node, a binding's answer or a list can free what a pod holds.

    @_locked
    def pending_replace(self, pods: Iterable[dict]) -> list[str]:
        """A list of the pending pods. Returns the keys of the pods it dropped (their Event series
        are forgotten). A listed pod that the cache holds is left out (see pending_upsert)."""
        dropped = self._queue.replace({uid: p for p in pods if not self._placed(uid := pod_uid(p))})
        for pod in dropped:
            self._gangs.delete(pod_uid(pod))
            self._volume_waits.pop(pod_uid(pod), None)
        self._pinned.clear()
        for uid in self._queue.keys():
            self._gangs.upsert_pod(uid, self._queue.pod_of(uid))
            self._note_pinned(uid, self._queue.pod_of(uid))
        return [pod_key(p) for p in dropped]

    @_event
    def pending_upsert(self, pod: dict) -> bool:
        """A pending pod was added or changed. Ignored when the cache holds the pod: it was
        bound (by us, or seen on a node), and this event is older than that (our own condition
        write delivered late, a list taken before the binding): queueing it would decide and
        bind it a second time."""
        uid = pod_uid(pod)
        if self._placed(uid):
            return False
        self._gangs.upsert_pod(uid, pod)
        self._note_pinned(uid, pod)
        return self._queue.upsert(uid, pod)

    @_locked
    def pending_delete(self, uid: str) -> bool:
        """The pod left the pending set: bound, or deleted. It leaves the queue (and its gang's
        pending pods: bound, the cache has it; deleted, its gang waits for its replacement)."""
        self._queue.delete(uid)
        self._gangs.delete(uid)
        self._pinned.pop(uid, None)
        self._volume_waits.pop(uid, None)
        return False

    @_event
    def assigned_replace(self, pods: Iterable[AssignedPod], listed_at: float) -> bool:
        before = self._cache.uids()
        freed = self._cache.replace_pods(pods, listed_at)
        after = self._cache.uids()
        # Pods that came or went (or changed) here may let on a pod that PodTopologySpread or
        # InterPodAffinity refused.
        moved = (PODS_ON_NODES,) if freed or before != after else ()
        # A pod whose assumed hold expired here is not woken by its own hold leaving: it waits
        # out its backoff (else a failed binding, the list it asks for and the retry would spin).
        return self._wake(*freed, *moved, sparing=before - after)

    @_event
    def assigned_upsert(self, pod: AssignedPod) -> bool:
        before = self._cache.pod(pod.uid)
        moved = (PODS_ON_NODES,) if _topology_changed(before, pod) else ()
        return self._wake(self._cache.add_pod(pod), *moved)

    @_event
    def assigned_delete(self, pod: AssignedPod) -> bool:
        node = self._cache.remove_pod(pod.uid)
        return self._wake(node, PODS_ON_NODES if node is not None else None)

    # == events: the node watch =====================================================================

    @_event
    def nodes_listed(self, nodes: Iterable[NodeInfo]) -> bool:
        nodes = list(nodes)
        names = {n.name for n in nodes}
        woke = False
        for name in self._cache.nodes.names():
            if name not in names:
                woke = self.node_deleted(name) or woke
        for node in nodes:
            woke = self.node_changed(node) or woke
        return woke

    @_event
    def node_changed(self, node: NodeInfo) -> bool:
        """A node appeared or changed: pods waiting on it (by name or alias) are tried again at
        once, since any change to what the filters read may let them on."""
        before = self._cache.nodes.get(node.name)
        after = self._cache.upsert_node(node)
        if before == after:
            return False
        # A node that comes, or is relabelled, changes the topology domains (PODS_ON_NODES).
        relabelled = PODS_ON_NODES if before is None or before.labels != after.labels else None
        return self._wake(after.name, after.alias, before.alias if before else None, relabelled, ANY_NODE_CHANGE)

    @_event
    def node_deleted(self, name: str) -> bool:
        """A node went: its pods' topology domain goes with it, which may let on a pod that
        PodTopologySpread or InterPodAffinity refused."""
        gone = self._cache.delete_node(name)
        return self._wake(PODS_ON_NODES) if gone is not None else False

    # == events: the claim, volume and StorageClass watches ==========================================
    # The cache says which wait keys a change touches (scheduling.volumes.VolumeCache); the pods
    # waiting on them are tried again at once. Nothing is done per pod: a cluster whose pods use
    # no claims pays one dictionary update per event.

    @_event
    def claim_changed(self, claim: Claim) -> bool:
        return self._wake(*self._cache.volumes.upsert_claim(claim))

    @_event
    def claim_deleted(self, key: str) -> bool:
        return self._wake(*self._cache.volumes.delete_claim(key))

    @_event
    def claims_listed(self, claims: Iterable[Claim]) -> bool:
        return self._wake(*self._cache.volumes.replace_claims(claims))

    @_event
    def volume_changed(self, volume: Volume) -> bool:
        return self._wake(*self._cache.volumes.upsert_volume(volume))

    @_event
    def volume_deleted(self, name: str) -> bool:
        return self._wake(*self._cache.volumes.delete_volume(name))

    @_event
    def volumes_listed(self, volumes: Iterable[Volume]) -> bool:
        return self._wake(*self._cache.volumes.replace_volumes(volumes))

    @_event
    def storage_class_changed(self, cls: StorageClass) -> bool:
        return self._wake(*self._cache.volumes.upsert_class(cls))

    @_event
    def storage_class_deleted(self, name: str) -> bool:
        return self._wake(*self._cache.volumes.delete_class(name))

    @_event
    def storage_classes_listed(self, classes: Iterable[StorageClass]) -> bool:
        return self._wake(*self._cache.volumes.replace_classes(classes))

    # A CSINode change wakes the pods waiting on its node (NodeVolumeLimits).

    @_event
    def csi_node_changed(self, csi_node: CSINode) -> bool:
        if self._cache.csi_nodes.get(csi_node.name, CSINode(csi_node.name)) == csi_node:
            return False
        if csi_node.limits:
            self._cache.csi_nodes[csi_node.name] = csi_node
        else:
            self._cache.csi_nodes.pop(csi_node.name, None)  # no counts: nothing to keep
        return self._wake(csi_node.name)

    @_event
    def csi_node_deleted(self, name: str) -> bool:
        return self._wake(name) if self._cache.csi_nodes.pop(name, None) is not None else False

    @_event
    def csi_nodes_listed(self, csi_nodes: Iterable[CSINode]) -> bool:
        listed = {c.name: c for c in csi_nodes}
        woke = False
        for name in [n for n in self._cache.csi_nodes if n not in listed]:
            woke = self.csi_node_deleted(name) or woke
        for csi_node in listed.values():
            woke = self.csi_node_changed(csi_node) or woke
        return woke

    # == work: the bind workers =====================================================================

    @_locked
    def pop(self, now: float) -> tuple[str, dict] | None:
        """The next due pod, now in flight; None when none is due."""
        return self._queue.pop(now)

    @_locked
    def claim(self, uid: str) -> dict | None:
        """Takes this pod off the queue, in flight, whatever it waits for (as a gang's decision
        takes its other pods); None when it is not waiting."""
        return self._queue.claim(uid)

    def take(self, may_take: Callable[[], bool], stopping: Callable[[], bool], idle_poll: float):
        """Blocks until a pod is due and may_take() (this replica leads, the caches have
        synced); returns (uid, pod), in flight and counted as an attempt until attempt_ended().
        None once stopping(). While it may not take, it looks again every idle_poll seconds."""
        with self._lock:
            while not stopping():
                timeout: float | None = idle_poll
                if may_take():
                    now = time.monotonic()
                    item = self._queue.pop(now)
                    if item is not None:
                        self._attempts += 1
                        if self._queue.has_active():
                            self._work.notify()
                        return item
                    due = self._queue.next_due()
                    timeout = None if due is None else max(0.0, due - now)
                self._work.wait(timeout)
            return None

    @_locked
    def attempt_ended(self) -> None:
        """A worker's attempt is over (its outcome recorded). While pods wait in backoff, one
        waiting worker wakes to time the earliest (this attempt may have set it, and this
        worker may take another pod and be busy when it ends); otherwise nobody needs waking."""
        self._attempts -= 1
        if self._queue.next_due() is not None:
            self._work.notify()
        if not self._attempts:
            self._idle.notify_all()

    @_locked
    def wake_workers(self) -> None:
        """Every worker looks again whether it may take a pod (leadership or stopping changed)."""
        self._work.notify_all()

    @_locked
    def wait_idle(self, timeout: float) -> bool:
        """Waits up to timeout for the attempts in flight to end; True if none is left."""
        deadline = time.monotonic() + timeout
        while self._attempts and time.monotonic() < deadline:
            self._idle.wait(deadline - time.monotonic())
        return self._attempts == 0

    # == decisions: the scheduling cycle ===========================================================

    @_locked
    def decide(self, uid: str, pod: dict, wall: float = 0.0) -> Decision | GangPlan | None:
        """Decides for a pod taken off the queue; on success, assumes it (its requests and GPUs
        are held on the node from now on). A pod of a gang is decided with its whole gang: a
        GangPlan when all of it can go (every pending pod assumed and in flight), else the
        pod's refusal. None when the pod is being deleted (dropped until its DELETED event).
        `wall`: the Unix time now, which gang timeouts are reckoned in (pods' creation times)."""
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self._queue.give_up_until_changed(uid)
            return None
        try:
            gang = gang_of(pod)
        except GangError as err:
            return Decision(pod_key(pod), None, None, Code.UNRESOLVABLE, reason=str(err))
        if gang is not None:
            return self._decide_gang(uid, pod, gang, wall)
        failover = Failover(wall, self.failover_after)
        decision = decide(
            pod, self._cache, self.policy, self.reservations(wall), pinned=self._pinned_wants, failover=failover
        )
        if decision.bind:
            self._assume(uid, pod, decision)
        self._reserve_volumes(decision)
        return self._timed(uid, decision, wall)

    def _note_pinned(self, uid: str, pod: dict | None) -> None:
        try:
            entry = pinned_placement_for(pod) if pod is not None else None
        except PlacementError:
            entry = None
        if entry is None:
            self._pinned.pop(uid, None)
        else:
            self._pinned[uid] = entry

    def _pinned_wants(self) -> dict[tuple[str, str], str]:
        """(node, GPU key) -> the pending pod whose pinned line names it: what a line asking for
        a count leaves alone, since pinned pods keep priority over what they name. Computed at
        each such decision from the pending pinned pods' lines (none, where all ask for counts)."""
        wants: dict[tuple[str, str], str] = {}
        nodes, ledger = self._cache.nodes, self._cache.ledger
        for other, entry in self._pinned.items():
            try:
                node = nodes.resolve(entry.node).name
            except PlacementError:
                continue
            for device in entry.devices:
                wants.setdefault((node, ledger.key(node, device)), f"pod {other}")
        return wants

    def _timed(self, uid: str, decision: Decision, wall: float) -> Decision:
        """A pod waiting for its claims' volumes says so with a Normal Event at each attempt;
        once it has waited volume_timeout, a FailedScheduling Warning says it timed out, and
        the clock starts again (the wait goes on: the claims are the pod's, and bound they let
        it on)."""
        if decision.event != WAITING_FOR_VOLUMES:
            self._volume_waits.pop(uid, None)
            return decision
        since = self._volume_waits.setdefault(uid, wall)
        if wall - since < self.volume_timeout:
            return decision
        self._volume_waits[uid] = wall
        return replace(decision, event=FAILED_SCHEDULING, reason=timed_out_message(decision.reason or "", wall - since))

    def _decide_gang(self, uid: str, pod: dict, gang: str, wall: float) -> Decision | GangPlan:
        """Any pod of a gang stands for all of it: every pending pod of the gang is decided, each
        with the ones before it assumed (two ranks on one node must fit together), and either all
        are taken into flight to be bound (a GangPlan), or none is assumed and the pod taken
        waits, with an Event saying what the gang lacks. Each pod of the gang is retried on its
        own backoff and woken by a change on any node the gang's map names, so whichever comes
        first places the whole gang. A gang partly bound (a binding failed, the scheduler died
        mid-gang) is decided the same way over what is left (docs/gangs.md)."""
        view = self._gang_view(gang)
        scheduling_map = view.scheduling_map()
        if isinstance(scheduling_map, str):
            return self._gang_waits(view, pod, f"waits: {scheduling_map}", (), wall)
        if None in scheduling_map.requests:
            why = (
                "waits: a gang's map gives each index its own line, and a `*` line cannot say how many pods "
                "the gang has; write <index>=*:gpus=<count> for each"
            )
            return self._gang_waits(view, pod, why, (), wall)
        try:
            topology = gang_topology(pod) if scheduling_map.requests else None
        except GangError as err:
            return self._gang_waits(view, pod, f"waits: {err}", (), wall)
        nodes = map_nodes(scheduling_map, self._cache.nodes)
        if scheduling_map.requests:
            nodes = (*nodes, PODS_ON_NODES, ANY_NODE_CHANGE)
        missing = view.missing(scheduling_map)
        if missing:
            why = (
                f"waits for its pods of index {listed(missing)}: its map names {len(map_indexes(scheduling_map))} "
                f"({len(view.pending)} pending, {len(view.placed)} bound)"
            )
            return self._gang_waits(view, pod, why, nodes, wall)
        members = view.by_index()
        if uid not in {m.uid for m in members.values()}:
            why = f"waits: another of its pods has index {_index(pod)}, and each index takes one pod"
            return self._gang_waits(view, pod, why, nodes, wall)
        busy = [m for m in members.values() if m.uid != uid and self._queue.state_of(m.uid) == IN_FLIGHT]
        if busy:
            # Another worker is deciding or binding one of them; it goes again as soon as it is
            # done, so that the change that woke this attempt is not lost.
            for m in busy:
                self._queue.nudge(m.uid)
            why = f"waits: its pod {busy[0].key} is being tried by another worker"
            return self._gang_waits(view, pod, why, nodes, wall)

        reserved = self.reservations(wall)
        for domain in self._domains(topology):
            tried = self._decide_members(members, reserved, gang, topology, domain, wall)
            if not isinstance(tried, Decision):
                break
        if isinstance(tried, Decision):
            return self._gang_waits(view, pod, tried.reason or "", (*nodes, *tried.waiting_on), wall)
        decided, provisioning = tried
        if provisioning:
            for assumed_uid, _, _ in decided:
                self._cache.forget(assumed_uid)
            indexes = listed([index for index, _ in provisioning])
            why = f"waits for the volumes of its pods of index {indexes}: {provisioning[0][1].reason}"
            waits = tuple(key for _, d in provisioning for key in d.waiting_on)
            select = tuple(s for _, d in provisioning for s in d.provision)
            return replace(self._gang_waits(view, pod, why, (*nodes, *waits), wall), provision=select)
        for member_uid, _, _ in decided:
            if member_uid != uid:
                self._queue.claim(member_uid)
        decided.sort(key=lambda d: d[0] != uid)  # the pod the worker took first
        return GangPlan(gang, tuple(decided), complete=True, newest=view.newest)

    def _domains(self, topology: str | None) -> list[str | None]:
        """Where a gang of count lines is tried, in order: each value of its topology label,
        the domain with the fewest free GPUs first (the first that takes the whole gang is the
        tightest fit), then anywhere (None)."""
        if topology is None:
            return [None]
        free: dict[str, int] = {}
        for node in self._cache.nodes.all():
            value = node.labels.get(topology)
            if value is not None:
                free[value] = free.get(value, 0) + free_gpus(node, self._cache.ledger)
        return [*sorted(free, key=lambda value: (free[value], value)), None]

    def _decide_members(
        self,
        members: dict[int, Member],
        reserved: dict | None,
        gang: str,
        topology: str | None,
        domain: str | None,
        wall: float,
    ) -> tuple[list[tuple[str, dict, Decision]], list[tuple[int, Decision]]] | Decision:
        """Every member decided, each with the ones before it assumed: (those to bind, those
        waiting for their volumes), or the refusal of the first that cannot go (nothing then
        stays assumed or reserved). `domain`: count lines go only to nodes whose `topology`
        label has this value."""
        within = None if domain is None else (lambda node: node.labels.get(topology) == domain)
        failover = Failover(wall, self.failover_after)
        decided: list[tuple[str, dict, Decision]] = []
        # Members that pass every check but wait for their claims' volumes: all or none includes
        # the volumes, so every member's are asked for in this attempt and none is bound before
        # all are bound.
        provisioning: list[tuple[int, Decision]] = []
        for index in sorted(members):
            m = members[index]
            decision = decide(m.pod, self._cache, self.policy, reserved, gang, within=within, failover=failover)
            if decision.chosen and domain is not None:
                decision = replace(
                    decision, chosen=f"{decision.chosen}; with its gang on nodes with {topology}={domain}"
                )
            if decision.event == WAITING_FOR_VOLUMES:
                # Reserved at once, so that the next member is not given the same volume.
                self._reserve_volumes(decision)
                provisioning.append((index, decision))
                continue
            if not decision.bind:
                for assumed_uid, _, _ in decided:
                    self._cache.forget(assumed_uid)
                for _, waiting_decision in provisioning:
                    self._release_volumes(waiting_decision.provision)
                where = f" on nodes with {topology}={domain}" if domain is not None else ""
                why = f"waits: its pod {m.key} (index {index}) cannot go yet{where}: {decision.reason}"
                return replace(decision, reason=why)
            self._assume(m.uid, m.pod, decision, gang)
            decided.append((m.uid, m.pod, decision))
        return decided, provisioning

    def _reserve_volumes(self, decision: Decision) -> None:
        """The volumes chosen for the decision's claims are theirs until their claimRefs are
        written (volume_written, volume_not_written)."""
        for write in decision.provision:
            if isinstance(write, BindVolume):
                self._cache.volumes.reserve(write.volume, write.claim_key)

    def _release_volumes(self, writes: Iterable[SelectNode | BindVolume]) -> list[str]:
        volumes = self._cache.volumes
        return [k for w in writes if isinstance(w, BindVolume) for k in volumes.release(w.volume, w.claim_key)]

    def _gang_waits(self, view: GangView, pod: dict, why: str, nodes: tuple[str, ...], wall: float) -> Decision:
        """The pod's refusal on behalf of its gang, always retried with backoff: even a refusal
        only a change can cure (a map the gang cannot use) may be cured by another of its pods
        changing or appearing, which this pod's own queue entry would not notice."""
        event, message = waiting(view, why, wall, self.gang_timeout)
        try:
            entry = pinned_placement_for(pod)
        except PlacementError:
            entry = None
        return Decision(pod_key(pod), entry, None, Code.UNSCHEDULABLE, reason=message, event=event, waiting_on=nodes)

    def _assume(self, uid: str, pod: dict, decision: Decision, gang: str | None = None) -> None:
        # Its claims are held with it: a ReadWriteOncePod claim is in use from now on.
        claims, ephemeral = claim_keys(pod) if (pod.get("spec") or {}).get("volumes") else ((), ())
        # Its labels and anti-affinity terms too: the next pod decided, before the watch shows
        # this one on its node, must see it in its topology domain.
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or ""
        self._cache.assume(
            AssignedPod(
                uid,
                decision.pod_key,
                decision.node or "",
                pod.get("requests") or (),
                decision.entry.devices,
                gang,
                decision.index,
                pod.get("hostPorts") or (),
                claims,
                ephemeral,
                labels=meta.get("labels") or {},
                anti_affinity=pod_terms(required_terms(pod.get("spec") or {}, "podAntiAffinity"), namespace),
            )
        )

    def _gang_view(self, gang: str) -> GangView:
        return gang_view(gang, self._gangs, self._cache)

    @_locked
    def reservations(self, wall: float) -> dict[tuple[str, str], str] | None:
        """The GPUs held for waiting gangs (scheduling.gangs), under deny only: where GPUs may
        be shared nothing needs holding. Computed at each decision from the pods and the
        ledger as they are now, so a GPU that frees is reserved before any pod can take it."""
        if self.policy is not SharingPolicy.DENY or not len(self._gangs):
            return None
        return reservations(gang_views(self._gangs, self._cache), self._cache, wall, self.gang_timeout)

    # == outcomes of an attempt ====================================================================

    @_locked
    def refused(self, uid: str, decision: Decision, now: float, jitter: float) -> None:
        """The pod cannot go to its node now; it waits. The cache is left alone: a hold kept from
        an earlier binding whose answer was lost may be real (the pod watch may lag behind
        the binding), and a list settles it (see bind_failed)."""
        if decision.code is Code.UNSCHEDULABLE:
            waiting_on = (decision.entry.node if decision.entry else None, decision.node, *decision.waiting_on)
            self._queue.retry_later(uid, now, jitter, [n for n in waiting_on if n])
        else:
            self._queue.give_up_until_changed(uid)

    @_event
    def volume_written(self, volume: Volume) -> bool:
        """A claimRef was written: the volume as the API server answered it (its reservation ends)."""
        return self._wake(*self._cache.volumes.volume_written(volume))

    @_event
    def volumes_not_written(self, writes: Iterable[SelectNode | BindVolume]) -> bool:
        """The claimRefs were not written (refused, no answer, not leading): the volumes may go
        to any claim again, and the pods waiting on their classes are woken."""
        return self._wake(*self._release_volumes(writes))

    @_event
    def bound(self, uid: str, now: float) -> bool:
        """The binding was stored (or the pod already had a node: a 409 "already assigned").
        The hold stays assumed until the pod watch shows where the pod is. Pods that
        PodTopologySpread or InterPodAffinity refused are woken: the pod is on its node now,
        and the watch showing it there changes nothing the cache holds."""
        self._cache.finish_binding(uid, now)
        self._queue.done(uid)
        return self._wake(PODS_ON_NODES)

    @_event
    def bind_failed(self, uid: str, node: str | None, maybe_stored: bool, now: float, jitter: float) -> bool:
        """The binding failed. When the answer proves it was not stored (a 4xx), the hold goes.
        When it does not (no answer, a 5xx, a 409 from a storage error) the binding may have
        been stored, or may still be: the hold stays in doubt until the watch shows the pod on
        its node, or a list started after it settles (cache.binding_unknown) does not; the
        pod watch asks for that list (next_relist, watches.py). Either way the pod is tried again later."""
        woke = False
        if maybe_stored:
            self._cache.binding_unknown(uid, now)
        else:
            woke = self._wake(self._cache.forget(uid))
        self._queue.retry_later(uid, now, jitter, [node] if node else ())
        return woke

    @_event
    def pod_gone(self, uid: str) -> bool:
        """The binding answered 404: the pod was deleted before it."""
        self._queue.done(uid)
        return self._wake(self._cache.forget(uid))

    @_event
    def not_leading(self, uid: str, now: float, jitter: float) -> bool:
        """Leadership ended between the decision and the binding: nothing was sent."""
        woke = self._wake(self._cache.forget(uid))
        self._queue.retry_later(uid, now, jitter)
        return woke

    @_locked
    def attempt_failed(self, uid: str, now: float, jitter: float) -> None:
        """The attempt raised (a bug, not an answer from the API server). Whether its binding
        was sent is not known: a hold whose binding call had not ended is kept in doubt, like
        a lost answer (freeing it could give its GPU to another pod while the binding lands);
        one whose binding call ended stays for the watch to confirm or a list to end."""
        if self._cache.binding_in_flight(uid):
            self._cache.binding_unknown(uid, now)
        self._queue.retry_later(uid, now, jitter)

    @_locked
    def next_relist(self, after: float = float("-inf")) -> float | None:
        """When a list of the pods on nodes can next end a hold in doubt (None: none is)."""
        return self._cache.next_doubt_settles(after)

    # == reading: metrics, `gpu-scheduler gpus` and tests ============================================

    @_locked
    def queue_counts(self) -> dict[str, int]:
        return self._queue.counts()

    @_locked
    def queue_state(self, uid: str) -> str | None:
        """The pod's state in the queue (queue.STATES), None when it is not queued."""
        return self._queue.state_of(uid)

    @_locked
    def waiting_on(self, uid: str) -> tuple[str, ...]:
        return self._queue.waiting_on(uid)

    @_locked
    def queued(self) -> int:
        return len(self._queue)

    @_locked
    def check_queue(self) -> None:
        """Raises AssertionError when the queue's indexes disagree (for tests)."""
        self._queue.check()

    @_locked
    def reserved_volumes(self) -> dict[str, str]:
        """volume name -> the claim (namespace/name) it is reserved for while its claimRef is written."""
        return self._cache.volumes.reservations()

    @_locked
    def gpus_held(self) -> dict[str, int]:
        return self._cache.ledger.held_per_node()

    @_locked
    def gpu_holders(self) -> list[tuple[str, str, str]]:
        return self._cache.ledger.held()

    @_locked
    def holders(self) -> dict[tuple[str, str], list[str]]:
        """(node, GPU key) -> the UIDs of the pods holding it."""
        return {where: sorted(uids) for where, uids in self._cache.ledger.holders().items()}

    @_locked
    def held_by(self, uid: str) -> AssignedPod | None:
        """What the pod holds on its node (assumed or seen there), None when nothing."""
        return self._cache.pod(uid)

    @_locked
    def assumed(self) -> frozenset[str]:
        """The pods held on the scheduler's word alone, not yet seen on their node."""
        return self._cache.assumed_uids()

    @_locked
    def gang_counts(self, wall: float) -> dict[str, int]:
        """Gangs with pending pods by state: waiting, partial (some pods bound), timed-out."""
        return gang_counts(gang_views(self._gangs, self._cache), wall, self.gang_timeout)

    def __contains__(self, uid: str) -> bool:
        """Whether the pod is queued."""
        with self._lock:
            return uid in self._queue

    # -- internals: called under the lock ----------------------------------------------------------

    def _placed(self, uid: str) -> bool:
        """The cache holds the pod as bound: seen on a node, or bound by us (answered). A pod
        whose binding is in flight or in doubt stays queued: a change to it is remembered for
        its retry (the queue's changed_in_flight), and a 409 "already assigned" ends it."""
        cache = self._cache
        return cache.pod(uid) is not None and not cache.is_doubtful(uid) and not cache.binding_in_flight(uid)

    def _wake(self, *names: str | None, sparing: Iterable[str] = ()) -> bool:
        """Pods waiting on these nodes (names or aliases) are retried now, and those waiting on
        a claim that the last pod using it left (VolumeRestrictions); True if any were."""
        return self._queue.wake([n for n in (*names, *self._cache.released_claims()) if n], sparing) > 0


def _topology_changed(before: AssignedPod | None, after: AssignedPod) -> bool:
    """Whether a pod seen on a node changes what PodTopologySpread or InterPodAffinity count:
    it is new, or moved, relabelled, or being deleted since."""
    if before is None:
        return True
    return (
        before.node != after.node
        or before.labels != after.labels
        or before.anti_affinity != after.anti_affinity
        or before.terminating != after.terminating
    )


def _index(pod: dict) -> str:
    try:
        index = placement_for(pod).index
    except PlacementError:
        return "?"
    return "*" if index is None else str(index)
