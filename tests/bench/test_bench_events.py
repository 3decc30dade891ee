"""Scheduled Events are counted per run: those about the run's own pods, sent inside its window."""

import json
from datetime import UTC, datetime

from bench import events
from bench.report import render_markdown
from bench.summary import headline_metrics, summarize_throughput
from bench.targets import MISS, PASS, evaluate, load

START = datetime(2026, 12, 7, 9, 0, 0, 500000, tzinfo=UTC).timestamp()  # a window from 09:00:00.5
END = START + 20.0


def core_event(pod: str, at: str, reason: str = "Scheduled", count: int = 1) -> dict:
    """A core/v1 Event as kube-apiserver lists it for one posted through core/v1 (times in seconds)."""
    return {
        "metadata": {"name": f"{pod}.1", "creationTimestamp": at},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "gpu-bench"},
        "reason": reason,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": count,
    }


def new_event(pod: str, at: str, series: int | None = None) -> dict:
    """The core/v1 view of an Event posted through events.k8s.io/v1 (eventTime in microseconds, no count)."""
    event = {
        "metadata": {"name": f"{pod}.2", "creationTimestamp": at[:19] + "Z"},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": "gpu-bench"},
        "reason": "Scheduled",
        "eventTime": at,
        "firstTimestamp": None,
        "reportingComponent": "gpu-scheduler",
    }
    if series:
        event["series"] = {"count": series, "lastObservedTime": at}
    return event


def test_only_the_runs_own_pods_scheduled_events_inside_the_window_are_counted():
    listed = [
        new_event("p-0", "2026-12-07T09:00:01.250000Z"),
        core_event("p-1", "2026-12-07T09:00:05Z"),
        # The same names' Events of an earlier run (pods are deleted between runs; their Events stay).
        new_event("p-2", "2026-12-07T08:59:30.000000Z"),
        core_event("p-3", "2026-12-07T08:58:00Z"),
        # Sent after the window closed: not inside it.
        new_event("p-4", "2026-12-07T09:00:40.000000Z"),
        # Another reason, another pod, another kind.
        core_event("p-5", "2026-12-07T09:00:02Z", reason="FailedScheduling"),
        new_event("other-0", "2026-12-07T09:00:02.000000Z"),
        {**core_event("p-6", "2026-12-07T09:00:02Z"), "involvedObject": {"kind": "Node", "name": "p-6"}},
    ]
    names = {f"p-{i}" for i in range(8)}
    assert events.scheduled_in_window(listed, names, START, END) == {
        "scheduled_events": 2,
        "pods_with_scheduled_event": 2,
    }


def test_a_core_events_whole_second_at_the_windows_start_counts_and_a_series_counts_each_occurrence():
    listed = [
        core_event("p-0", "2026-12-07T09:00:00Z"),  # sent at 09:00:00.7, stored without the fraction
        new_event("p-1", "2026-12-07T09:00:03.000000Z", series=3),
        core_event("p-2", "2026-12-07T09:00:04Z", count=2),
    ]
    counted = events.scheduled_in_window(listed, {"p-0", "p-1", "p-2"}, START, END)
    assert counted == {"scheduled_events": 6, "pods_with_scheduled_event": 3}


class PagedApi:
    def __init__(self, pages: list[dict]) -> None:
        self.pages, self.paths = pages, []

    def get(self, path: str) -> dict:
        self.paths.append(path)
        return self.pages[len(self.paths) - 1]


def test_every_page_of_the_namespaces_scheduled_events_is_read():
    api = PagedApi(
        [
            {"items": [core_event("p-0", "2026-12-07T09:00:01Z")], "metadata": {"continue": "abc"}},
            {"items": [core_event("p-1", "2026-12-07T09:00:02Z")], "metadata": {}},
        ]
    )
    figures = events.figures(api, "gpu-bench", ["p-0", "p-1"], START, END)
    assert figures == {"scheduled_events": 2, "pods_with_scheduled_event": 2}
    assert api.paths[0].startswith("/api/v1/namespaces/gpu-bench/events?fieldSelector=reason%3DScheduled")
    assert "continue=abc" in api.paths[1]


def test_events_that_cannot_be_read_leave_the_run_without_the_figure_not_failed():
    class Broken:
        def get(self, path):
            raise OSError("connection refused")

    figures = events.figures(Broken(), "gpu-bench", ["p-0"], START, END)
    assert "scheduled_events" not in figures and "connection refused" in figures["scheduled_events_error"]


def burst_run(key: str, round_no: int, events_sent: int, pods_with: int) -> dict:
    return {
        "key": key,
        "label": key,
        "round": round_no,
        "mode": "burst",
        "pods_per_second": 100.0,
        "latency_s": {"p50": 0.1, "p99": 0.5, "max": 1.0},
        "pods": 1000,
        "created": 1000,
        "bound": 1000,
        "complete": True,
        "cpu_s": {"runner": 2.0, "webhook": 0.0, "control_plane": 10.0},
        "scheduled_events": events_sent,
        "pods_with_scheduled_event": pods_with,
    }


def test_scheduled_events_per_pod_are_in_the_summary_the_table_and_bind_modes_target():
    runs = [
        *(burst_run("ours_bind", r, 250, 250) for r in (1, 2, 3)),
        *(burst_run("kube_matched", r, 1000, 1000) for r in (1, 2, 3)),
    ]
    summary = summarize_throughput(runs)["summary"]
    assert summary["ours_bind"]["scheduled_events_per_pod"] == 0.25
    assert summary["ours_bind"]["scheduled_event_share"] == 0.25
    assert summary["kube_matched"]["scheduled_events_per_pod"] == 1.0
    results = {
        "settings": {},
        "machine": {},
        "throughput": {"pods": 1000, "nodes": 100, "group": 100, "burst": {"runs": runs, **summarize_throughput(runs)}},
    }
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(results))}
    assert checked["ours_bind.scheduled_event_share"]["value"] == 0.25
    assert checked["ours_bind.scheduled_event_share"]["status"] == MISS
    page = render_markdown(results, list(checked.values()))
    assert "Scheduled Events per pod, sent inside the window" in page
    assert "0.25 (25% of pods)" in page and "1.00 (100% of pods)" in page


def test_every_event_sent_inside_the_window_passes_bind_modes_target():
    runs = [burst_run("ours_bind", 1, 1000, 1000)]
    results = {"throughput": {"pods": 1000, "nodes": 100, "burst": {"runs": runs, **summarize_throughput(runs)}}}
    checked = {t["metric"]: t for t in evaluate(load(), headline_metrics(results))}
    assert checked["ours_bind.scheduled_event_share"]["status"] == PASS


def test_a_run_kept_before_events_were_counted_shows_no_figure_rather_than_zero():
    old = burst_run("ours_bind", 1, 0, 0)
    del old["scheduled_events"], old["pods_with_scheduled_event"]
    summary = summarize_throughput([old])["summary"]["ours_bind"]
    assert summary["scheduled_events_per_pod"] != summary["scheduled_events_per_pod"]  # NaN
    assert json.dumps(summary, default=str)
