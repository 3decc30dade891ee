"""Broken and oversized maps as users send them: `kubectl apply` (the real .cache/bin/kubectl)
through the real API server to the webhook, and the scheduler binding the biggest valid ones.
A bare pod with a broken map is not refused at creation (nothing on a pod's creation path reads
the map): the scheduler refuses it at bind (tests/e2e/test_invalid_maps.py).
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
import yaml
from e2e.charts import KUBECTL
from e2e.cluster import container_env, list_pods
from e2e.waiting import NotYet, wait_for
from e2e.workloads import bare_pod, deployment, indexed_job, statefulset
from kubernetes import client
from kubernetes.client.rest import ApiException

from .bursts import expected_node, wait_all_bound

pytestmark = pytest.mark.faults

MAP = "gpu-scheduling-map"
# metadata.annotations, keys and values together (apimachinery's TotalAnnotationSizeLimitB).
ANNOTATIONS_LIMIT = 256 * 1024
WEBHOOK_ANSWER_LIMIT = 2.0

# name -> (map text, the line the error must name, a phrase of the message)
BROKEN_MAPS = {
    "bad-index": ("0=node1:0\nx=node2:1\n", 2, "index 'x'"),
    "negative-index": ("-1=node1:0\n", 1, "not a non-negative integer"),
    "index-past-int32": ("0=node1:0\n1=node2:1\n2147483648=node3:0\n", 3, "larger than"),
    "bad-node": ("0=node1:0\n1=Node_1!:0\n", 2, "neither a Kubernetes node name"),
    "no-node": ("0=:1\n", 1, "missing node name"),
    "bad-device": ("0=node1:0\n1=node2:a\n", 2, "device 'a'"),
    "stray-comma": ("0=node1:0,,1\n", 1, "stray comma"),
    "duplicate-index": ("0=node1:0\n1=node2:1\n0=node3:2\n", 3, "already given on line 1"),
    "duplicate-device": ("0=node1:1,01\n", 1, "appears twice"),
    "empty": ("", 1, "no entry"),
    "only-comments": ("# nothing yet\n\n", 1, "no entry"),
    "crlf-garbage": ("0=node1:0\r\n\x00\x07garbage\x1b[31m\r\n", 2, "no '='"),
}
KINDS = ("Deployment", "StatefulSet", "Job")


def objects_with_map(scheduling_map: str) -> list[dict]:
    return [
        deployment("broken", scheduling_map),
        statefulset("broken", scheduling_map, replicas=2),
        indexed_job("broken", scheduling_map, completions=2, parallelism=2),
    ]


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(KUBECTL), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("shape", list(BROKEN_MAPS))
def test_kubectl_apply_refuses_every_kind_with_a_broken_map_naming_the_line(kubeconfig, webhook, ns, shape):
    scheduling_map, line, phrase = BROKEN_MAPS[shape]
    manifest = yaml.safe_dump_all(objects_with_map(scheduling_map))

    applied = kubectl(kubeconfig, "apply", "-n", ns, "-f", "-", stdin=manifest)

    assert applied.returncode != 0, applied.stdout
    errors = [e for e in applied.stderr.splitlines() if e.startswith("Error from server")]
    for kind in KINDS:
        about = [e for e in errors if f"{kind.lower()} {ns}/broken:" in e.lower()]
        assert len(about) == 1, f"{kind}: expected one error naming it in:\n{applied.stderr}"
        assert "denied the request" in about[0]
        assert f"line {line}: " in about[0] and phrase in about[0], about[0]
    listed = kubectl(kubeconfig, "get", "pods,deployments,statefulsets,jobs", "-n", ns, "-o", "name")
    assert listed.stdout.strip() == "", f"stored despite the broken map: {listed.stdout}"


# How long a decision's log line may take to reach the log file.
LOG_LINE_WAIT = 5.0


def webhook_seconds(webhook, namespace: str, pod_name: str) -> float:
    """How long the webhook took to answer for the pod, from its decision log line.

    The line is written by the webhook's log writer after the answer went out
    (it writes in batches, logs.BATCH_SECONDS apart), so it is waited for."""
    pattern = re.compile(rf"mutate \w+ .*pod={re.escape(namespace)}/{re.escape(pod_name)} .*duration_ms=([\d.]+)")

    def decision() -> list[str]:
        found = pattern.findall(webhook.log_path.read_text(errors="replace"))
        if not found:
            raise NotYet(f"no mutate decision for {namespace}/{pod_name} in {webhook.log_path}")
        return found

    found = wait_for("the webhook's decision log line", decision, LOG_LINE_WAIT, interval=0.05)
    return float(found[-1]) / 1000


def ten_thousand_lines() -> str:
    return "".join(f"{i}={expected_node(i)}:{i % 4}\n" for i in range(10_000))


def padded_to(total: int, scheduling_map: str) -> str:
    """The map with comment lines added so that MAP and the map take `total` bytes."""
    room = total - len(MAP) - len(scheduling_map.encode())
    assert room >= 2, "the map alone is larger than the target"
    return scheduling_map + "#" + "x" * (room - 2) + "\n"


def create_timed(api_client, namespace: str, pod: dict) -> float:
    started = time.monotonic()
    client.CoreV1Api(api_client).create_namespaced_pod(namespace, pod)
    return time.monotonic() - started


def test_pods_with_a_ten_thousand_line_map_are_answered_fast_and_bound(api_client, webhook, ns, start_scheduler):
    start_scheduler("scheduler", "--gpu-sharing=allow")
    scheduling_map = ten_thousand_lines()
    indexes = (0, 4_999, 9_999)

    for index in indexes:
        seconds = create_timed(api_client, ns, bare_pod(f"big-{index}", scheduling_map))
        assert seconds < WEBHOOK_ANSWER_LIMIT, f"creating big-{index} took {seconds:.2f}s"
        assert webhook_seconds(webhook, ns, f"big-{index}") < WEBHOOK_ANSWER_LIMIT

    pods = wait_all_bound(api_client, ns, len(indexes), timeout=30)
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods} == {
        f"big-{i}": expected_node(i) for i in indexes
    }
    assert {p["metadata"]["name"]: container_env(p)["main"] for p in pods} == {f"big-{i}": str(i % 4) for i in indexes}


def test_a_map_filling_the_annotation_limit_is_answered_fast_and_bound(api_client, webhook, ns, start_scheduler):
    """The user's annotations take 256 KiB minus the room the bind's annotations need: the API
    server stores the pod, and the scheduler binds it."""
    start_scheduler("scheduler", "--gpu-sharing=allow")
    # What the Binding adds: gpu-scheduler/cuda-visible-devices=3 and gpu-scheduler/placement=
    # {"index": 9999, "node": "node4", "cudaVisibleDevices": "3"}.
    placement_room = 128
    scheduling_map = padded_to(ANNOTATIONS_LIMIT - placement_room, ten_thousand_lines())

    seconds = create_timed(api_client, ns, bare_pod("full-9999", scheduling_map))

    assert seconds < WEBHOOK_ANSWER_LIMIT
    assert webhook_seconds(webhook, ns, "full-9999") < WEBHOOK_ANSWER_LIMIT
    (pod,) = wait_all_bound(api_client, ns, 1, timeout=30)
    assert pod["spec"]["nodeName"] == expected_node(9_999)
    assert sum(len(k) + len(v.encode()) for k, v in pod["metadata"]["annotations"].items()) <= ANNOTATIONS_LIMIT


def test_a_map_exactly_at_the_annotation_limit_is_refused_with_a_message_about_the_map(api_client, webhook, ns):
    """Annotations of exactly 256 KiB leave no room for the device annotations the webhook
    adds to a pod created on a node: the pod cannot be stored either way, and the refusal must
    tell the user what to shorten rather than blame an annotation they never wrote."""
    scheduling_map = padded_to(ANNOTATIONS_LIMIT, ten_thousand_lines())
    assert len(MAP) + len(scheduling_map.encode()) == ANNOTATIONS_LIMIT

    with pytest.raises(ApiException) as refused:
        create_timed(api_client, ns, bare_pod("full-0", scheduling_map, node_name=expected_node(0)))

    message = refused.value.body
    print(f"\nrefused: {message[:600]}")
    assert MAP in message, message[:600]
    assert list_pods(api_client, ns) == []


@pytest.mark.pipeline_sample
def test_one_byte_over_the_annotation_limit_is_refused_naming_the_limit(api_client, webhook, ns):
    scheduling_map = padded_to(ANNOTATIONS_LIMIT + 1, ten_thousand_lines())

    with pytest.raises(ApiException) as refused:
        create_timed(api_client, ns, bare_pod("over-0", scheduling_map, node_name=expected_node(0)))

    # The webhook sees a pod created on a node before the API server's own size
    # check and refuses it first, saying which annotation to shorten.
    assert refused.value.status == 422
    assert "gpu-scheduling-map" in refused.value.body
    assert "262144" in refused.value.body
    assert list_pods(api_client, ns) == []
