"""gpu-scheduler without admission gets the pods the webhook would have made, by the webhook's own code."""

import base64
import json

import jsonpatch
import pytest
from gpu_scheduler.placement import CUDA_ENV, PLACEMENT_ANNOTATION
from gpu_scheduler.webhook.admission import mutate

from bench.preadmitted import as_admitted
from bench.workload import admission_review, bench_pods

SCHEDULER = "bench-gpu-scheduler"


def webhook_answer_applied(pod: dict) -> dict:
    """What the apiserver stores after the real webhook's answer to pod's creation."""
    response = mutate(admission_review(pod), SCHEDULER).review["response"]
    assert response["allowed"] and response["patchType"] == "JSONPatch"
    return jsonpatch.JsonPatch(json.loads(base64.b64decode(response["patch"]))).apply(pod)


@pytest.mark.parametrize("index", [0, 57, 249])
def test_a_pod_made_as_admitted_is_the_pod_the_webhook_would_have_made(index):
    pod = bench_pods(250, 100, 100, SCHEDULER, "gpu-bench")[index]
    before = json.dumps(pod, sort_keys=True)
    admitted = as_admitted(pod)
    assert admitted == webhook_answer_applied(pod)
    assert admitted != pod
    assert json.dumps(pod, sort_keys=True) == before  # the body given is left as it was
    # And what that is: the map line's devices in every container, and the placement annotation.
    devices = json.loads(admitted["metadata"]["annotations"][PLACEMENT_ANNOTATION])["cudaVisibleDevices"]
    for container in admitted["spec"]["containers"]:
        assert {"name": CUDA_ENV, "value": devices} in container["env"]


def test_a_pod_made_as_admitted_asks_the_webhook_for_nothing_more():
    pod = as_admitted(bench_pods(1, 4, 1, SCHEDULER, "gpu-bench")[0])
    response = mutate(admission_review(pod), SCHEDULER).review["response"]
    assert response["allowed"] and "patch" not in response
