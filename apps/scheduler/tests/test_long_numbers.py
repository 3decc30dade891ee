"""Numbers too long for int(): every layer refuses them with the line or the pod (bug 4).

Python refuses to convert a string of more than 4,300 digits to an int with a
plain ValueError. An index, a device ordinal or a pod index of that length
used to escape as that ValueError: a traceback from `map validate`, a 500
from the webhook, a scheduler retrying for ever without an event.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gpu_scheduler.placement import (
    InvalidDeviceError,
    InvalidIndexError,
    InvalidMapError,
    PodIndexError,
    parse_map_uncached,
    pod_index,
)
from gpu_scheduler.scheduling import GpuLedger, NodeIndex, decide
from gpu_scheduler.webhook.admission import DENIED, mutate, validate

DIGITS = "9" * 5000
CLI = str(Path(sys.executable).with_name("gpu-scheduler"))
SCHEDULER = "gpu-scheduler"


def only_error(text: str):
    with pytest.raises(InvalidMapError) as raised:
        parse_map_uncached(text)
    (error,) = raised.value.errors
    return error


def test_an_index_of_thousands_of_digits_is_an_error_on_its_line():
    error = only_error(f"0=node1:0\n{DIGITS}=node2:1\n")
    assert isinstance(error, InvalidIndexError)
    assert error.line == 2
    assert str(error).startswith("line 2: index 99999")
    assert "larger than 2147483647" in str(error)
    assert len(str(error)) < 300  # the number is shortened in the message


def test_a_device_ordinal_of_thousands_of_digits_is_an_error_on_its_line():
    error = only_error(f"0=node1:0,{DIGITS}\n")
    assert isinstance(error, InvalidDeviceError)
    assert error.line == 1
    assert "larger than 2147483647" in str(error)
    assert len(str(error)) < 300


def test_leading_zeros_do_not_make_a_number_long():
    parsed = parse_map_uncached(f"{'0' * 5000}1=node1:{'0' * 5000}2\n")
    assert parsed[1].devices == ("0" * 5000 + "2",)


@pytest.mark.parametrize(
    ("where", "metadata"),
    [
        ("label apps.kubernetes.io/pod-index", {"name": "web-0", "labels": {"apps.kubernetes.io/pod-index": DIGITS}}),
        (
            "annotation batch.kubernetes.io/job-completion-index",
            {"name": "job-0", "annotations": {"batch.kubernetes.io/job-completion-index": DIGITS}},
        ),
        ("its name", {"name": f"web-{DIGITS}"}),
    ],
)
def test_a_pod_index_of_thousands_of_digits_is_an_error_naming_the_pod(where, metadata):
    pod = {"metadata": {"namespace": "ml", **metadata}}
    with pytest.raises(PodIndexError) as raised:
        pod_index(pod)
    message = str(raised.value)
    assert message.startswith("pod ml/")
    assert where in message
    assert "larger than 2147483647" in message
    assert len(message) < 400


def test_map_validate_prints_the_error_not_a_traceback():
    result = subprocess.run(
        [CLI, "map", "validate", "-"],
        input=f"0=node1:0\n{DIGITS}=node2:1\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("line 2: index 99999")


def review(obj, kind="Pod", group="", operation="CREATE"):
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "operation": operation,
            "namespace": "ml",
            "object": obj,
        },
    }


def our_pod(annotations, name="train-0"):
    """Created on a node: the webhook reads the map only of such a pod (no Binding will come)."""
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"schedulerName": SCHEDULER, "nodeName": "node1", "containers": [{"name": "main", "image": "x"}]},
    }


def test_webhook_denies_a_pod_created_on_a_node_whose_map_has_a_huge_index_naming_the_line():
    decision = mutate(review(our_pod({"gpu-scheduling-map": f"0=node1:0\n{DIGITS}=node2:1\n"})), SCHEDULER)
    assert decision.result == DENIED
    assert "gpu-scheduling-map: line 2: index 99999" in decision.review["response"]["status"]["message"]


def test_webhook_denies_a_pod_created_on_a_node_with_a_huge_job_index_naming_the_pod():
    annotations = {"gpu-scheduling-map": "0=node1:0\n", "batch.kubernetes.io/job-completion-index": DIGITS}
    decision = mutate(review(our_pod(annotations)), SCHEDULER)
    assert decision.result == DENIED
    message = decision.review["response"]["status"]["message"]
    assert message.startswith("pod ml/train-0: the index 99999")
    assert "from annotation batch.kubernetes.io/job-completion-index is larger than 2147483647" in message


def test_webhook_denies_a_workload_whose_map_has_a_huge_ordinal_naming_the_line():
    statefulset = {
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "metadata": {"annotations": {"gpu-scheduling-map": f"0=node1:{DIGITS}\n"}},
                "spec": {"schedulerName": SCHEDULER, "containers": [{"name": "main", "image": "x"}]},
            }
        },
    }
    decision = validate(review(statefulset, kind="StatefulSet", group="apps"), SCHEDULER)
    assert decision.result == DENIED
    assert "line 1: device 99999" in decision.review["response"]["status"]["message"]


def test_scheduler_refuses_such_a_pod_for_good_with_a_reason_for_its_event():
    pod = {
        "metadata": {"name": "train-0", "namespace": "ml", "annotations": {"gpu-scheduling-map": f"{DIGITS}=node1:0"}},
        "spec": {"schedulerName": SCHEDULER},
    }
    decision = decide(pod, NodeIndex(), GpuLedger())
    assert decision.bind is False
    assert decision.retryable is False  # a retry cannot help: only a new map can
    assert decision.reason.startswith("line 1: index 99999")
