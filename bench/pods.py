"""A burst of pods: a concurrent creator, and a watch that sees each pod bound.

Latency of a pod = the moment the watch sees spec.nodeName set minus the
moment its create request was sent, both on this process's monotonic clock.
The scheduler's own logs and metrics are never the source of a figure here.
"""

from __future__ import annotations

import http.client
import json
import socket
import sys
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .kubeapi import ApiError, KubeApi
from .stats import latency_summary

CREATE_ATTEMPTS = 5
# Answers worth another try: throttled, or the apiserver/webhook was busy.
RETRY_STATUSES = {429, 500, 502, 503, 504}
PROGRESS_SECONDS = 2.0


class BindWatcher:
    """Watches the pods of one namespace; records when each is first seen and first seen bound."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self._api = api
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        self.first_seen: dict[str, float] = {}
        self.bound_at: dict[str, float] = {}
        self._stopping = False
        self._conn = None
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)
        self.error: Exception | None = None

    def start(self) -> None:
        self._thread.start()
        if not self._synced.wait(30):
            raise TimeoutError(f"could not list {self._path} within 30s: {self.error}")

    def stop(self) -> None:
        self._stopping = True
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(10)

    def _see(self, pod: dict, now: float) -> None:
        name = pod["metadata"]["name"]
        self.first_seen.setdefault(name, now)
        if pod.get("spec", {}).get("nodeName"):
            self.bound_at.setdefault(name, now)

    def _run(self) -> None:
        while not self._stopping:
            try:
                listing = self._api.get(self._path)
                now = time.monotonic()
                for pod in listing["items"]:
                    self._see(pod, now)
                version = listing["metadata"]["resourceVersion"]
                self._synced.set()
                while not self._stopping:
                    self._conn = self._api.connect(timeout=330)
                    for event in self._api.watch(self._conn, self._path, version):
                        now = time.monotonic()
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise ApiError("WATCH", self._path, obj.get("code", 0), json.dumps(obj).encode())
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._see(obj, now)
            except (OSError, http.client.HTTPException, ApiError, ValueError) as err:
                # 410 Gone or a cut connection (stop() cuts it too; mid-chunk, http.client says
                # IncompleteRead, not OSError): list again (already-seen pods keep their times).
                self.error = err
                if not self._stopping:
                    time.sleep(0.2)


@dataclass
class Creation:
    sent_at: float
    answered_at: float = 0.0
    status: int = 0
    message: str = ""


@dataclass
class Creator:
    """Creates pods from bodies serialised in advance, `threads` requests at a time."""

    api: KubeApi
    namespace: str
    threads: int
    created: dict[str, Creation] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    retry_reasons: list[str] = field(default_factory=list)

    def start(self, pods: list[dict]) -> None:
        bodies = [(p["metadata"]["name"], json.dumps(p, separators=(",", ":")).encode()) for p in pods]
        threading.Thread(target=self._run, args=(bodies,), name="creator", daemon=True).start()

    def _run(self, bodies: list[tuple[str, bytes]]) -> None:
        path = f"/api/v1/namespaces/{self.namespace}/pods"
        with ThreadPoolExecutor(self.threads, thread_name_prefix="create") as pool:
            for _ in pool.map(lambda item: self._create(path, *item), bodies):
                pass
        self.done.set()

    def _create(self, path: str, name: str, body: bytes) -> None:
        creation = Creation(sent_at=time.monotonic())
        self.created[name] = creation
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            try:
                status, data = self.api.request("POST", path, body)
            except OSError as err:
                status, data = 0, str(err).encode()
            creation.status = status
            if status not in RETRY_STATUSES and status != 0:
                break
            self.retry_reasons.append(f"{name}: HTTP {status} {data[:200].decode('utf-8', 'replace')}")
            time.sleep(0.05 * attempt)
        creation.answered_at = time.monotonic()
        if status != 201:
            creation.message = data[:300].decode("utf-8", "replace")

    def succeeded(self) -> list[str]:
        return [name for name, c in self.created.items() if c.status == 201]

    def failures(self) -> list[str]:
        return [
            f"{name}: HTTP {c.status} {c.message}"
            for name, c in self.created.items()
            if c.answered_at and c.status != 201
        ]


@dataclass
class BurstResult:
    runner: str
    pods: int
    created: int
    bound: int
    seconds: float  # first create sent -> last bind seen
    create_seconds: float  # first create sent -> last create answered
    latency: dict[str, float]  # create sent -> bind seen, seconds
    create_latency: dict[str, float]  # create sent -> create answered (admission included), seconds
    seen_latency: dict[str, float]  # pod first seen by the watch -> bind seen, seconds
    create_errors: list[str]
    create_retries: list[str]  # why create requests were sent again (429/5xx, e.g. a webhook timeout)
    complete: bool
    unbound: tuple[str, ...] = ()  # pods created and never seen bound

    @property
    def pods_per_second(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else float("nan")

    def to_json(self) -> dict:
        return {
            "runner": self.runner,
            "pods": self.pods,
            "created": self.created,
            "bound": self.bound,
            "seconds": self.seconds,
            "create_seconds": self.create_seconds,
            "pods_per_second": self.pods_per_second,
            "latency_s": self.latency,
            "create_latency_s": self.create_latency,
            "seen_to_bound_s": self.seen_latency,
            "create_errors": len(self.create_errors),
            "create_error_samples": self.create_errors[:3],
            "create_retries": len(self.create_retries),
            "create_retry_samples": self.create_retries[:3],
            "complete": self.complete,
        }


def progress(label: str, text: str) -> None:
    print(f"    {label}: {text}", file=sys.stderr, flush=True)


def wait_until_bound(
    watcher: BindWatcher, names: Iterable[str], timeout: float, label: str, creator: Creator | None = None
) -> bool:
    """Waits until every named pod is seen bound; prints a counter meanwhile.

    With a creator, waits for the pods it did create once it is done (a pod
    whose creation failed is counted in its errors, not waited for).
    """
    wanted = set(names)
    started = time.monotonic()
    last_print = 0.0
    settled = creator is None
    while True:
        creating = not settled and not creator.done.is_set()
        if not settled and not creating:
            wanted, settled = set(creator.succeeded()), True
        bound = sum(1 for name in wanted if name in watcher.bound_at)
        elapsed = time.monotonic() - started
        if bound == len(wanted) and not creating:
            progress(label, f"bound {bound}/{len(wanted)} in {elapsed:.1f}s")
            return True
        if elapsed > timeout:
            progress(label, f"TIMEOUT after {timeout:.0f}s: bound {bound}/{len(wanted)}")
            return False
        if elapsed - last_print >= PROGRESS_SECONDS:
            last_print = elapsed
            made = f"created {len(creator.created)}/{len(wanted)}, " if creating else ""
            progress(label, f"{made}bound {bound}/{len(wanted)} ({elapsed:.0f}s)")
        time.sleep(0.05)


def run_burst(api: KubeApi, namespace: str, runner: str, pods: list[dict], threads: int, timeout: float) -> BurstResult:
    """Creates the pods concurrently and waits until they are all bound (or the timeout)."""
    watcher = BindWatcher(api, namespace)
    watcher.start()
    creator = Creator(api, namespace, threads)
    try:
        creator.start(pods)
        complete = wait_until_bound(watcher, [p["metadata"]["name"] for p in pods], timeout, runner, creator)
    finally:
        watcher.stop()
    return burst_result(
        runner,
        len(pods),
        creator.created,
        watcher.first_seen,
        watcher.bound_at,
        creator.failures(),
        creator.retry_reasons,
        complete,
    )


def burst_result(
    runner: str,
    pods: int,
    created: dict[str, Creation],
    first_seen: dict[str, float],
    bound_at: dict[str, float],
    failures: list[str],
    retries: list[str],
    complete: bool,
) -> BurstResult:
    ok = {name: c for name, c in created.items() if c.status == 201}
    first_sent = min((c.sent_at for c in created.values()), default=0.0)
    bound = {name: bound_at[name] for name in ok if name in bound_at}
    last_bound = max(bound.values(), default=first_sent)
    last_answer = max((c.answered_at for c in created.values()), default=first_sent)
    return BurstResult(
        runner=runner,
        pods=pods,
        created=len(ok),
        bound=len(bound),
        seconds=last_bound - first_sent,
        create_seconds=last_answer - first_sent,
        latency=latency_summary([t - ok[name].sent_at for name, t in bound.items()]),
        create_latency=latency_summary([c.answered_at - c.sent_at for c in ok.values()]),
        seen_latency=latency_summary([t - first_seen[name] for name, t in bound.items()]),
        create_errors=failures,
        create_retries=retries,
        complete=complete,
        unbound=tuple(sorted(name for name in ok if name not in bound)),
    )
