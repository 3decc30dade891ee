"""The bind workers: threads bind-N, each taking the next due pod and running its attempt.

A worker takes a pod only while this replica leads and every cache has listed
once (as kube-scheduler waits for its caches to sync): deciding on a
half-loaded ledger could give away a held GPU. The state counts the attempts in
flight so that a stop can wait for them to end (the SIGTERM drain).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .state import SchedulerState

# Without leadership or synced caches a worker re-checks this often whether it may start.
IDLE_POLL_SECONDS = 0.5


class BindWorkers:
    def __init__(
        self,
        state: SchedulerState,
        count: int,
        synced: Callable[[], bool],
        attempt: Callable[[str, dict], None],
    ) -> None:
        self._state = state
        self._synced = synced
        self._attempt = attempt
        # Read by the workers under the state's lock (state.take); each change wakes them all.
        self._leading = False
        self._stopping = False
        self.threads = [threading.Thread(target=self._work_loop, name=f"bind-{i}", daemon=True) for i in range(count)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def dead(self) -> list[str]:
        """Threads that were started and have ended, unless the pool is stopping."""
        if self._stopping:
            return []
        return [t.name for t in self.threads if t.ident is not None and not t.is_alive()]

    def set_leading(self, leading: bool) -> None:
        self._leading = leading
        self._state.wake_workers()

    def stop(self, timeout: float) -> bool:
        """Takes no new pods; waits up to timeout for attempts in flight. True if all ended."""
        self._stopping = True
        self._state.wake_workers()
        return self._state.wait_idle(timeout)

    def _may_take(self) -> bool:
        return self._leading and self._synced()

    def _work_loop(self) -> None:
        while True:
            item = self._state.take(self._may_take, lambda: self._stopping, IDLE_POLL_SECONDS)
            if item is None:
                return
            uid, pod = item
            try:
                self._attempt(uid, pod)
            finally:
                self._state.attempt_ended()
