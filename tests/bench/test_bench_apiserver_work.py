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
        "ours_bind": {"apiserver_per_pod": {"POST pods/binding": 1.0, "POST events": 1.0, "PUT leases": 0.01}},
        "kube_pinned": {"apiserver_per_pod": {"POST pods/binding": 1.0, "PATCH events.events.k8s.io": 0.5}},
    }
    lines = report.apiserver_work_lines(burst_summary)
    rows = [line for line in lines if line.startswith("| ") and "---" not in line]
    assert rows[0].startswith("| per pod | " + report.LABELS["ours_bind"])
    assert "| POST events | 1.00 | 0.00 |" in rows
    assert "| PATCH events.events.k8s.io | 0.00 | 0.50 |" in rows
    assert not any("leases" in row for row in rows)
    assert report.apiserver_work_lines({"ours_bind": {"apiserver_per_pod": {}}}) == []


# kube-apiserver's admission metrics (k8s.io/apiserver/pkg/admission/metrics and the admission policy
# plugins' own): histograms whose _count is one per call or evaluation.
ADMISSION_BEFORE = "\n".join(
    [
        "# TYPE apiserver_admission_webhook_admission_duration_seconds histogram",
        'apiserver_admission_webhook_admission_duration_seconds_bucket{name="mutate.gpu-scheduler.io",operation="CREATE",'
        'rejected="false",type="admit",le="0.005"} 90',
        'apiserver_admission_webhook_admission_duration_seconds_sum{name="mutate.gpu-scheduler.io",operation="CREATE",'
        'rejected="false",type="admit"} 0.4',
        'apiserver_admission_webhook_admission_duration_seconds_count{name="mutate.gpu-scheduler.io",operation="CREATE",'
        'rejected="false",type="admit"} 100',
        'apiserver_validating_admission_policy_check_total{enforcement_action="allow",error_type="no_error",'
        'policy="gpu-scheduler-map",policy_binding="b"} 10',
        'apiserver_mutating_admission_policy_check_total{error_type="no_error",policy="gpu-scheduler-devices",'
        'policy_binding="b"} 10',
        'apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",rejected="false",type="admit"}'
        " 500",
        'apiserver_admission_step_admission_duration_seconds_count{operation="CREATE",rejected="false",type="validate"}'
        " 500",
    ]
)


def test_webhook_calls_and_policy_evaluations_per_pod_are_read_from_the_apiservers_counters():
    before = apiserver_work.read_counters(ADMISSION_BEFORE)
    after_text = ADMISSION_BEFORE.replace('type="admit"} 100', 'type="admit"} 1100')
    after_text = after_text.replace('policy_binding="b"} 10', 'policy_binding="b"} 1010')
    after_text = after_text.replace('type="admit"} 500', 'type="admit"} 2500')
    counted = apiserver_work.per_pod(before, apiserver_work.read_counters(after_text), 1000)
    assert counted["admission webhook call admit mutate.gpu-scheduler.io"] == 1.0
    assert counted["admission policy check validating gpu-scheduler-map"] == 1.0
    assert counted["admission policy check mutating gpu-scheduler-devices"] == 1.0
    assert counted["admission step admit CREATE"] == 2.0  # the pod's CREATE and its binding's
    assert apiserver_work.admission_per_pod(counted) == {"webhook_calls": 1.0, "policy_checks": 2.0}


def test_admission_per_pod_is_in_the_summary_and_the_burst_table():
    def run(key: str, webhook: float, policy: float) -> dict:
        return {
            "key": key,
            "label": key,
            "round": 1,
            "pods_per_second": 100.0,
            "latency_s": {"p50": 0.1, "p99": 0.2},
            "pods": 10,
            "created": 10,
            "bound": 10,
            "complete": True,
            "cpu_s": {"runner": 0.1, "webhook": 0.0, "control_plane": 0.2},
            "apiserver_per_pod": {
                "POST pods": 1.0,
                **({"admission webhook call admit mutate.gpu-scheduler.io": webhook} if webhook else {}),
                **({"admission policy check mutating gpu-scheduler-devices": policy} if policy else {}),
            },
        }

    # A pod of ours that lacks the bind entry meets the chart's MutatingAdmissionPolicy (1.36+) or its
    # webhook (1.35); the bench's pods carry the entry, and kube-scheduler's meet neither.
    runs = [run("ours_bind", 0.5, 2.0), run("kube_matched", 0.0, 0.0)]
    burst = summary.summarize_throughput(runs)["summary"]
    assert burst["ours_bind"]["admission_per_pod"] == {"webhook_calls": 0.5, "policy_checks": 2.0}
    assert burst["kube_matched"]["admission_per_pod"] == {"webhook_calls": 0.0, "policy_checks": 0.0}
    lines = report.burst_table(burst)
    assert "admission per pod: webhook calls / policy evaluations" in lines[0]
    row = next(line for line in lines if line.startswith(f"| {report.LABELS['ours_bind']} |"))
    assert "| 0.50 / 2.00 |" in row
