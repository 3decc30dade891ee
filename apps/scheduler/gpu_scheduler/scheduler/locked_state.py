"""The scheduler's state behind the process's one lock.

SchedulerState (state.py) is single-threaded; every thread that reads or changes
it (the watches, the bind workers, the metrics scrape) takes this lock, and
makes its API calls outside it. The lock is also the condition the bind workers
wait on (workers.py), so a change that makes pods due wakes one of them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .state import SchedulerState


class LockedState:
    def __init__(self, state: SchedulerState) -> None:
        self.state = state
        self.lock = threading.Lock()
        # One pod that becomes due wakes one worker (notify, not notify_all): with 32
        # workers, waking them all for every watch event cost more CPU than the binding
        # itself (make bench). A worker that takes a pod and sees more due wakes the next one.
        self.work = threading.Condition(self.lock)

    def update(self, change: Callable[..., bool | None], *args: object) -> None:
        """Applies a change to the state under the lock; wakes the workers if pods became active."""
        with self.work:
            if change(*args):
                self.work.notify()

    # -- read by metrics ---------------------------------------------------------------------

    def queue_counts(self) -> dict[str, int]:
        with self.lock:
            return self.state.queue.counts()

    def gpus_held(self) -> dict[str, int]:
        with self.lock:
            return self.state.cache.ledger.held_per_node()

    def gpu_holders(self) -> list[tuple[str, str, str]]:
        with self.lock:
            return self.state.cache.ledger.held()

    def gang_counts(self) -> dict[str, int]:
        with self.lock:
            return self.state.gang_counts(time.time())
