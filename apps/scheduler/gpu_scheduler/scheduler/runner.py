"""The scheduling loop: caches fed by watches, a queue, and bind workers.

Threads:
  informer-pods             every pod not finished: this scheduler's unbound pods -> the queue,
                            pods on nodes, of any scheduler -> node usage and the GPU ledger
  informer-nodes            nodes -> the node index
  bind-N                    take a pod off the queue, decide, bind, report
  events-N, pod-conditions  Events and PodScheduled conditions, never in a bind's way
All state lives in one SchedulerState (state.py) behind one lock; decide()
runs under it (microseconds), the API calls do not.

No pod is taken off the queue before every informer has listed once (as
kube-scheduler waits for its caches to sync): deciding on a half-loaded
ledger could give away a held GPU.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_scheduler.kube.binder import BIND_TIMEOUT_SECONDS, BindOutcome, BindResult, bind
from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.events import NORMAL, WARNING, EventRecorder
from gpu_scheduler.kube.informer import RELIST_REASONS, Informer
from gpu_scheduler.kube.objects import UNFINISHED_SELECTOR, WatchedPod, node_info, pod_key, watched_pod
from gpu_scheduler.kube.pod_status import SCHEDULER_ERROR, PodConditionWriter
from gpu_scheduler.scheduling import Decision, NodeInfo, SharingPolicy

from .metrics import ALREADY_BOUND, ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics
from .queue import INITIAL_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS
from .state import SchedulerState

log = logging.getLogger("gpu_scheduler.scheduler")

# Without leadership or synced caches a worker re-checks this often whether it may start.
IDLE_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_name: str
    namespace: str | None
    policy: SharingPolicy
    alias_label: str
    workers: int
    initial_backoff: float = INITIAL_BACKOFF_SECONDS
    max_backoff: float = MAX_BACKOFF_SECONDS
    bind_timeout: float = BIND_TIMEOUT_SECONDS  # command.bind_timeout: fits the leader lease


class Scheduler:
    def __init__(
        self,
        client: KubeClient,
        config: SchedulerConfig,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
        may_bind: Callable[[], bool],
        conditions: PodConditionWriter | None = None,
    ) -> None:
        self._client = client
        self._config = config
        self._recorder = recorder
        self._conditions = conditions
        self._metrics = metrics
        self._may_bind = may_bind
        self.state = SchedulerState(config.alias_label, config.policy, config.initial_backoff, config.max_backoff)
        self._lock = threading.Lock()
        # Workers wait on _work; stop() waits on _drained. One pod that becomes due
        # wakes one worker (notify, not notify_all): with 32 workers, waking them all
        # for every watch event cost more CPU than the binding itself (make bench).
        # A worker that takes a pod and sees more due wakes the next one.
        self._work = threading.Condition(self._lock)
        self._drained = threading.Condition(self._lock)
        self._leading = False
        self._stopping = False
        self._in_flight = 0
        self._inventory_problems: dict[str, str] = {}  # node -> why its inventory was unreadable, as logged

        self.informers = [
            # Every namespace, whatever --namespace says: pods of other namespaces and
            # schedulers use the same nodes (--namespace limits the pods it schedules).
            Informer(
                client,
                "/api/v1/pods",
                _Handler(self._pods_replace, self._pod_upsert, self._pod_delete),
                functools.partial(watched_pod, scheduler_name=config.scheduler_name, namespace=config.namespace),
                name="pods",
                field_selector=UNFINISHED_SELECTOR,
            ),
            Informer(
                client,
                "/api/v1/nodes",
                _Handler(self._nodes_replace, self._node_upsert, self._node_delete),
                functools.partial(node_info, alias_label=config.alias_label),
                name="nodes",
            ),
        ]
        self._pods = self.informers[0]
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"bind-{i}", daemon=True) for i in range(config.workers)
        ]
        metrics.watch_state(
            self.queue_counts,
            self.gpus_held,
            self.gpu_holders,
            lambda: recorder.dropped,
            lambda: {(i.name, reason): i.relists[reason] for i in self.informers for reason in RELIST_REASONS},
            self.watch_silences,
        )

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        for informer in self.informers:
            informer.start()
        for worker in self._workers:
            worker.start()

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers)

    def not_current(self) -> list[str]:
        """What keeps the caches from being current (for /readyz); [] when they are."""
        now = time.monotonic()
        return [problem for i in self.informers if (problem := i.current(now))]

    def dead_parts(self) -> list[str]:
        """Threads that were started and have ended (for /healthz). One not started yet is
        not dead: the server answers while start() is still starting them, and the caches
        can list before the last binding thread starts."""
        dead = [f"informer {i.name}" for i in self.informers if not i.alive()]
        if not self._stopping:
            dead += [w.name for w in self._workers if w.ident is not None and not w.is_alive()]
        return dead

    def set_leading(self, leading: bool) -> None:
        with self._work:
            self._leading = leading
            self._work.notify_all()
        self._metrics.leader.set(1 if leading else 0)

    def stop(self, timeout: float) -> bool:
        """Takes no new pods; waits up to timeout for attempts in flight. True if all ended."""
        deadline = time.monotonic() + timeout
        with self._work:
            self._stopping = True
            self._work.notify_all()
            while self._in_flight and time.monotonic() < deadline:
                self._drained.wait(deadline - time.monotonic())
            drained = self._in_flight == 0
        for informer in self.informers:
            informer.stop()
        return drained

    # -- state read by metrics ---------------------------------------------------------------

    def queue_counts(self) -> dict[str, int]:
        with self._lock:
            return self.state.queue.counts()

    def gpus_held(self) -> dict[str, int]:
        with self._lock:
            return self.state.cache.ledger.held_per_node()

    def gpu_holders(self) -> list[tuple[str, str, str]]:
        with self._lock:
            return self.state.cache.ledger.held()

    def watch_silences(self) -> dict[str, float]:
        """Seconds since each cache's last list, event or bookmark (those that have listed)."""
        now = time.monotonic()
        silences = {i.name: i.seconds_since_last_event(now) for i in self.informers}
        return {name: seconds for name, seconds in silences.items() if seconds is not None}

    # -- the work loop ------------------------------------------------------------------------------

    def _next(self) -> tuple[str, dict] | None:
        """Blocks until a pod is due and we may bind; None when stopping."""
        with self._work:
            while not self._stopping:
                timeout = IDLE_POLL_SECONDS
                if self._leading and self.synced():
                    now = time.monotonic()
                    item = self.state.pop(now)
                    if item is not None:
                        self._in_flight += 1
                        if self.state.queue.has_active():
                            self._work.notify()
                        return item
                    due = self.state.queue.next_due()
                    timeout = None if due is None else max(0.0, due - now)
                self._work.wait(timeout)
            return None

    def _work_loop(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            uid, pod = item
            try:
                self._attempt(uid, pod)
            except Exception:  # one pod's surprise must not cost a worker, nor leak its hold
                log.exception("scheduling %s failed", pod_key(pod))
                self._update(self.state.attempt_failed, uid, time.monotonic(), random.random())
                self._relist_for_doubts()
            finally:
                # While pods wait in backoff, one waiting worker wakes to time the
                # earliest (this attempt may have set it, and this worker may take
                # another pod and be busy when it ends). Otherwise nobody needs waking.
                with self._work:
                    self._in_flight -= 1
                    if self.state.queue.next_due() is not None:
                        self._work.notify()
                    if self._stopping and not self._in_flight:
                        self._drained.notify_all()

    def _update(self, change: Callable[..., bool | None], *args: object) -> None:
        """Applies a change to the state under the lock; wakes the workers if pods became active."""
        with self._work:
            if change(*args):
                self._work.notify()

    def _attempt(self, uid: str, pod: dict) -> None:
        started = time.perf_counter()
        with self._work:
            decision = self.state.decide(uid, pod)
        if decision is None:
            return  # being deleted; its DELETED event ends it
        if not decision.bind:
            self._refuse(uid, pod, decision, started)
            return
        if not self._may_bind():
            # Leadership ended between taking the pod and binding it.
            self._update(self.state.not_leading, uid, time.monotonic(), random.random())
            return

        bind_started = time.perf_counter()
        result = bind(
            self._client,
            pod["metadata"]["namespace"],
            pod["metadata"]["name"],
            uid,
            decision.node,
            timeout=self._config.bind_timeout,
        )
        self._metrics.binding_duration.observe(time.perf_counter() - bind_started)

        if result.outcome in (BindOutcome.BOUND, BindOutcome.ALREADY_BOUND):
            # On 409 the pod is on a node already; the pod watch puts the hold
            # where it really is.
            self._update(self.state.bound, uid, time.monotonic())
            self._forget(uid, pod_key(pod))
            if result.outcome is BindOutcome.BOUND:
                self._announce(pod, decision)
                self._finish(SCHEDULED, decision, started, outcome=result.outcome.value)
            else:
                # Not a binding of this attempt: "scheduled" counts only those, so that it
                # says how many pods this process placed.
                self._finish(ALREADY_BOUND, decision, started, outcome=result.outcome.value)
            return
        if result.outcome is BindOutcome.POD_GONE:
            self._update(self.state.pod_gone, uid)
            self._forget(uid, pod_key(pod))
        else:
            now = time.monotonic()
            self._update(self.state.bind_failed, uid, decision.node, result.maybe_stored, now, random.random())
            if result.maybe_stored:
                self._relist_for_doubts()
            self._report_bind_failure(pod, decision, result)
        self._finish(
            ERROR, decision, started, outcome=result.outcome.value, reason=result.message or str(result.status)
        )

    def _refuse(self, uid: str, pod: dict, decision: Decision, started: float) -> None:
        self._update(self.state.refused, uid, decision, time.monotonic(), random.random())
        reason = decision.reason or ""
        self._recorder.record(pod, WARNING, "FailedScheduling", "Scheduling", reason, coalesce=True)
        if self._conditions is not None:
            self._conditions.unschedulable(pod, reason)
        self._finish(UNSCHEDULABLE, decision, started, reason=decision.reason, filter=decision.plugin)

    def _forget(self, uid: str, key: str) -> None:
        """The pod is placed or gone: its Event series and pending condition write go."""
        self._recorder.forget(key)
        if self._conditions is not None:
            self._conditions.forget(uid)

    def _report_bind_failure(self, pod: dict, decision: Decision, result: BindResult) -> None:
        """The Event and the PodScheduled condition after a binding that did not succeed.

        When the answer does not prove the binding was not stored, the pod may be bound
        already: the Event then claims no failure (it says what is known and what comes
        next), and the condition write is refused by the apiserver if the pod changed since
        we saw it, which a stored binding does (PodConditionWriter's precondition)."""
        detail = result.message or str(result.status)
        if result.maybe_stored:
            reason = "BindingNotConfirmed"  # not FailedScheduling: the pod may be bound
            message = (
                f"binding to node {decision.node} not confirmed ({detail}); "
                "checking whether it was stored, will retry if it was not"
            )
        else:
            reason = "FailedScheduling"
            message = f"binding to node {decision.node} failed: {detail}"
        self._recorder.record(pod, WARNING, reason, "Binding", message, coalesce=True)
        if self._conditions is not None:
            self._conditions.unschedulable(pod, message, SCHEDULER_ERROR)

    def _announce(self, pod: dict, decision: Decision) -> None:
        metadata = pod["metadata"]
        self._recorder.record(
            pod,
            NORMAL,
            "Scheduled",
            "Binding",
            f"Successfully assigned {metadata['namespace']}/{metadata['name']} to {decision.node} "
            f"with GPUs {decision.devices}",
        )
        for warning in decision.warnings:
            self._recorder.record(pod, WARNING, warning.reason, "Binding", warning.message)

    def _finish(self, result: str, decision: Decision, started: float, **fields: object) -> None:
        seconds = time.perf_counter() - started
        self._metrics.observe_attempt(result, seconds)
        log.info(
            result,
            extra={
                "fields": {
                    "pod": decision.pod_key,
                    "index": decision.index,
                    "node": decision.node,
                    "devices": decision.devices,
                    "result": result,
                    "duration_ms": round(seconds * 1000, 2),
                    **{k: v for k, v in fields.items() if v is not None},
                }
            },
        )

    # -- watch handlers (called on informer threads) ---------------------------------------------

    def _pods_replace(self, pods: list[WatchedPod], listed_at: float) -> None:
        with self._work:
            _, dropped = self.state.pods_listed(pods, listed_at)
            self._work.notify_all()
        # A pod that left while the watch was away is placed or gone: its Event series goes.
        for key in dropped:
            self._recorder.forget(key)
        # Holds in doubt that settle after this list started need a later one.
        self._relist_for_doubts(after=listed_at)

    def _pod_upsert(self, pod: WatchedPod) -> None:
        self._update(self.state.pod_changed, pod)
        if pod.ours and pod.assigned is not None:
            self._forget(pod.uid, pod.key)  # placed, by us or by anyone

    def _pod_delete(self, pod: WatchedPod) -> None:
        self._update(self.state.pod_deleted, pod)
        if pod.ours:
            self._forget(pod.uid, pod.key)

    def _relist_for_doubts(self, after: float = float("-inf")) -> None:
        """Asks the pods informer for a list at the time the next hold in doubt settles
        (a binding whose answer was lost): a list started then shows whether it was stored.
        The informer merges these requests and spaces them out (informer.request_resync)."""
        with self._lock:
            at = self.state.next_relist(after)
        if at is not None:
            self._pods.request_resync(at)

    def _nodes_replace(self, nodes: list[NodeInfo], _listed_at: float) -> None:
        for node in nodes:
            self._report_inventory(node)
        self._update(self.state.nodes_replace, nodes)

    def _node_upsert(self, node: NodeInfo) -> None:
        self._report_inventory(node)
        self._update(self.state.node_upsert, node)

    def _node_delete(self, node: NodeInfo) -> None:
        self._inventory_problems.pop(node.name, None)
        self._update(self.state.node_delete, node.name)

    def _report_inventory(self, node: NodeInfo) -> None:
        """Logs a node's unreadable GPU inventory once per problem (only the node watch's
        thread calls this): the node is then scheduled as if it published none."""
        problem = node.inventory_problem
        if problem == self._inventory_problems.get(node.name):
            return
        if problem is None:
            del self._inventory_problems[node.name]
            log.info("node %s's GPU inventory is readable again", node.name)
            return
        self._inventory_problems[node.name] = problem
        log.warning("%s; its GPUs are checked as if it published no inventory", problem)


@dataclass(frozen=True)
class _Handler:
    replace: Callable
    upsert: Callable
    delete: Callable
