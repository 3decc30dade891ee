"""What a burst asked of the apiserver, read from its counters.

The two expositions in data/ were recorded from the local control plane's
kube-apiserver (v1.34), one before and one after a pod was created and bound by
hand, with kwok and kube-controller-manager running.
"""

from pathlib import Path

import pytest

from bench import apiserver_work, report, summary

DATA = Path(__file__).parent / "data"
BEFORE = (DATA / "apiserver-metrics-before.txt").read_text()
AFTER = (DATA / "apiserver-metrics-after.txt").read_text()


def test_one_pod_created_and_bound_by_hand_is_counted_once_each_in_the_recorded_counters():
    counted = apiserver_work.per_pod(apiserver_work.read_counters(BEFORE), apiserver_work.read_counters(AFTER), 1)
    assert counted["POST pods"] == 1
    assert counted["POST pods/binding"] == 1
    assert counted["etcd create pods"] == 1
    # kwok marked it running; the watchers of pods (kwok, the controllers) were each sent its changes.
    assert counted["PATCH pods/status"] == 1
    assert counted["watch event pods"] >= 2
    assert all(value > 0 for value in counted.values()), "what did not change is left out"


def test_samples_are_summed_over_the_labels_left_out_of_the_name():
    text = "\n".join(
        [
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="201",group="",resource="pods",subresource="binding",verb="POST"} 7',
            'apiserver_request_total{code="409",group="",resource="pods",subresource="binding",verb="POST"} 2',
            'apiserver_request_total{code="201",group="events.k8s.io",resource="events",subresource="",verb="POST"} 3',
            'apiserver_request_total{code="201",group="",resource="events",subresource="",verb="POST"} 4',
            'apiserver_request_total{code="200",group="",resource="",subresource="/readyz",verb="GET"} 5',
            'etcd_requests_total{group="",operation="create",resource="pods"} 6',
            'apiserver_watch_events_total{group="",resource="pods",version="v1"} 8',
            'some_other_total{resource="pods"} 99',
        ]
    )
    assert apiserver_work.read_counters(text) == {
        "POST pods/binding": 9,
        "POST events.events.k8s.io": 3,
        "POST events": 4,
        "GET /readyz": 5,
        "etcd create pods": 6,
        "watch event pods": 8,
    }


def test_counters_that_went_back_mean_a_restart_and_give_no_figures():
    with pytest.raises(ValueError, match="restarted"):
        apiserver_work.per_pod({"POST pods": 10}, {"POST pods": 3}, 5)
    with pytest.raises(ValueError, match="restarted"):
        apiserver_work.per_pod({"POST pods": 10, "GET nodes": 1}, {"POST pods": 12}, 5)
    assert apiserver_work.per_pod({"POST pods": 10}, {"POST pods": 20}, 0) == {}


def test_a_round_without_figures_is_left_out_of_the_median_and_a_missing_row_counts_zero():
    runs = [
        {"apiserver_per_pod": {"POST pods": 1.0, "POST pods/binding": 1.0}},
        {"apiserver_per_pod": {"POST pods": 1.0}},
        {"apiserver_per_pod": {"POST pods": 1.2, "POST pods/binding": 1.0}},
        {"apiserver_per_pod": {}},
    ]
    assert summary.apiserver_per_pod(runs) == {"POST pods": 1.0, "POST pods/binding": 1.0}


def test_the_report_shows_per_pod_rows_for_each_runner_and_leaves_out_the_noise():
    burst_summary = {
        "ours": {"apiserver_per_pod": {"POST pods/binding": 1.0, "POST events": 1.0, "PUT leases": 0.01}},
        "kube_pinned": {"apiserver_per_pod": {"POST pods/binding": 1.0, "PATCH events.events.k8s.io": 0.5}},
    }
    lines = report.apiserver_work_lines(burst_summary)
    rows = [line for line in lines if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| per pod | " + report.LABELS["ours"])
    assert "| POST events | 1.00 | 0.00 |" in rows
    assert "| PATCH events.events.k8s.io | 0.00 | 0.50 |" in rows
    assert not any("leases" in row for row in rows)
    assert report.apiserver_work_lines({"ours": {"apiserver_per_pod": {}}}) == []
