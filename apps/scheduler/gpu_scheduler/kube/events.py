"""Kubernetes Events about pods, sent in the background.

Events are the user's window into scheduling (`kubectl describe pod`), but
they must never slow binding: record() only puts the event on a bounded queue
and returns; sender threads post them. When the queue is full the event is
dropped and counted. A pod that keeps failing for the same reason gets one
Event whose series count grows (as kube-scheduler's events do), at most one
write per coalescing window, instead of a new Event per retry.

An Event the apiserver could not take (no answer, a 5xx, 429) is sent again
after a backoff, a bounded number of times; meanwhile it waits aside, so the
Events behind it go on. One it refused (any other 4xx) is not sent again.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

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
# Sending an Event again. client-go's recorder tries 12 times, 10 s apart (two minutes), and
# holds the Events behind it meanwhile. Here a retried Event waits aside and gives up sooner:
# 7 tries, the waits doubling from 0.5 s to at most 8 s (23.5 s in all), two to three times
# the 6-9 s kube-apiserver took to answer again after a kill -9 in the fault tests
# (docs/faults.md). An Event is worth less the later it comes, and a long outage's retries
# would otherwise fill the room kept for them (the queue's size) and crowd out newer Events.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 8.0
MAX_TRIES = 7


def retry_delay(failed_tries: int) -> float:
    """The wait before the next try of an Event that failed failed_tries times."""
    return min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** (failed_tries - 1))


def worth_retrying(status: int) -> bool:
    """No answer (0), the apiserver failing (5xx) or asking us to slow down (429). Any other
    4xx is the apiserver refusing this Event: sending it again would be refused again."""
    return status == 0 or status == 429 or status >= 500


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


@dataclass
class _Outgoing:
    step: SeriesStep
    body: dict
    now: float  # when it happened (wall clock): the series' lastObservedTime
    failed_tries: int = 0


@dataclass(order=True)
class _Retry:
    due: float  # monotonic
    order: int
    event: _Outgoing = field(compare=False)


class EventRecorder:
    """Queues Events and posts them from background threads; never blocks.

    Counters (read by the metrics): sent, retried (each try after the first), dropped (no
    room: the queue, or the retries waiting, full), failed (refused, out of tries, or an
    error of ours).
    """

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
        # Events waiting to be sent again, earliest first; as many as the queue holds.
        self._retries: list[_Retry] = []
        self._retries_max = queue_size
        self._retry_order = itertools.count()
        self._sending = threading.Lock()  # the retries waiting and the counters
        self._outstanding = 0  # recorded and not yet sent or given up: what flush() waits for
        self.sent = 0
        self.retried = 0
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
        with self._sending:
            self._outstanding += 1
        try:
            self._queue.put_nowait(_Outgoing(step, body, now))
        except queue.Full:
            self._finish(dropped=True)

    def counts(self) -> dict[str, int]:
        """What became of the Events so far, for the metrics."""
        return {"sent": self.sent, "retried": self.retried, "dropped": self.dropped, "failed": self.failed}

    def forget(self, pod_key: str) -> None:
        """The pod is placed or gone: its next failure starts a fresh Event."""
        with self._lock:
            self._coalescer.forget(pod_key)

    def flush(self, timeout: float) -> bool:
        """Waits up to timeout for recorded Events to be sent (or given up); True if all were."""
        deadline = time.monotonic() + timeout
        while self._outstanding and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._outstanding

    def _finish(self, *, sent: bool = False, dropped: bool = False) -> None:
        """One recorded Event is done with: sent, dropped, or else failed."""
        with self._sending:
            self._outstanding -= 1
            if sent:
                self.sent += 1
            elif dropped:
                self.dropped += 1
            else:
                self.failed += 1

    def _send_loop(self) -> None:
        while True:
            event = self._next()
            try:
                self._deliver(event)
            except Exception:  # a sender thread must outlive any single bad event
                log.exception("writing event failed")
                self._finish()

    def _next(self) -> _Outgoing:
        """The next Event to send: a retry that is due, else a new one; waits for either."""
        while True:
            with self._sending:
                wait = self._retries[0].due - time.monotonic() if self._retries else None
                if wait is not None and wait <= 0:
                    return heapq.heappop(self._retries).event
            try:
                return self._queue.get(timeout=wait)
            except queue.Empty:
                continue  # a retry is due

    def _deliver(self, event: _Outgoing) -> None:
        status, answer = self._send(event.step, event.body, event.now)
        if 200 <= status < 300:
            self._finish(sent=True)
            return
        event.failed_tries += 1
        if worth_retrying(status) and event.failed_tries < MAX_TRIES:
            if not self._retry_later(event):
                self._finish(dropped=True)  # no room left to wait in
            return
        metadata = event.body["metadata"]
        log.debug(
            "event %s/%s not written (%d tries): HTTP %s %s",
            metadata["namespace"],
            metadata["name"],
            event.failed_tries,
            status,
            answer,
        )
        self._finish()

    def _retry_later(self, event: _Outgoing) -> bool:
        """Puts the Event aside until its next try is due; False if there is no room."""
        with self._sending:
            if len(self._retries) >= self._retries_max:
                return False
            due = time.monotonic() + retry_delay(event.failed_tries)
            heapq.heappush(self._retries, _Retry(due, next(self._retry_order), event))
            self.retried += 1
            return True

    def _send(self, step: SeriesStep, body: dict, now: float) -> tuple[int, str]:
        """Writes one occurrence; returns the apiserver's status (0: no answer) and, when it
        is not a success, what it said."""
        namespace = body["metadata"]["namespace"]
        collection = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
        try:
            if step.action == "patch":
                patch = {"series": {"count": step.count, "lastObservedTime": micro_time(now)}}
                status, answer = self._client.request(
                    "PATCH", f"{collection}/{step.name}", body=patch, content_type="application/merge-patch+json"
                )
                if status != 404:
                    return status, _refusal("PATCH", collection, status, answer)
                # The first Event was dropped or expired: write it anew.
            # The answer (the stored Event) is not read: only whether it was stored.
            status, answer = self._client.request("POST", collection, body=body)
        except ApiError as err:
            return 0, err.message
        if status == 409:
            # An Event of this name exists: an earlier try of this one whose answer was lost,
            # or (a series) the Event it continues. Either way it is written.
            return 200, ""
        return status, _refusal("POST", collection, status, answer)


def _refusal(method: str, path: str, status: int, answer: bytes) -> str:
    """What the apiserver said when it did not take an Event ("" when it did)."""
    return "" if status < 300 else ApiError(method, path, status, answer).message
