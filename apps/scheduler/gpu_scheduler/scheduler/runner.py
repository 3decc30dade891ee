"""The scheduling loop: caches fed by watches, a queue, and bind workers.

Threads:
  informer-pending  watches this scheduler's unbound pods -> the queue
  informer-bound    watches this scheduler's bound pods   -> the GPU ledger
  informer-nodes    watches nodes                         -> the node index
  bind-N            take a pod off the queue, decide, bind, report
  events-N          send Events (kube.events), never in a bind's way
One lock guards the queue, node index and ledger; decide() runs under it (it
takes microseconds), the bind call does not. A pod's GPUs are held in the
ledger from the moment it is chosen for binding ("assumed", as kube-scheduler
says), so two pods decided back to back cannot both take a GPU under
--gpu-sharing=deny; the hold is dropped if the bind fails and confirmed when
the bound-pod watch sees the pod on its node.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_scheduler.kube.binder import BindOutcome, bind
from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.events import NORMAL, WARNING, EventRecorder
from gpu_scheduler.kube.informer import Informer
from gpu_scheduler.kube.objects import is_terminal, node_name, pod_key, trim_pod
from gpu_scheduler.placement import PlacementError, placement_for
from gpu_scheduler.scheduling import (
    Decision,
    GpuLedger,
    NodeIndex,
    NodeInfo,
    SharingPolicy,
    decide,
    injected_devices,
    unschedulable_reason,
)

from .metrics import ERROR, SCHEDULED, UNSCHEDULABLE, SchedulerMetrics
from .queue import SchedulingQueue

log = logging.getLogger("gpu_scheduler.scheduler")

# Without leadership a worker re-checks this often whether it may start.
IDLE_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_name: str
    namespace: str | None
    policy: SharingPolicy
    alias_label: str
    workers: int


def held_devices(pod: dict) -> tuple[str, ...] | None:
    """The GPUs a bound pod holds: as the webhook injected them, else as its map says."""
    injected = injected_devices(pod)
    if injected is not None:
        return tuple(d for d in injected.split(",") if d)
    try:
        return placement_for(pod).devices
    except PlacementError:
        return None


def _became_usable(before: NodeInfo | None, after: NodeInfo) -> bool:
    """Whether a node change can let waiting pods bind: it appeared, became
    Ready, was uncordoned, or its alias changed."""
    if before is None or before.alias != after.alias:
        return True
    return unschedulable_reason(before) is not None and unschedulable_reason(after) is None


class Scheduler:
    def __init__(
        self,
        client: KubeClient,
        config: SchedulerConfig,
        recorder: EventRecorder,
        metrics: SchedulerMetrics,
        may_bind: Callable[[], bool],
    ) -> None:
        self._client = client
        self._config = config
        self._recorder = recorder
        self._metrics = metrics
        self._may_bind = may_bind
        self.nodes = NodeIndex(config.alias_label)
        self.ledger = GpuLedger()
        self.queue = SchedulingQueue()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._assumed: dict[str, str] = {}  # pod key -> uid: held before the watch saw it bound
        self._bound: set[str] = set()  # pod keys held because the watch saw them bound
        self._leading = False
        self._stopping = False
        self._in_flight = 0

        pods_path = f"/api/v1/namespaces/{config.namespace}/pods" if config.namespace else "/api/v1/pods"
        name = config.scheduler_name
        self.informers = [
            Informer(
                client,
                pods_path,
                _PendingPods(self),
                trim_pod,
                name="pending-pods",
                field_selector=f"spec.schedulerName={name},spec.nodeName=",
            ),
            Informer(
                client,
                pods_path,
                _BoundPods(self),
                trim_pod,
                name="bound-pods",
                field_selector=f"spec.schedulerName={name},spec.nodeName!=",
            ),
            Informer(client, "/api/v1/nodes", _Nodes(self), dict, name="nodes"),
        ]
        self._workers = [
            threading.Thread(target=self._work_loop, name=f"bind-{i}", daemon=True) for i in range(config.workers)
        ]
        metrics.watch_state(
            self.queue_counts,
            self.gpus_held,
            lambda: recorder.dropped,
            lambda: {i.name: i.relists for i in self.informers},
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

    def dead_parts(self) -> list[str]:
        dead = [f"informer {i.name}" for i in self.informers if not i.alive()]
        if not self._stopping:
            dead += [w.name for w in self._workers if not w.is_alive()]
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
                self._work.wait(deadline - time.monotonic())
            drained = self._in_flight == 0
        for informer in self.informers:
            informer.stop()
        return drained

    # -- state read by metrics ---------------------------------------------------------------

    def queue_counts(self) -> dict[str, int]:
        with self._lock:
            return self.queue.counts()

    def gpus_held(self) -> dict[str, int]:
        with self._lock:
            return self.ledger.held_per_node()

    # -- the work loop ------------------------------------------------------------------------------

    def _next(self) -> tuple[str, dict] | None:
        """Blocks until a pod is due and we may bind; None when stopping."""
        with self._work:
            while not self._stopping:
                timeout = IDLE_POLL_SECONDS
                if self._leading:
                    now = time.monotonic()
                    item = self.queue.pop(now)
                    if item is not None:
                        self._in_flight += 1
                        return item
                    due = self.queue.next_due()
                    timeout = None if due is None else max(0.0, due - now)
                self._work.wait(timeout)
            return None

    def _work_loop(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            key, pod = item
            try:
                self._attempt(key, pod)
            except Exception:  # one pod's surprise must not cost a worker
                log.exception("scheduling %s failed", key)
                with self._work:
                    self.queue.retry_later(key, time.monotonic(), random.random())
            finally:
                with self._work:
                    self._in_flight -= 1
                    self._work.notify_all()

    def _attempt(self, key: str, pod: dict) -> None:
        started = time.perf_counter()
        uid = pod["metadata"].get("uid") or ""
        if pod["metadata"].get("deletionTimestamp"):
            with self._work:
                self.queue.give_up_until_changed(key)  # being deleted; its DELETED event ends it
            return
        with self._work:
            decision = decide(pod, self.nodes, self.ledger, self._config.policy)
            if decision.bind:
                self._hold(key, decision.node, decision.entry.devices)
                self._assumed[key] = uid
        if not decision.bind:
            self._refuse(key, pod, decision, started)
            return
        if not self._may_bind():
            # Leadership ended between taking the pod and binding it.
            with self._work:
                self._forget_assumed(key, uid)
                self.queue.retry_later(key, time.monotonic(), random.random())
            return

        bind_started = time.perf_counter()
        result = bind(self._client, pod["metadata"]["namespace"], pod["metadata"]["name"], uid, decision.node)
        self._metrics.binding_duration.observe(time.perf_counter() - bind_started)

        if result.outcome in (BindOutcome.BOUND, BindOutcome.ALREADY_BOUND):
            # On 409 the pod is on a node already; the bound-pod watch puts
            # the hold where it really is.
            with self._work:
                self.queue.done(key, uid)
            self._recorder.forget(key)
            if result.outcome is BindOutcome.BOUND:
                self._announce(pod, decision)
            self._finish(SCHEDULED, decision, started, outcome=result.outcome.value)
            return
        with self._work:
            self._forget_assumed(key, uid)
            if result.outcome is BindOutcome.POD_GONE:
                self.queue.done(key, uid)
            else:
                self.queue.retry_later(key, time.monotonic(), random.random())
        if result.outcome is BindOutcome.FAILED:
            self._recorder.record(
                pod,
                WARNING,
                "FailedScheduling",
                "Binding",
                f"binding to node {decision.node} failed: {result.message or result.status}",
                coalesce=True,
            )
        self._finish(
            ERROR, decision, started, outcome=result.outcome.value, reason=result.message or str(result.status)
        )

    def _refuse(self, key: str, pod: dict, decision: Decision, started: float) -> None:
        with self._work:
            if decision.retryable:
                waiting_on = (decision.entry.node if decision.entry else None, decision.node)
                self.queue.retry_later(key, time.monotonic(), random.random(), waiting_on)
            else:
                self.queue.give_up_until_changed(key)
        self._recorder.record(pod, WARNING, "FailedScheduling", "Scheduling", decision.reason or "", coalesce=True)
        self._finish(UNSCHEDULABLE, decision, started, reason=decision.reason)

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

    def _forget_assumed(self, key: str, uid: str) -> None:
        """Drops a hold taken for a bind that did not happen (lock held)."""
        if self._assumed.get(key) == uid:
            del self._assumed[key]
            if key not in self._bound:
                self._release(key)

    def _hold(self, key: str, node: str, devices: tuple[str, ...]) -> None:
        self.ledger.hold(key, node, devices)

    def _release(self, key: str) -> None:
        """Frees a pod's GPUs and retries pods waiting on that node (lock held)."""
        node = self.ledger.node_of(key)
        if self.ledger.release(key) and node is not None and self.queue.wake([node]):
            self._work.notify_all()

    # -- watch handlers (called on informer threads) ---------------------------------------------

    def _pending_replace(self, pods: list[dict]) -> None:
        with self._work:
            self.queue.replace({pod_key(p): p for p in pods})
            self._work.notify_all()

    def _pending_upsert(self, pod: dict) -> None:
        with self._work:
            if self.queue.upsert(pod_key(pod), pod):
                self._work.notify()

    def _pending_delete(self, pod: dict) -> None:
        key = pod_key(pod)
        with self._work:
            self.queue.delete(key)
        self._recorder.forget(key)

    def _bound_replace(self, pods: list[dict]) -> None:
        with self._work:
            current = {pod_key(p) for p in pods if not is_terminal(p)}
            for key in self._bound - current:
                self._bound.discard(key)
                if key not in self._assumed:
                    self._release(key)
            for pod in pods:
                self._bound_upsert_locked(pod)

    def _bound_upsert(self, pod: dict) -> None:
        with self._work:
            self._bound_upsert_locked(pod)

    def _bound_upsert_locked(self, pod: dict) -> None:
        key = pod_key(pod)
        if is_terminal(pod):
            self._bound_gone_locked(key)
            return
        self._assumed.pop(key, None)
        self._bound.add(key)
        devices = held_devices(pod)
        if devices is None:
            # No readable placement: nothing to hold, nothing to conflict with.
            self._release(key)
            return
        self._hold(key, pod["spec"]["nodeName"], devices)

    def _bound_delete(self, pod: dict) -> None:
        with self._work:
            self._bound_gone_locked(pod_key(pod))

    def _bound_gone_locked(self, key: str) -> None:
        self._assumed.pop(key, None)
        self._bound.discard(key)
        self._release(key)

    def _nodes_replace(self, nodes: list[dict]) -> None:
        with self._work:
            names = {node_name(n) for n in nodes}
            for name in self.nodes.names():
                if name not in names:
                    self.nodes.delete(name)
            for node in nodes:
                self._node_upsert_locked(node)

    def _node_upsert(self, node: dict) -> None:
        with self._work:
            self._node_upsert_locked(node)

    def _node_upsert_locked(self, node: dict) -> None:
        before = self.nodes.get(node_name(node))
        after = self.nodes.upsert(node)
        if _became_usable(before, after):
            names = [after.name] + [a for a in (after.alias,) if a]
            if self.queue.wake(names):
                self._work.notify_all()

    def _node_delete(self, node: dict) -> None:
        with self._work:
            self.nodes.delete(node_name(node))


class _PendingPods:
    def __init__(self, scheduler: Scheduler) -> None:
        self.replace = scheduler._pending_replace
        self.upsert = scheduler._pending_upsert
        self.delete = scheduler._pending_delete


class _BoundPods:
    def __init__(self, scheduler: Scheduler) -> None:
        self.replace = scheduler._bound_replace
        self.upsert = scheduler._bound_upsert
        self.delete = scheduler._bound_delete


class _Nodes:
    def __init__(self, scheduler: Scheduler) -> None:
        self.replace = scheduler._nodes_replace
        self.upsert = scheduler._node_upsert
        self.delete = scheduler._node_delete
