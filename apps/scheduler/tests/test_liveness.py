"""/healthz's view of the scheduler's threads (Scheduler.dead_parts).

A thread not started yet is not dead. The server answers before
`Scheduler.start()` has started its 32 binding threads, and the informers can
list before the last of them starts: CI's loaded pipeline job once saw /readyz
200 and then /healthz 500 ("stopped: bind-N") from a healthy scheduler. A
kubelet would restart such a pod for nothing.
"""

from __future__ import annotations

import threading

from gpu_scheduler.scheduler.metrics import SchedulerMetrics
from gpu_scheduler.scheduler.runner import Scheduler, SchedulerConfig
from gpu_scheduler.scheduling import SharingPolicy


class Recorder:
    dropped = 0

    def event(self, *args, **kwargs) -> None:
        pass


def new_scheduler(workers: int = 3) -> Scheduler:
    config = SchedulerConfig("gpu-scheduler", None, SharingPolicy.WARN, "gpu-node-name", workers)
    return Scheduler(None, config, Recorder(), SchedulerMetrics(), lambda: True, None)


def test_threads_not_started_yet_are_not_dead():
    scheduler = new_scheduler()

    assert scheduler.dead_parts() == []


def test_a_binding_thread_that_ended_is_named():
    scheduler = new_scheduler()
    ended = scheduler._workers.threads[1]
    ended._target = lambda: None  # it returns at once, as a crashed loop would
    ended.start()
    ended.join(5)

    assert scheduler.dead_parts() == [ended.name]


def test_an_informer_thread_that_ended_is_named():
    scheduler = new_scheduler()
    informer = scheduler.informers[0]
    informer._thread = threading.Thread(target=lambda: None, name="ended")
    informer._thread.start()
    informer._thread.join(5)

    assert scheduler.dead_parts() == [f"informer {informer.name}"]
