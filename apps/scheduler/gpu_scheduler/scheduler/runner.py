"""One scheduler assembled from its parts, started and stopped as one.

Threads:
  informer-pods             every pod not finished: this scheduler's unbound pods -> the queue,
                            pods on nodes, of any scheduler -> node usage and the GPU ledger
  informer-nodes            nodes -> the node index
  informer-persistentvolumeclaims, -persistentvolumes, -storageclasses, -csinodes
                            what the volume filters read; a change wakes the pods waiting on it
  bind-N                    take a pod off the queue, decide, bind, report
  events-N, pod-conditions  Events and PodScheduled conditions, never in a bind's way
All state lives in one SchedulerState (state.py), which owns its lock; a decision
runs under it (microseconds), the API calls do not.

The parts, one job each: watches.py (the caches and their handlers), workers.py
(the bind workers and their gate), schedule_one.py (one pod's way, phase by
phase), announce.py (what an outcome tells people). This module builds them around one state, starts and
stops them, and answers for them to /healthz, /readyz and the metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu_scheduler.kube.binder import BIND_TIMEOUT_SECONDS
from gpu_scheduler.kube.client import KubeClient
from gpu_scheduler.kube.events import EventRecorder
from gpu_scheduler.kube.pod_status import PodConditionWriter
from gpu_scheduler.scheduling import SharingPolicy
from gpu_scheduler.scheduling.decide import FAILOVER_AFTER_SECONDS
from gpu_scheduler.scheduling.gangs import GANG_TIMEOUT_SECONDS

from .announce import Announcer
from .metrics import SchedulerMetrics
from .queue import INITIAL_BACKOFF_SECONDS, MAX_BACKOFF_SECONDS
from .schedule_one import ScheduleOne
from .state import SchedulerState
from .watches import Watches
from .workers import BindWorkers


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
    gang_timeout: float = GANG_TIMEOUT_SECONDS
    failover_after: float = FAILOVER_AFTER_SECONDS


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
        self._metrics = metrics
        self.state = SchedulerState(
            config.alias_label,
            config.policy,
            config.initial_backoff,
            config.max_backoff,
            config.gang_timeout,
            failover_after=config.failover_after,
        )
        state = self.state
        announcer = Announcer(recorder, conditions, metrics)
        self._watches = Watches(client, state, announcer, config.scheduler_name, config.namespace, config.alias_label)
        self.informers = self._watches.informers
        self._schedule_one = ScheduleOne(
            client, state, announcer, metrics, may_bind, self._watches.relist_for_doubts, config.bind_timeout
        )
        self._workers = BindWorkers(state, config.workers, self._watches.synced, self._schedule_one)
        metrics.watch_state(
            state.queue_counts,
            state.gpus_held,
            state.gpu_holders,
            lambda: recorder.dropped,
            self._watches.relists,
            self._watches.watch_silences,
        )
        metrics.watch_gangs(lambda: state.gang_counts(time.time()))

    def start(self) -> None:
        self._watches.start()
        self._workers.start()

    def wait_synced(self, timeout: float) -> bool:
        return self._watches.wait_synced(timeout)

    def not_current(self) -> list[str]:
        """What keeps the caches from being current (for /readyz); [] when they are."""
        return self._watches.not_current()

    def dead_parts(self) -> list[str]:
        """Threads that were started and have ended (for /healthz). One not started yet is
        not dead: the server answers while start() is still starting them, and the caches
        can list before the last binding thread starts."""
        return self._watches.dead() + self._workers.dead()

    def set_leading(self, leading: bool) -> None:
        self._workers.set_leading(leading)
        self._metrics.leader.set(1 if leading else 0)

    def stop(self, timeout: float) -> bool:
        """Takes no new pods; waits up to timeout for attempts in flight. True if all ended."""
        drained = self._workers.stop(timeout)
        self._watches.stop()
        return drained
