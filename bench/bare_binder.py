"""A bare binder in Python: bind pending pods with no decision at all.

Run as its own process (`python -m bench.bare_binder`), like a scheduler: it
watches the pending pods of one schedulerName, in every namespace as the
schedulers it is compared with do, and posts each one's binding (in the pod's
namespace) to the node its affinity pins it to. With as many threads as gpu-scheduler has
bind workers and a Python HTTP client, it is what gpu-scheduler could reach if
its own work cost nothing. With the Go binder (bench/tools/ceiling) it makes
the ceiling: the faster of the two in a round.

No decision, but no pod lost either: a binding that failed without proving
the pod has a node (no answer, 429, 5xx, or a 409 that is not "already
assigned": etcd failing mid-write answers 409 too) is posted again after
RETRY_SECONDS, as any scheduler would. A 404 (the pod is gone) ends it.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import threading
import time
from urllib.parse import quote

from .kubeapi import ApiError, KubeApi
from .workload import pinned_node

READY_LINE = "bare binder ready"
RETRY_SECONDS = 0.1
# How the apiserver says that a pod has a node already (the only 409 that means "done").
ALREADY_ASSIGNED = b"is already assigned to node"


def finished(status: int, body: bytes) -> bool:
    """Whether a binding's answer ends the pod's binding: bound, already bound, or gone."""
    return status in (200, 201, 404) or (status == 409 and ALREADY_ASSIGNED in body)


def binding(name: str, uid: str, node: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
    ).encode()


class BareBinder:
    def __init__(self, api: KubeApi, scheduler_name: str, threads: int) -> None:
        self._api = api
        self.pods_path = "/api/v1/pods"
        self._selector = f"spec.schedulerName={scheduler_name},spec.nodeName="
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._queued: set[str] = set()  # uids, so a MODIFIED event does not bind a pod twice
        self._threads = threads
        self.failures = 0

    def offer(self, pod: dict) -> None:
        meta = pod["metadata"]
        if meta["uid"] not in self._queued and not pod["spec"].get("nodeName"):
            self._queued.add(meta["uid"])
            self._queue.put((meta["namespace"], meta["name"], meta["uid"], pinned_node(pod)))

    def next_pod(self) -> tuple[str, str, str, str]:
        """(namespace, name, uid, node) of the next pod to bind; waits for one."""
        return self._queue.get()

    def bind(self, item: tuple[str, str, str, str]) -> None:
        """Posts the pod's binding; one that did not end it is queued again after RETRY_SECONDS."""
        namespace, name, uid, node = item
        path = f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding"
        try:
            status, data = self._api.request("POST", path, binding(name, uid, node))
        except OSError as err:
            status, data = 0, str(err).encode()
        if not finished(status, data):
            self.failures += 1
            text = f"bind {namespace}/{name} -> {node}: HTTP {status} {data[:200]!r}; again"
            print(text, file=sys.stderr, flush=True)
            time.sleep(RETRY_SECONDS)
            self._queue.put(item)

    def _bind_loop(self) -> None:
        while True:
            self.bind(self.next_pod())

    def run(self) -> None:
        for i in range(self._threads):
            threading.Thread(target=self._bind_loop, name=f"bind-{i}", daemon=True).start()
        announced = False
        while True:
            try:
                listing = self._api.get(self.pods_path, fieldSelector=self._selector)
                for pod in listing["items"]:
                    self.offer(pod)
                version = listing["metadata"]["resourceVersion"]
                conn = self._api.connect(timeout=330)
                watch = self._api.watch(conn, self.pods_path, version, fieldSelector=self._selector)
                if not announced:
                    print(READY_LINE, flush=True)
                    announced = True
                for event in watch:
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.offer(event["object"])
            except (OSError, ApiError, ValueError) as err:
                print(f"watch ended ({err}); listing again", file=sys.stderr, flush=True)
                time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_binder", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--scheduler-name", required=True)
    parser.add_argument("--threads", type=int, default=16, help="bindings posted at once")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    BareBinder(KubeApi(args.kubeconfig), args.scheduler_name, args.threads).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
