"""The bind workers: threads bind-N, each taking the next due pod and running its attempt.

A worker takes a pod only while this replica leads and every cache has listed
once (as kube-scheduler waits for its caches to sync): deciding on a
half-loaded ledger could give away a held GPU. The pool counts the attempts in
flight so that a stop can wait for them to end (the SIGTERM drain).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .locked_state import LockedState

# Without leadership or synced caches a worker re-checks this often whether it may start.
IDLE_POLL_SECONDS = 0.5


class BindWorkers:
    def __init__(
        self,
        locked: LockedState,
        count: int,
        synced: Callable[[], bool],
        attempt: Callable[[str, dict], None],
    ) -> None:
        self._state = locked.state
        # Workers wait on _work (LockedState's condition); stop() waits on _drained.
        self._work = locked.work
        self._drained = threading.Condition(locked.lock)
        self._synced = synced
        self._attempt = attempt
        self._leading = False
        self._stopping = False
        self._in_flight = 0
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
        with self._work:
            self._leading = leading
            self._work.notify_all()

    def stop(self, timeout: float) -> bool:
        """Takes no new pods; waits up to timeout for attempts in flight. True if all ended."""
        deadline = time.monotonic() + timeout
        with self._work:
            self._stopping = True
            self._work.notify_all()
            while self._in_flight and time.monotonic() < deadline:
                self._drained.wait(deadline - time.monotonic())
            return self._in_flight == 0

    def _next(self) -> tuple[str, dict] | None:
        """Blocks until a pod is due and we may bind; None when stopping."""
        with self._work:
            while not self._stopping:
                timeout = IDLE_POLL_SECONDS
                if self._leading and self._synced():
                    now = time.monotonic()
                    item = self._state.pop(now)
                    if item is not None:
                        self._in_flight += 1
                        if self._state.queue.has_active():
                            self._work.notify()
                        return item
                    due = self._state.queue.next_due()
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
            finally:
                # While pods wait in backoff, one waiting worker wakes to time the
                # earliest (this attempt may have set it, and this worker may take
                # another pod and be busy when it ends). Otherwise nobody needs waking.
                with self._work:
                    self._in_flight -= 1
                    if self._state.queue.next_due() is not None:
                        self._work.notify()
                    if self._stopping and not self._in_flight:
                        self._drained.notify_all()
