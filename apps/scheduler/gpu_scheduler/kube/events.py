"""Kubernetes Events about pods, sent in the background.

Events are the user's window into scheduling (`kubectl describe pod`), but
they must never slow binding: record() only puts the event on a bounded queue
and returns; sender threads post them. When the queue is full the event is
dropped and counted. A pod that keeps failing for the same reason gets one
Event whose series count grows (as kube-scheduler's events do), at most one
write per coalescing window, instead of a new Event per retry.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from gpu_scheduler.kube.client import ApiError, KubeClient
from gpu_scheduler.kube.times import micro_time

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
NOTE_MAX = 1024  # events.k8s.io/v1 validation limit for note
INSTANCE_MAX = 128  # ... and for reportingInstance
# A pod stuck for good is retried every minute (the backoff cap): one write
# per pod per five minutes keeps 10,000 stuck pods from loading etcd.
SERIES_WINDOW_SECONDS = 300.0
SERIES_TTL_SECONDS = 1800.0


@dataclass
class _Series:
    name: str
    count: int
    last_written: float
    last_seen: float


@dataclass(frozen=True)
class SeriesStep:
    """What to do with one occurrence: "create" a new Event, "patch" the
    existing one's series count, or "skip" (counted, written later)."""

    action: str
    name: str
    count: int


class EventCoalescer:
    """Decides, per (pod, reason, note), whether an occurrence is written.

    The first occurrence creates an Event; repeats within the window are only
    counted; the first repeat after the window patches the count. An entry not
    seen for the ttl starts over with a new Event (the old one has expired
    from the apiserver by then or is about to).
    """

    def __init__(self, window: float = SERIES_WINDOW_SECONDS, ttl: float = SERIES_TTL_SECONDS) -> None:
        self._window = window
        self._ttl = ttl
        self._series: dict[tuple[str, str, str], _Series] = {}

    def observe(self, pod_key: str, reason: str, note: str, now: float, new_name: str) -> SeriesStep:
        key = (pod_key, reason, note)
        series = self._series.get(key)
        if series is None or now - series.last_seen > self._ttl:
            self._series[key] = _Series(new_name, 1, now, now)
            return SeriesStep("create", new_name, 1)
        series.count += 1
        series.last_seen = now
        if now - series.last_written < self._window:
            return SeriesStep("skip", series.name, series.count)
        series.last_written = now
        return SeriesStep("patch", series.name, series.count)

    def forget(self, pod_key: str) -> None:
        for key in [k for k in self._series if k[0] == pod_key]:
            del self._series[key]

    def __len__(self) -> int:
        return len(self._series)


def event_body(
    pod: dict,
    *,
    name: str,
    event_type: str,
    reason: str,
    action: str,
    note: str,
    controller: str,
    instance: str,
    now: float,
) -> dict:
    metadata = pod["metadata"]
    regarding = {"apiVersion": "v1", "kind": "Pod", "namespace": metadata["namespace"], "name": metadata["name"]}
    if metadata.get("uid"):
        regarding["uid"] = metadata["uid"]
    if metadata.get("resourceVersion"):
        regarding["resourceVersion"] = metadata["resourceVersion"]
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": metadata["namespace"]},
        "eventTime": micro_time(now),
        "reportingController": controller,
        "reportingInstance": instance[:INSTANCE_MAX],
        "action": action,
        "reason": reason,
        "type": event_type,
        "note": note[:NOTE_MAX],
        "regarding": regarding,
    }


class EventRecorder:
    """Queues Events and posts them from background threads; never blocks."""

    def __init__(
        self,
        client: KubeClient,
        *,
        controller: str,
        instance: str,
        senders: int = 2,
        queue_size: int = 4096,
        window: float = SERIES_WINDOW_SECONDS,
    ) -> None:
        self._client = client
        self._controller = controller
        self._instance = instance
        self._queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self._coalescer = EventCoalescer(window)
        self._lock = threading.Lock()
        self.dropped = 0
        self.failed = 0
        self._threads = [
            threading.Thread(target=self._send_loop, name=f"events-{i}", daemon=True) for i in range(senders)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def record(
        self, pod: dict, event_type: str, reason: str, action: str, note: str, *, coalesce: bool = False
    ) -> None:
        now = time.time()
        metadata = pod["metadata"]
        name = f"{metadata['name']}.{time.time_ns():x}"
        step = SeriesStep("create", name, 1)
        if coalesce:
            with self._lock:
                step = self._coalescer.observe(f"{metadata['namespace']}/{metadata['name']}", reason, note, now, name)
            if step.action == "skip":
                return
        body = event_body(
            pod,
            name=step.name,
            event_type=event_type,
            reason=reason,
            action=action,
            note=note,
            controller=self._controller,
            instance=self._instance,
            now=now,
        )
        try:
            self._queue.put_nowait((step, body, now))
        except queue.Full:
            self.dropped += 1

    def forget(self, pod_key: str) -> None:
        """The pod is placed or gone: its next failure starts a fresh Event."""
        with self._lock:
            self._coalescer.forget(pod_key)

    def flush(self, timeout: float) -> bool:
        """Waits up to timeout for queued Events to be sent; True if all were."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._queue.unfinished_tasks

    def _send_loop(self) -> None:
        while True:
            step, body, now = self._queue.get()
            try:
                self._send(step, body, now)
            except ApiError as err:
                self.failed += 1
                log.debug("event %s/%s not written: %s", body["metadata"]["namespace"], body["metadata"]["name"], err)
            except Exception:  # a sender thread must outlive any single bad event
                self.failed += 1
                log.exception("writing event failed")
            finally:
                self._queue.task_done()

    def _send(self, step: SeriesStep, body: dict, now: float) -> None:
        namespace = body["metadata"]["namespace"]
        collection = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        if step.action == "patch":
            patch = {"series": {"count": step.count, "lastObservedTime": micro_time(now)}}
            status, _ = self._client.request(
                "PATCH", f"{collection}/{step.name}", body=patch, content_type="application/merge-patch+json"
            )
            if status < 300:
                return
            if status != 404:
                raise ApiError("PATCH", f"{collection}/{step.name}", status)
            # The first Event was dropped or expired: write it anew.
        # The answer (the stored Event) is not read: only whether it was stored.
        status, answer = self._client.request("POST", collection, body=body)
        if status >= 300:
            raise ApiError("POST", collection, status, answer)
