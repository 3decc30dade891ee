"""bench.pods.BindWatcher: a watch cut mid-chunk is resumed, not the end of the watcher.

kube-apiserver closes a watch whose reader falls behind, and stop() cuts the connection;
either can land mid-chunk, where http.client raises IncompleteRead (an HTTPException, not an
OSError): seen in a burst of `make bench BENCH_PROFILE=1`, where the watcher's thread died
with it. A dead watcher sees no more binds, so every later pod would look unbound.
"""

from __future__ import annotations

import http.client
import threading
import time

from bench.pods import BindWatcher


def pod(name: str, node: str = "", version: str = "1") -> dict:
    return {"metadata": {"name": name, "resourceVersion": version}, "spec": {"nodeName": node}}


class CutOnceApi:
    """The watcher's view of the apiserver: a list, then a watch cut mid-chunk, then one that
    delivers the binding."""

    def __init__(self) -> None:
        self.watches = 0
        self.delivered = threading.Event()

    def get(self, path: str) -> dict:
        return {"items": [pod("p-0")], "metadata": {"resourceVersion": "1"}}

    def connect(self, timeout: float):
        return None

    def watch(self, conn, path: str, version: str):
        self.watches += 1
        if self.watches == 1:
            yield {"type": "MODIFIED", "object": pod("p-1", version="2")}
            raise http.client.IncompleteRead(b"")
        yield {"type": "MODIFIED", "object": pod("p-0", node="node1", version="3")}
        self.delivered.set()
        while True:  # an open watch with nothing more to say
            time.sleep(0.05)
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "3"}}}


def test_a_watch_cut_mid_chunk_is_resumed_and_later_binds_are_seen():
    api = CutOnceApi()
    watcher = BindWatcher(api, "gpu-bench")
    watcher.start()
    try:
        assert api.delivered.wait(5), f"no watch after the cut one ({api.watches} watches)"
        deadline = time.monotonic() + 5
        while "p-0" not in watcher.bound_at and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "p-0" in watcher.bound_at
        assert set(watcher.first_seen) == {"p-0", "p-1"}
        assert isinstance(watcher.error, http.client.IncompleteRead)
        assert watcher._thread.is_alive()
    finally:
        watcher._stopping = True
