"""What the scheduler says after a binding (issue 16, points 6 and 9): never that a pod failed
when its binding may have been stored, never PodScheduled=False on a pod that changed since it
was seen (a bound one), and "scheduled" only for bindings this attempt stored."""

from __future__ import annotations

import json

import pytest
from gpu_scheduler.kube.binder import BindOutcome, BindResult
from gpu_scheduler.kube.objects import node_info, trim_pending_pod
from gpu_scheduler.kube.pod_status import SCHEDULER_ERROR, UNSCHEDULABLE, PodConditionWriter
from gpu_scheduler.scheduler import schedule_one
from gpu_scheduler.scheduler.metrics import SchedulerMetrics
from gpu_scheduler.scheduler.runner import Scheduler, SchedulerConfig
from gpu_scheduler.scheduling import SharingPolicy

RESOURCE_VERSION = "4711"


def api_node(name: str) -> dict:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": name, "labels": {"gpu-node-name": name}},
        "spec": {},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pending_pod() -> dict:
    """A pending pod as the pod watch delivers it (trimmed), resourceVersion kept."""
    return trim_pending_pod(
        {
            "metadata": {
                "namespace": "ml",
                "name": "a-0",
                "uid": "ua",
                "resourceVersion": RESOURCE_VERSION,
                "annotations": {
                    "gpu-scheduling-map": "0=node1:0\n",
                    "gpu-scheduler/placement": json.dumps({"cudaVisibleDevices": "0"}),
                },
            },
            "spec": {"schedulerName": "gpu-scheduler"},
        }
    )


class FakeRecorder:
    def __init__(self) -> None:
        self.events: list[dict] = []
        self.dropped = 0

    def record(self, pod, event_type, reason, action, note, *, coalesce=False) -> None:
        self.events.append({"type": event_type, "reason": reason, "note": note})

    def forget(self, pod_key: str) -> None:
        pass


class FakeConditions:
    def __init__(self) -> None:
        self.writes: list[tuple[str | None, str, str]] = []

    def unschedulable(self, pod, message, reason=UNSCHEDULABLE) -> None:
        self.writes.append((pod["metadata"].get("resourceVersion"), reason, message))

    def forget(self, uid: str) -> None:
        pass


class Attempt:
    """One scheduling attempt of pending_pod() whose binding answers `result`."""

    def __init__(self, monkeypatch, result: BindResult) -> None:
        self.recorder = FakeRecorder()
        self.conditions = FakeConditions()
        self.metrics = SchedulerMetrics()
        config = SchedulerConfig("gpu-scheduler", None, SharingPolicy.WARN, "gpu-node-name", 1)
        scheduler = Scheduler(None, config, self.recorder, self.metrics, lambda: True, self.conditions)
        monkeypatch.setattr(schedule_one, "bind", lambda *args, **kwargs: result)
        scheduler.state.nodes_listed([node_info(api_node("node1"))])
        scheduler.state.pending_upsert(pending_pod())
        uid, pod = scheduler.state.pop(0.0)
        scheduler._schedule_one.schedule_one(uid, pod)

    def attempts(self, result: str) -> float:
        return self.metrics.registry.get_sample_value("gpu_scheduler_schedule_attempts_total", {"result": result})


@pytest.mark.parametrize(
    "result",
    [
        BindResult(BindOutcome.FAILED, 0, "read timed out"),
        BindResult(BindOutcome.FAILED, 504, "Timeout: request did not complete within requested timeout"),
    ],
)
def test_a_binding_with_no_conclusive_answer_is_not_called_a_failure(monkeypatch, result):
    # Before: a FailedScheduling Warning "binding to node node1 failed: ...", although the
    # binding may have been stored (the fault tests saw such bindings stored).
    attempt = Attempt(monkeypatch, result)
    [event] = attempt.recorder.events
    assert event["reason"] == "BindingNotConfirmed"
    assert "failed" not in event["note"]
    assert event["note"].startswith("binding to node node1 not confirmed (")
    assert "will retry" in event["note"]
    # The condition is still written, but only if the pod is as the scheduler saw it.
    assert attempt.conditions.writes == [(RESOURCE_VERSION, SCHEDULER_ERROR, event["note"])]


def test_a_binding_refused_for_sure_is_a_failure(monkeypatch):
    attempt = Attempt(monkeypatch, BindResult(BindOutcome.FAILED, 403, "forbidden"))
    [event] = attempt.recorder.events
    assert (event["reason"], event["note"]) == ("FailedScheduling", "binding to node node1 failed: forbidden")


def test_a_pod_that_already_had_a_node_is_not_counted_as_scheduled(monkeypatch):
    # Before: counted under result="scheduled", so a replica's count could exceed its bindings.
    attempt = Attempt(monkeypatch, BindResult(BindOutcome.ALREADY_BOUND, 409, "is already assigned to node"))
    assert attempt.attempts("scheduled") == 0
    assert attempt.attempts("already-bound") == 1
    assert attempt.recorder.events == []  # not our binding: no Scheduled event either


def test_a_binding_this_attempt_stored_is_counted_as_scheduled(monkeypatch):
    attempt = Attempt(monkeypatch, BindResult(BindOutcome.BOUND, 201))
    assert (attempt.attempts("scheduled"), attempt.attempts("already-bound")) == (1, 0)
    assert attempt.recorder.events[0]["reason"] == "Scheduled"


class AnsweringClient:
    """Answers every request with one status; keeps what was sent."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.sent: list[tuple[str, str, dict]] = []

    def request(self, method: str, path: str, *, body=None, **_) -> tuple[int, bytes]:
        self.sent.append((method, path, body))
        return self.status, b'{"kind":"Status","reason":"Conflict","message":"the object has been modified"}'


def write_condition(status: int) -> tuple[PodConditionWriter, AnsweringClient]:
    client = AnsweringClient(status)
    writer = PodConditionWriter(client)
    writer.start()
    writer.unschedulable(pending_pod(), "binding to node node1 not confirmed", SCHEDULER_ERROR)
    assert writer.flush(5.0)
    return writer, client


def test_a_condition_write_holds_only_while_the_pod_is_as_the_scheduler_saw_it():
    # Before: no precondition, so the write landed on a pod bound meanwhile.
    _, client = write_condition(200)
    [(method, path, patch)] = client.sent
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ml/pods/a-0/status")
    assert patch.get("metadata") == {"resourceVersion": RESOURCE_VERSION}
    assert patch["status"]["conditions"][0]["reason"] == SCHEDULER_ERROR


def test_a_condition_write_refused_because_the_pod_changed_is_dropped_quietly_and_counted():
    writer, _ = write_condition(409)
    assert writer.failed == 0
    assert writer.counts() == {"written": 0, "conflict": 1, "failed": 0}
