"""When a list+watch cache counts as current: the informer's loop against a fake apiserver.

Issue 16, point 5: a watch used to count as working as soon as it opened, so one that opened
and then said nothing reset the failure clock and the backoff on every cycle, and /readyz
stayed 200 for ever. It counts from its first event or bookmark now.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager

import pytest
from gpu_scheduler.kube import informer as informer_module
from gpu_scheduler.kube.client import ApiError
from gpu_scheduler.kube.informer import STALE_AFTER_SECONDS, Informer
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

START = 1000.0
BOOKMARK = {"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}}}


class FakeClock:
    """Stands in for the time module in the informer: time passes only when the fake apiserver says."""

    def __init__(self) -> None:
        self.now = START

    def monotonic(self) -> float:
        return self.now


class FakeStream:
    """One watch's lines. Once they are sent it stays silent for cut_after seconds (on the fake
    clock) and breaks as urllib3's read timeout or a dropped connection breaks a real one:
    ApiError with status 0."""

    def __init__(self, clock: FakeClock, lines, cut_after: float | None) -> None:
        self._clock = clock
        self._lines = lines
        self._cut_after = cut_after

    def __iter__(self):
        yield from self._lines
        if self._cut_after is not None:
            self._clock.now += self._cut_after
            raise ApiError("GET", "/api/v1/nodes", 0, "read timed out")

    def interrupt(self) -> None:
        pass


class FakeApiserver:
    """Lists an empty set at once; serves one scripted watch per call (its lines), each cut by
    the read timeout or, if not cut, ended by the server; stops the informer when the scripts
    run out. At each watch's opening it notes what the informer would tell /readyz then."""

    def __init__(self, clock: FakeClock, watches: list, cut_after: float | None, lists: list[bool]) -> None:
        self.clock = clock
        self.watches = list(watches)
        self.cut_after = cut_after
        self.lists = list(lists)  # after the first list: True answers, False fails (10 s later)
        self.informer: Informer | None = None
        self.readiness_at_each_open: list[tuple[float, str | None]] = []
        self.readiness_at_each_list: list[tuple[float, str | None]] = []
        self.listed = 0

    def get(self, path: str, query: dict[str, str]) -> dict:
        self.listed += 1
        if self.listed > 1:
            self.readiness_at_each_list.append((self.clock.now - START, self.informer.current()))
            if not self.lists:
                self.informer.stop()
            elif not self.lists.pop(0):
                self.clock.now += 10
                raise ApiError("GET", path, 503, "the apiserver cannot answer")
        return {"items": [], "metadata": {"resourceVersion": "1"}}

    @contextmanager
    def stream(self, path: str, query: dict[str, str], read_timeout: float):
        informer = self.informer
        self.readiness_at_each_open.append((self.clock.now - START, informer.current()))
        if not self.watches:
            informer.stop()
            yield FakeStream(self.clock, [], cut_after=None)
            return
        yield FakeStream(self.clock, self.watches.pop(0), self.cut_after)


class NullHandler:
    def replace(self, objects, listed_at) -> None:
        pass

    def upsert(self, obj) -> None:
        pass

    def delete(self, obj) -> None:
        pass


