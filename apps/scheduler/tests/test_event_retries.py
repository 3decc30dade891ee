"""Events the apiserver could not take are sent again (issue 16, point 9): after no answer, a
5xx or a 429, with a backoff, a bounded number of times, waiting aside so that the Events
behind them go on; never after another 4xx. What became of them reaches the metrics."""

from __future__ import annotations

import pytest
from e2e.waiting import wait_until
from gpu_scheduler.kube import events
from gpu_scheduler.kube.client import ApiError
from gpu_scheduler.kube.events import NORMAL, EventRecorder
from gpu_scheduler.scheduler.metrics import SchedulerMetrics

POD = {"metadata": {"namespace": "ml", "name": "a-0", "uid": "ua"}}


class ScriptedApi:
    """Answers the tries of each Event (told apart by reason) from a script, then 201;
    status 0 is no answer at all. Keeps every try, in order."""

    def __init__(self, **script: list[int]) -> None:
        self._script = script
        self.tries: list[str] = []

    def request(self, method: str, path: str, *, body=None, **_) -> tuple[int, bytes]:
        reason = body["reason"]
        self.tries.append(reason)
        answers = self._script.get(reason) or [201]
        status = answers.pop(0) if len(answers) > 1 else answers[0]
        if status == 0:
            raise ApiError(method, path, 0, "[Errno 111] Connection refused")
        return status, b'{"kind":"Status","message":"scripted"}'

    def tries_of(self, reason: str) -> int:
        return self.tries.count(reason)


@pytest.fixture
def quick_retries(monkeypatch):
    # raising=False: the names the backoff reads, so that the test also runs on code without them.
    monkeypatch.setattr(events, "RETRY_FIRST_SECONDS", 0.01, raising=False)
    monkeypatch.setattr(events, "RETRY_MAX_SECONDS", 0.04, raising=False)


def recorder_for(api: ScriptedApi, queue_size: int = 64) -> EventRecorder:
    recorder = EventRecorder(api, controller="gpu-scheduler", instance="test", senders=1, queue_size=queue_size)
    recorder.start()
    return recorder


def send(recorder: EventRecorder, *reasons: str) -> None:
    for reason in reasons:
        recorder.record(POD, NORMAL, reason, "Binding", f"{reason} happened")


@pytest.mark.parametrize("trouble", [0, 500, 503, 429])
def test_an_event_the_apiserver_could_not_take_is_sent_again(quick_retries, trouble):
    # Before: one try, then dropped (2-11 Scheduled events of 200 lost per apiserver outage).
    api = ScriptedApi(Scheduled=[trouble, trouble, 201])
    recorder = recorder_for(api)
    send(recorder, "Scheduled")
    assert recorder.flush(5.0)
    assert api.tries_of("Scheduled") == 3
    assert recorder.counts() == {"sent": 1, "retried": 2, "dropped": 0, "failed": 0}


@pytest.mark.parametrize("refusal", [400, 403, 404, 422])
def test_an_event_the_apiserver_refused_is_not_sent_again(quick_retries, refusal):
    api = ScriptedApi(Scheduled=[refusal])
    recorder = recorder_for(api)
    send(recorder, "Scheduled")
    assert recorder.flush(5.0)
    assert api.tries_of("Scheduled") == 1
    assert recorder.counts() == {"sent": 0, "retried": 0, "dropped": 0, "failed": 1}


def test_an_event_is_given_up_after_its_last_try(quick_retries):
    api = ScriptedApi(Scheduled=[503])
    recorder = recorder_for(api)
    send(recorder, "Scheduled")
    assert recorder.flush(5.0)
    assert api.tries_of("Scheduled") == events.MAX_TRIES
    assert recorder.counts() == {"sent": 0, "retried": events.MAX_TRIES - 1, "dropped": 0, "failed": 1}


def test_the_waits_between_tries_double_up_to_a_cap():
    assert [events.retry_delay(n) for n in range(1, events.MAX_TRIES)] == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_a_post_answered_409_after_a_lost_answer_was_stored_by_the_earlier_try(quick_retries):
    api = ScriptedApi(Scheduled=[0, 409])
    recorder = recorder_for(api)
    send(recorder, "Scheduled")
    assert recorder.flush(5.0)
    assert recorder.counts() == {"sent": 1, "retried": 1, "dropped": 0, "failed": 0}


def test_an_event_waiting_to_be_sent_again_does_not_hold_up_the_others(monkeypatch):
    monkeypatch.setattr(events, "RETRY_FIRST_SECONDS", 0.3, raising=False)
    api = ScriptedApi(Stuck=[503, 201])
    recorder = recorder_for(api)
    send(recorder, "Stuck", "Scheduled", "GPUShared", "Scheduled")
    assert recorder.flush(5.0)
    # With one sender, the three behind it were sent while it waited for its second try.
    assert api.tries == ["Stuck", "Scheduled", "GPUShared", "Scheduled", "Stuck"]


def test_an_event_with_no_room_left_to_wait_is_dropped_and_counted(monkeypatch):
    monkeypatch.setattr(events, "RETRY_FIRST_SECONDS", 30.0, raising=False)
    api = ScriptedApi(First=[503], Second=[503])
    recorder = recorder_for(api, queue_size=1)
    send(recorder, "First")
    wait_until("one retry of First", lambda: api.tries_of("First") == 1 and recorder.retried == 1, 5.0, 0.01)
    send(recorder, "Second")
    wait_until("one dropped event", lambda: recorder.dropped == 1, 5.0, 0.01)
    assert recorder.counts() == {"sent": 0, "retried": 1, "dropped": 1, "failed": 0}
    assert not recorder.flush(0.1)  # First still waits for its next try


def test_what_became_of_events_and_condition_writes_reaches_the_metrics(quick_retries):
    api = ScriptedApi(Scheduled=[503, 201], Refused=[422])
    recorder = recorder_for(api)
    metrics = SchedulerMetrics()
    metrics.watch_reports(recorder.counts, lambda: {"written": 3, "conflict": 1, "failed": 0})
    send(recorder, "Scheduled", "Refused")
    assert recorder.flush(5.0)

    def sample(name: str, result: str) -> float:
        return metrics.registry.get_sample_value(name, {"result": result})

    assert [sample("gpu_scheduler_events_total", r) for r in ("sent", "retried", "dropped", "failed")] == [1, 1, 0, 1]
    assert sample("gpu_scheduler_pod_condition_writes_total", "conflict") == 1
