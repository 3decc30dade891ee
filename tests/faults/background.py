"""Load a fault test keeps up while it breaks something: loops in daemon threads, from the start
of a `with` block to its end."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Background:
    """Runs each loop of loops() in a daemon thread for the length of a `with` block; the loops
    run until self._stop is set."""

    JOIN_TIMEOUT = 30.0

    def loops(self) -> list[Callable[[], None]]:
        raise NotImplementedError

    def __enter__(self):
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=loop, daemon=True) for loop in self.loops()]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.JOIN_TIMEOUT)
