"""Everything a scheduler process believes, and every way it changes, in one place.

The queue of pending pods (queue.SchedulingQueue) and the cluster cache of
nodes, pods on nodes and GPUs (scheduling.ClusterCache) change only through
the methods below: one per watch event and one per outcome of an attempt.
The one pod watch's events (pod_changed, pod_deleted, pods_listed) are made
of the pending-pod and pod-on-node changes, so each of those is told apart.
Reading this file tells every way a pod is queued, a GPU held or freed.

Pure and single-threaded: every caller takes one lock around it (locked_state.py)
and makes the API calls outside it; tests drive it directly (tests/test_scheduler_state.py runs
it as a hypothesis state machine). Pods are keyed by UID throughout.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpu_scheduler.kube.objects import WatchedPod, pod_key, pod_uid
from gpu_scheduler.placement.gang import GangError, gang_of
from gpu_scheduler.scheduling import (
    AssignedPod,
    ClusterCache,
    Decision,
    NodeInfo,
    SharingPolicy,
    decide,
)
from gpu_scheduler.scheduling.gangs import GangPlan, GangView, PendingGangs, reservations

from .gang_decisions import decide_gang
from .queue import INITIAL_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS, SchedulingQueue

# How long a gang waits with its GPUs reserved (--gang-timeout-seconds).
GANG_TIMEOUT_SECONDS = 300.0


class SchedulerState:
    def __init__(
        self,
        alias_label: str,
        policy: SharingPolicy,
        initial_backoff: float = INITIAL_BACKOFF_SECONDS,
        max_backoff: float = MAX_BACKOFF_SECONDS,
        gang_timeout: float = GANG_TIMEOUT_SECONDS,
    ) -> None:
        self.policy = policy
        self.cache = ClusterCache(alias_label)
        self.queue = SchedulingQueue(initial_backoff, max_backoff)
        self.gangs = PendingGangs()  # the pending pods of each gang, beside the queue
        self.gang_timeout = gang_timeout

    # -- the pod watch: every pod not finished, of every scheduler ---------------------------------
    # Each returns whether pods became active (LockedState.update then wakes a worker).

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

    def pod_deleted(self, pod: WatchedPod) -> bool:
        """A DELETED event: the pod was deleted, or finished (it left the selector). It leaves the
        queue; what it held on a node is freed. A pod deleted with no node frees nothing: a hold
        assumed for it waits for its binding's answer or a list (see pending_delete)."""
        self.pending_delete(pod.uid)
        return self.assigned_delete(pod.assigned) if pod.assigned is not None else False

    def pods_listed(self, pods: Iterable[WatchedPod], listed_at: float) -> tuple[bool, list[str]]:
        """A list of the pod watch, started at listed_at (monotonic). The pods on nodes replace
        the cache's first, then the pending pods the queue's, so that a listed pending pod the
        cache now holds as bound is left out. Returns whether pods became active, and the keys
        of the pending pods it dropped (their Event series are forgotten)."""
        pods = list(pods)
        woke = self.assigned_replace([p.assigned for p in pods if p.assigned is not None], listed_at)
        dropped = self.pending_replace([p.pending for p in pods if p.pending is not None])
        return woke, dropped

    # -- pending pods of this scheduler ------------------------------------------------------------

    # These touch only the queue, never the cache: a pod leaves the pending set when it is
    # bound as well as when it is deleted, and a pending pod's DELETED says the same for both
    # (see scheduling/cache.py). Only a pod seen on a node, a binding's answer or a list can
    # free what a pod holds.

    def pending_replace(self, pods: Iterable[dict]) -> list[str]:
        """A list of the pending pods. Returns the keys of the pods it dropped (their Event series
        are forgotten). A listed pod that the cache holds is left out (see pending_upsert)."""
        dropped = self.queue.replace({uid: p for p in pods if not self._placed(uid := pod_uid(p))})
        for pod in dropped:
            self.gangs.delete(pod_uid(pod))
        for uid in self.queue.keys():
            self._gang_upsert(uid, self.queue.pod_of(uid))
        return [pod_key(p) for p in dropped]

    def pending_upsert(self, pod: dict) -> bool:
        """A pending pod was added or changed. Ignored when the cache holds the pod: it was
        bound (by us, or seen on a node), and this event is older than that (our own condition
        write delivered late, a list taken before the binding): queueing it would decide and
        bind it a second time."""
        uid = pod_uid(pod)
        if self._placed(uid):
            return False
        self._gang_upsert(uid, pod)
        return self.queue.upsert(uid, pod)

    def pending_delete(self, uid: str) -> bool:
        """The pod left the pending set: bound, or deleted. It leaves the queue (and its gang's
        pending pods: bound, the cache has it; deleted, its gang waits for its replacement)."""
        self.queue.delete(uid)
        self.gangs.delete(uid)
        return False

    def _gang_upsert(self, uid: str, pod: dict | None) -> None:
        try:
            gang = gang_of(pod) if pod is not None else None
        except GangError:
            gang = None  # its own decision says why
        self.gangs.upsert(uid, pod or {}, gang)

    # -- pods on nodes, of every scheduler ------------------------------------------------------------

    def assigned_replace(self, pods: Iterable[AssignedPod], listed_at: float) -> bool:
        before = self.cache.uids()
        freed = self.cache.replace_pods(pods, listed_at)
        # A pod whose assumed hold expired here is not woken by its own hold leaving: it waits
        # out its backoff (else a failed binding, the list it asks for and the retry would spin).
        return self._wake(*freed, sparing=before - self.cache.uids())

    def assigned_upsert(self, pod: AssignedPod) -> bool:
        return self._wake(self.cache.add_pod(pod))

    def assigned_delete(self, pod: AssignedPod) -> bool:
        return self._wake(self.cache.remove_pod(pod.uid))

    # -- nodes -----------------------------------------------------------------------------------

    def nodes_replace(self, nodes: Iterable[NodeInfo]) -> bool:
        nodes = list(nodes)
        names = {n.name for n in nodes}
        for name in self.cache.nodes.names():
            if name not in names:
                self.cache.delete_node(name)
        woke = False
        for node in nodes:
            woke = self.node_upsert(node) or woke
        return woke

    def node_upsert(self, node: NodeInfo) -> bool:
        """A node appeared or changed: pods waiting on it (by name or alias) are tried again at
        once, since any change to what the filters read may let them on."""
        before = self.cache.nodes.get(node.name)
        after = self.cache.upsert_node(node)
        if before == after:
            return False
        return self._wake(after.name, after.alias, before.alias if before else None)

    def node_delete(self, name: str) -> None:
        self.cache.delete_node(name)

    # -- attempts ------------------------------------------------------------------------------------

    def pop(self, now: float) -> tuple[str, dict] | None:
        return self.queue.pop(now)

    def decide(self, uid: str, pod: dict, wall: float = 0.0) -> Decision | GangPlan | None:
        """Decides for a pod taken off the queue; on "bind", assumes it (its requests and GPUs are
        held on the node from now on). A pod of a gang is decided with its whole gang: a
        GangPlan when all of it can go (every pending pod assumed and in flight), else the
        pod's refusal. None when the pod is being deleted (dropped until its DELETED event).
        `wall`: the Unix time now, which gang timeouts are reckoned in (pods' creation times)."""
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            self.queue.give_up_until_changed(uid)
            return None
        try:
            gang = gang_of(pod)
        except GangError as err:
            return Decision(pod_key(pod), None, None, bind=False, reason=str(err), retryable=False)
        if gang is not None:
            return decide_gang(self, uid, pod, gang, wall)
        decision = decide(pod, self.cache, self.policy, self.reservations(wall))
        if decision.bind:
            self.assume(uid, pod, decision)
        return decision

    def assume(self, uid: str, pod: dict, decision: Decision, gang: str | None = None) -> None:
        self.cache.assume(
            AssignedPod(
                uid,
                decision.pod_key,
                decision.node or "",
                pod.get("requests") or (),
                decision.entry.devices,
                gang,
                decision.index,
            )
        )

    # -- gangs ----------------------------------------------------------------------------------

    def gang_view(self, gang: str) -> GangView:
        return GangView(gang, self.gangs.pending(gang), tuple(self.cache.gang_pods(gang)))

    def reservations(self, wall: float) -> dict[tuple[str, str], str] | None:
        """The GPUs held for waiting gangs (scheduling.gangs), under deny only: where GPUs may
        be shared nothing needs holding. Computed at each decision from the pods and the
        ledger as they are now, so a GPU that frees is reserved before any pod can take it."""
        if self.policy is not SharingPolicy.DENY or not len(self.gangs):
            return None
        views = [self.gang_view(gang) for gang in self.gangs.gangs()]
        return reservations(views, self.cache, wall, self.gang_timeout)

    def gang_counts(self, wall: float) -> dict[str, int]:
        """Gangs with pending pods by state: waiting, partial (some pods bound), timed-out."""
        counts = {"waiting": 0, "partial": 0, "timed-out": 0}
        for gang in self.gangs.gangs():
            view = self.gang_view(gang)
            state = "partial" if view.placed else "timed-out" if view.timed_out(wall, self.gang_timeout) else "waiting"
            counts[state] += 1
        return counts

    def refused(self, uid: str, decision: Decision, now: float, jitter: float) -> None:
        """The pod cannot go to its node now; it waits. The cache is left alone: a hold kept from
        an earlier binding whose answer was lost may be real (the pod watch may lag behind
        the binding), and a list settles it (see bind_failed)."""
        if decision.retryable:
            waiting_on = (decision.entry.node if decision.entry else None, decision.node, *decision.waiting_on)
            self.queue.retry_later(uid, now, jitter, [n for n in waiting_on if n])
        else:
            self.queue.give_up_until_changed(uid)

    def bound(self, uid: str, now: float) -> None:
        """The binding was stored (or the pod already had a node: a 409 "already assigned").
        The hold stays assumed until the pod watch shows where the pod is."""
        self.cache.finish_binding(uid, now)
        self.queue.done(uid)

    def bind_failed(self, uid: str, node: str | None, maybe_stored: bool, now: float, jitter: float) -> bool:
        """The binding failed. When the answer proves it was not stored (a 4xx), the hold goes.
        When it does not (no answer, a 5xx, a 409 from a storage error) the binding may have
        been stored, or may still be: the hold stays in doubt until the watch shows the pod on
        its node, or a list started after it settles (cache.binding_unknown) does not; the
        pod watch asks for that list (next_relist, watches.py). Either way the pod is tried again later."""
        woke = False
        if maybe_stored:
            self.cache.binding_unknown(uid, now)
        else:
            woke = self._wake(self.cache.forget(uid))
        self.queue.retry_later(uid, now, jitter, [node] if node else ())
        return woke

    def next_relist(self, after: float = float("-inf")) -> float | None:
        """When a list of the pods on nodes can next end a hold in doubt (None: none is)."""
        return self.cache.next_doubt_settles(after)

    def pod_gone(self, uid: str) -> bool:
        """The binding answered 404: the pod was deleted before it."""
        self.queue.done(uid)
        return self._wake(self.cache.forget(uid))

    def not_leading(self, uid: str, now: float, jitter: float) -> bool:
        """Leadership ended between the decision and the binding: nothing was sent."""
        woke = self._wake(self.cache.forget(uid))
        self.queue.retry_later(uid, now, jitter)
        return woke

    def attempt_failed(self, uid: str, now: float, jitter: float) -> bool:
        """The attempt raised (a bug, not an answer from the API server). Whether its binding
        was sent is not known: a hold whose binding call had not ended is kept in doubt, like
        a lost answer (freeing it could give its GPU to another pod while the binding lands);
        one whose binding call ended stays for the watch to confirm or a list to end."""
        if self.cache.binding_in_flight(uid):
            self.cache.binding_unknown(uid, now)
        self.queue.retry_later(uid, now, jitter)
        return False

    # -- internals -----------------------------------------------------------------------------------

    def _placed(self, uid: str) -> bool:
        """The cache holds the pod as bound: seen on a node, or bound by us (answered). A pod
        whose binding is in flight or in doubt stays queued: a change to it is remembered for
        its retry (the queue's changed_in_flight), and a 409 "already assigned" ends it."""
        cache = self.cache
        return cache.pod(uid) is not None and not cache.is_doubtful(uid) and not cache.binding_in_flight(uid)

    def _wake(self, *names: str | None, sparing: Iterable[str] = ()) -> bool:
        """Pods waiting on these nodes (names or aliases) are retried now; True if any were."""
        return self.queue.wake([n for n in names if n], sparing) > 0