@pytest.fixture
def fake_apiserver(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(informer_module, "time", clock)
    # Real pauses between attempts, kept short: 1 ms doubling.
    monkeypatch.setattr(informer_module, "ERROR_BACKOFF_INITIAL", 0.001)
    # Resumed watches keep the whole read timeout unless a test says otherwise.
    monkeypatch.setattr(informer_module, "RECOVERY_READ_TIMEOUT", 1000.0)

    def make(
        watches: list, read_timeout: float, cut_after: float | None = None, lists: list[bool] = ()
    ) -> tuple[Informer, FakeApiserver]:
        apiserver = FakeApiserver(clock, watches, cut_after, list(lists) or [True] * 100)
        informer = Informer(apiserver, "/api/v1/nodes", NullHandler(), dict, name="nodes")
        informer.read_timeout = read_timeout
        apiserver.informer = informer
        return informer, apiserver

    return make


def run_until_the_scripts_end(informer: Informer) -> None:
    informer.start()
    deadline = time.monotonic() + 10
    while informer.alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not informer.alive(), "the informer did not stop when the fake apiserver's scripts ran out"


def retry_delays(caplog) -> list[float]:
    """The pause before each retry: the delay the informer's warning states ("retrying in %.1fs")."""
    return [record.args[1] for record in caplog.records if "retrying in" in record.msg]


def test_a_watch_that_opens_and_says_nothing_keeps_failing_with_a_growing_backoff(fake_apiserver, caplog):
    # Eight watches, each opened, silent, and cut 5 s later (before the read timeout).
    informer, apiserver = fake_apiserver([[] for _ in range(8)], read_timeout=90.0, cut_after=5.0)
    run_until_the_scripts_end(informer)

    # The first cut is at 5 s; /readyz says so once STALE_AFTER_SECONDS (20 s) have passed since.
    assert STALE_AFTER_SECONDS == 20
    assert [at for at, _ in apiserver.readiness_at_each_open] == [0, 5, 10, 15, 20, 25, 30, 35, 40]
    reported = [(at, problem) for at, problem in apiserver.readiness_at_each_open if problem]
    assert [at for at, _ in reported] == [30, 35, 40]
    assert reported[-1][1] == "nodes: list/watch failing for 35s (GET /api/v1/nodes: HTTP 0: read timed out)"
    assert retry_delays(caplog) == pytest.approx([0.001 * 2**i for i in range(8)])


def test_a_watch_that_delivers_a_bookmark_before_it_is_cut_counts_as_working_again(fake_apiserver, caplog):
    # Four silent watches cut after 10 s, then one that delivers a bookmark before it is cut,
    # then a silent one again.
    bookmark = [json.dumps(BOOKMARK).encode() + b"\n"]
    informer, apiserver = fake_apiserver([[], [], [], [], bookmark, []], read_timeout=90.0, cut_after=10.0)
    run_until_the_scripts_end(informer)

    # Failing since the first cut (10 s) when the bookmark's watch opened; the bookmark proves the
    # watch works, so the failure clock starts afresh at the next cut (50 s), and so does the backoff.
    readiness = dict(apiserver.readiness_at_each_open)
    assert readiness[40] == "nodes: list/watch failing for 30s (GET /api/v1/nodes: HTTP 0: read timed out)"
    assert readiness[50] is None and readiness[60] is None
    assert retry_delays(caplog) == pytest.approx([0.001, 0.002, 0.004, 0.008, 0.001, 0.002])
    assert informer.resource_version == "7"
    assert informer.seconds_since_last_event() == 20  # the bookmark came at 40 s; it is 60 s now


def test_a_watch_quiet_for_the_whole_read_timeout_is_followed_by_a_list_which_decides(fake_apiserver, caplog):
    # A resource that does not change gets no bookmark from a kube-apiserver whose etcd sends no
    # progress notifications: its watch is quiet until the read timeout (5 s) cuts it. The list
    # that follows tells a quiet resource (it answers: the cache is current) from a dead
    # apiserver (it fails: the failure clock runs, the backoff grows).
    informer, apiserver = fake_apiserver(
        [[], [], []], read_timeout=5.0, cut_after=5.0, lists=[True, False, False, False, False, True]
    )
    run_until_the_scripts_end(informer)

    assert apiserver.readiness_at_each_open == [(0, None), (5, None), (50, None), (55, None)]
    # Each failed list answers 10 s after it was sent; the failure clock starts at the first
    # answer (20 s) and /readyz reports it once STALE_AFTER_SECONDS have passed.
    assert apiserver.readiness_at_each_list[:6] == [
        (5, None),  # quiet: listed, and it answered
        (10, None),  # quiet again: listed; it fails from here
        (20, None),
        (30, None),
        (40, None),
        (50, "nodes: list/watch failing for 30s (GET /api/v1/nodes: HTTP 503: the apiserver cannot answer)"),
    ]
    assert informer.relists["quiet"] == 3
    assert retry_delays(caplog) == pytest.approx([0.001, 0.002, 0.004, 0.008])


def test_after_a_failure_a_quiet_resumed_watch_is_followed_by_a_list_soon(fake_apiserver, monkeypatch):
    # The apiserver was away (a watch cut, its list refused); it is back, but the resource does
    # not change, so the resumed watch says nothing: after RECOVERY_READ_TIMEOUT, not the whole
    # read timeout, a list proves the cache current again.
    monkeypatch.setattr(informer_module, "RECOVERY_READ_TIMEOUT", 5.0)
    informer, apiserver = fake_apiserver([[], [], []], read_timeout=90.0, cut_after=None, lists=[True])

    # The first watch breaks at once (the apiserver restarts); the next is quiet.
    streams = iter([2.0, 5.0, None])

    original = apiserver.stream

    @contextmanager
    def stream(path, query, read_timeout):
        with original(path, query, read_timeout) as lines:
            lines._cut_after = next(streams, None)
            if lines._cut_after == 5.0:
                assert read_timeout == 5.0  # resumed after a failure: the short read timeout
            yield lines

    apiserver.stream = stream
    run_until_the_scripts_end(informer)

    # Broken at 2 s, resumed, quiet until 7 s, listed then (working), watching again (the last
    # watch ends at once and the next finds the scripts over).
    assert [at for at, _ in apiserver.readiness_at_each_open] == [0, 2, 7, 7]
    assert [at for at, _ in apiserver.readiness_at_each_list] == [7]
    assert informer.current() is None and informer.relists["quiet"] == 1


def test_a_cache_that_hears_nothing_for_too_long_is_not_current_even_when_no_request_fails(fake_apiserver):
    # A watch that only trickles blank lines, 30 s apart, and then ends as the server ends one:
    # no read times out, nothing fails, and the cache learns nothing.
    readiness_at_each_line = []

    def keep_alive_lines():
        for _ in range(4):
            apiserver.clock.now += 30
            readiness_at_each_line.append((apiserver.clock.now - START, informer.current()))
            yield b"\n"

    informer, apiserver = fake_apiserver([keep_alive_lines()], read_timeout=90.0)
    run_until_the_scripts_end(informer)

    not_current = "nodes: no list, event or bookmark for 120s"
    assert readiness_at_each_line == [(30, None), (60, None), (90, None), (120, not_current)]
    assert apiserver.readiness_at_each_open == [(0, None), (120, not_current)]
    assert informer_module.SILENT_AFTER_SECONDS == 110  # the read timeout (90 s) plus the failure grace (20 s)


def test_a_silent_cache_shows_on_readyz_and_in_the_seconds_since_last_event_gauge():
    from gpu_scheduler.kube.events import EventRecorder
    from gpu_scheduler.scheduler.metrics import SchedulerMetrics
    from gpu_scheduler.scheduler.runner import Scheduler, SchedulerConfig
    from gpu_scheduler.scheduling import SharingPolicy

    recorder = EventRecorder(None, controller="gpu-scheduler", instance="test", queue_size=1)  # never started
    config = SchedulerConfig("gpu-scheduler", None, SharingPolicy.WARN, "gpu-node-name", 1)
    metrics = SchedulerMetrics()
    scheduler = Scheduler(None, config, recorder, metrics, lambda: True)  # informers never started
    pods, nodes, *volumes = scheduler.informers
    now = time.monotonic()
    pods.synced.set()
    pods.last_event_at = now - 200
    for informer in volumes:  # claims, volumes, classes, CSINodes: listed a moment ago
        informer.synced.set()
        informer.last_event_at = now

    def seconds_since_last_event() -> dict[str, float]:
        text = generate_latest(metrics.registry).decode()
        (family,) = [
            f for f in text_string_to_metric_families(text) if f.name == "gpu_scheduler_watch_seconds_since_last_event"
        ]
        return {sample.labels["cache"]: sample.value for sample in family.samples}

    assert scheduler.not_current() == ["pods: no list, event or bookmark for 200s", "nodes: not listed yet"]
    seconds = seconds_since_last_event()
    assert "nodes" not in seconds  # not listed: no sample
    assert seconds["pods"] == pytest.approx(200, abs=2)

    nodes.synced.set()
    nodes.last_event_at = now - 5
    assert scheduler.not_current() == ["pods: no list, event or bookmark for 200s"]
    assert seconds_since_last_event()["nodes"] == pytest.approx(5, abs=2)
