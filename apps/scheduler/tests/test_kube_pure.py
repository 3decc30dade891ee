"""Pure parts of the API adapters: rate limit, binding requests and answers, trimmed pods."""

import pytest
from gpu_scheduler.kube.binder import BindOutcome, binding_body, classify
from gpu_scheduler.kube.client import TokenBucket
from gpu_scheduler.kube.objects import is_terminal, trim_pod


def test_token_bucket_allows_the_burst_then_spaces_requests_at_the_qps():
    bucket = TokenBucket(qps=10, burst=3, now=0.0)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve(0.0) == pytest.approx(0.1)
    assert bucket.reserve(0.0) == pytest.approx(0.2)
    assert bucket.reserve(1.0) == 0.0  # refilled meanwhile


def test_token_bucket_with_no_qps_never_waits():
    bucket = TokenBucket(qps=0, burst=1)
    assert max(bucket.reserve(0.0) for _ in range(1000)) == 0.0


def test_binding_names_the_pod_its_uid_and_the_node():
    assert binding_body("ml", "a-0", "u1", "node1") == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "a-0", "namespace": "ml", "uid": "u1"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node1"},
    }


ALREADY = 'Operation cannot be fulfilled on pods/binding "a-0": pod a-0 is already assigned to node "node1"'
ETCD_DOWN = 'Operation cannot be fulfilled on pods/binding "a-0": rpc error: code = Unavailable desc = error reading'


@pytest.mark.parametrize(
    ("status", "message", "outcome"),
    [
        (201, "", BindOutcome.BOUND),
        (200, "", BindOutcome.BOUND),
        (409, ALREADY, BindOutcome.ALREADY_BOUND),
        (409, ETCD_DOWN, BindOutcome.FAILED),  # unbound: must be retried
        (404, "", BindOutcome.POD_GONE),
        (500, "", BindOutcome.FAILED),
        (429, "", BindOutcome.FAILED),
        (0, "", BindOutcome.FAILED),
    ],
)
def test_bind_answers_are_classified(status, message, outcome):
    assert classify(status, message).outcome is outcome


FULL_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "namespace": "ml",
        "name": "train-1",
        "uid": "u1",
        "resourceVersion": "42",
        "labels": {"app": "train", "apps.kubernetes.io/pod-index": "1"},
        "annotations": {
            "gpu-scheduling-map": "1=node2:2\n",
            "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 10000 + "}",
        },
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "train", "uid": "s1", "controller": True}
        ],
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "c", "image": "busybox"}]},
    "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled"}]},
}


def test_trimmed_pod_keeps_what_scheduling_reads_and_nothing_else():
    assert trim_pod(FULL_POD) == {
        "metadata": {
            "namespace": "ml",
            "name": "train-1",
            "uid": "u1",
            "resourceVersion": "42",
            "annotations": {"gpu-scheduling-map": "1=node2:2\n"},
            "labels": {"apps.kubernetes.io/pod-index": "1"},
            "ownerReferences": [{"kind": "StatefulSet", "controller": True}],
        },
        "spec": {"schedulerName": "gpu-scheduler", "nodeName": ""},
        "status": {"phase": "Pending"},
    }


def test_pods_of_one_statefulset_share_one_copy_of_the_map_text():
    first = {"metadata": {"annotations": {"gpu-scheduling-map": "".join(["0=node1:0\n", "1=node2:1\n"])}}}
    second = {"metadata": {"annotations": {"gpu-scheduling-map": "".join(["0=node1:0\n", "1=node2:1\n"])}}}
    assert (
        first["metadata"]["annotations"]["gpu-scheduling-map"]
        is not second["metadata"]["annotations"]["gpu-scheduling-map"]
    )
    a = trim_pod(first)["metadata"]["annotations"]["gpu-scheduling-map"]
    b = trim_pod(second)["metadata"]["annotations"]["gpu-scheduling-map"]
    assert a is b


def test_only_succeeded_and_failed_pods_are_terminal():
    assert [is_terminal({"status": {"phase": p}}) for p in ("Pending", "Running", "Succeeded", "Failed")] == [
        False,
        False,
        True,
        True,
    ]
