"""Pure parts of the API adapters: rate limit, binding requests and answers, trimmed pods."""

import copy

import pytest
from gpu_scheduler.kube.binder import BindOutcome, binding_body, classify
from gpu_scheduler.kube.client import TokenBucket
from gpu_scheduler.kube.objects import assigned_pod, is_terminal, node_info, pod_requests, trim_pending_pod
from gpu_scheduler.placement import BIND_ANNOTATIONS, annotation_bytes, bind_annotations, parse_map
from gpu_scheduler.scheduling import AssignedPod, Taint


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


def test_binding_carries_the_map_lines_devices_as_annotations():
    entry = parse_map("3=node4:0,2\n")[3]
    body = binding_body("ml", "a-3", "u1", "node4", bind_annotations(entry))
    assert body["metadata"]["annotations"] == {
        "gpu-scheduler/cuda-visible-devices": "0,2",
        "gpu-scheduler/placement": '{"index":3,"node":"node4","cudaVisibleDevices":"0,2"}',
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


@pytest.mark.parametrize(
    ("status", "message", "maybe_stored"),
    [(0, "", True), (500, "", True), (504, "", True), (409, ETCD_DOWN, True), (403, "", False), (422, "", False)],
)
def test_a_failed_binding_may_have_been_stored_unless_a_4xx_proves_otherwise(status, message, maybe_stored):
    # Seen in the fault tests: etcd committed a binding answered 409 "rpc error: Unavailable".
    assert classify(status, message).maybe_stored is maybe_stored
    assert classify(201).maybe_stored is False and classify(409, ALREADY).maybe_stored is False


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
            "gpu-scheduler/placement": '{"index":1,"node":"node2","cudaVisibleDevices":"2"}',
            "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 10000 + "}",
        },
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "train", "uid": "s1", "controller": True}
        ],
        "managedFields": [{"manager": "kubectl"}],
    },
    "spec": {
        "schedulerName": "gpu-scheduler",
        "initContainers": [
            {"name": "setup", "image": "busybox", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "2"}]}
        ],
        "containers": [
            {
                "name": "c",
                "image": "busybox",
                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
                "env": [
                    {"name": "CUDA_VISIBLE_DEVICES", "value": "2"},
                    {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"},
                    {"name": "DATA", "value": "/data"},
                ],
            },
            {"name": "log-shipper", "image": "busybox"},
        ],
        "nodeSelector": {"disk": "ssd"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {}}],
            },
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
        },
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    },
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "m",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-12-07T10:00:00Z",
            },
            {"type": "Ready", "status": "False"},
        ],
    },
}


def test_trimmed_pod_keeps_what_scheduling_reads_and_nothing_else():
    assert trim_pending_pod(FULL_POD) == {
        "metadata": {
            "namespace": "ml",
            "name": "train-1",
            "uid": "u1",
            "resourceVersion": "42",
            "annotations": {"gpu-scheduling-map": "1=node2:2\n"},
            # Every label: other pods' anti-affinity terms may name any of them.
            "labels": {"app": "train", "apps.kubernetes.io/pod-index": "1"},
            # The owner's name: a gang is the pods of one owner (placement.gang).
            "ownerReferences": [{"kind": "StatefulSet", "name": "train", "controller": True}],
        },
        "spec": {
            "schedulerName": "gpu-scheduler",
            "nodeName": "",
            "nodeSelector": {"disk": "ssd"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            },
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
            # What the webhook gave each container; the placement annotation is not kept: nothing reads it.
            "initContainers": ({"name": "setup", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "2"}]},),
            "containers": (
                {"name": "c", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "2"}]},
                {"name": "log-shipper"},
            ),
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "m",
                    "lastTransitionTime": "2026-12-07T10:00:00Z",
                }
            ],
        },
        "requests": (("cpu", 250), ("memory", 2**30)),
        # Its annotations' size but the Binding's two: with theirs they must fit Kubernetes' limit.
        "annotationBytes": annotation_bytes(
            {k: v for k, v in FULL_POD["metadata"]["annotations"].items() if k not in BIND_ANNOTATIONS}
        ),
    }


def test_pods_given_the_same_devices_share_one_copy_of_their_trimmed_containers():
    # 10,000 cached pods: a StatefulSet's pods differ in a few device lists, so they share them.
    first, second = copy.deepcopy(FULL_POD), copy.deepcopy(FULL_POD)
    second["metadata"]["name"] = "train-5"
    assert trim_pending_pod(first)["spec"]["containers"] is trim_pending_pod(second)["spec"]["containers"]
    second["spec"]["containers"][0]["env"][0]["value"] = "3"
    assert trim_pending_pod(second)["spec"]["containers"][0]["env"] == [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]


def test_pods_of_one_statefulset_share_one_copy_of_the_map_text():
    first = {"metadata": {"annotations": {"gpu-scheduling-map": "".join(["0=node1:0\n", "1=node2:1\n"])}}}
    second = {"metadata": {"annotations": {"gpu-scheduling-map": "".join(["0=node1:0\n", "1=node2:1\n"])}}}
    assert (
        first["metadata"]["annotations"]["gpu-scheduling-map"]
        is not second["metadata"]["annotations"]["gpu-scheduling-map"]
    )
    a = trim_pending_pod(first)["metadata"]["annotations"]["gpu-scheduling-map"]
    b = trim_pending_pod(second)["metadata"]["annotations"]["gpu-scheduling-map"]
    assert a is b


def test_only_succeeded_and_failed_pods_are_terminal():
    assert [is_terminal({"status": {"phase": p}}) for p in ("Pending", "Running", "Succeeded", "Failed")] == [
        False,
        False,
        True,
        True,
    ]


def _requests(containers=(), init=(), overhead=None, pod_level=None):
    def container(requests, sidecar=False):
        c = {"name": "c", "resources": {"requests": requests}}
        if sidecar:
            c["restartPolicy"] = "Always"
        return c

    spec = {
        "containers": [container(r) for r in containers],
        "initContainers": [container(r, sidecar=s) for r, s in init],
    }
    if overhead:
        spec["overhead"] = overhead
    if pod_level:
        spec["resources"] = {"requests": pod_level}
    return dict(pod_requests({"spec": spec}))


def test_pod_requests_are_summed_parsed_and_rounded_up_like_kube_scheduler():
    assert _requests([{"cpu": "100m", "memory": "1Gi"}, {"cpu": "1", "nvidia.com/gpu": "2"}]) == {
        "cpu": 1100,
        "memory": 2**30,
        "nvidia.com/gpu": 2,
    }
    assert _requests([{"cpu": "0.0001"}, {"memory": "1.5"}]) == {"cpu": 1, "memory": 2}  # rounded up
    assert _requests([{"cpu": "not a quantity"}]) == {}
    assert _requests([]) == {}


def test_init_containers_count_at_their_peak_and_sidecars_for_the_whole_life():
    # The init container (2 cpu) runs before the sidecar starts; the sidecar (500m) runs
    # beside the app (1 cpu): 1.5 cpu for the pod's life, 2 cpu at the init step.
    assert _requests([{"cpu": "1"}], init=[({"cpu": "2"}, False), ({"cpu": "500m"}, True)]) == {"cpu": 2000}
    # An init container after the sidecar runs beside it: 3 + 0.5.
    assert _requests([{"cpu": "1"}], init=[({"cpu": "500m"}, True), ({"cpu": "3"}, False)]) == {"cpu": 3500}
    assert _requests([{"cpu": "1"}], overhead={"cpu": "250m", "memory": "64Mi"}) == {"cpu": 1250, "memory": 64 * 2**20}
    assert _requests([{"cpu": "1", "memory": "1Gi"}], pod_level={"cpu": "4"}) == {"cpu": 4000, "memory": 2**30}


def test_an_assigned_pod_holds_gpus_only_when_it_is_this_schedulers():
    given = [{"name": "CUDA_VISIBLE_DEVICES", "value": "1"}]
    pod = {
        "metadata": {
            "namespace": "ml",
            "name": "a-0",
            "uid": "u1",
            "annotations": {
                "gpu-scheduling-map": "0=node1:0,1\n",
                "gpu-scheduler/placement": '{"cudaVisibleDevices":"1"}',
            },
        },
        "spec": {
            "schedulerName": "gpu-scheduler",
            "nodeName": "node1",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}, "env": given}],
        },
    }
    assert assigned_pod(pod, "gpu-scheduler") == AssignedPod("u1", "ml/a-0", "node1", (("cpu", 2000),), ("1",))
    other = {**pod, "spec": {**pod["spec"], "schedulerName": "default-scheduler"}}
    assert assigned_pod(other, "gpu-scheduler").devices == ()
    assert assigned_pod(other, "gpu-scheduler").requests == (("cpu", 2000),)
    no_injection = {**pod, "spec": {**pod["spec"], "containers": [{"name": "c"}]}}
    assert assigned_pod(no_injection, "gpu-scheduler").devices == ("0", "1")


def test_a_node_is_read_with_its_labels_taints_and_allocatable_parsed():
    info = node_info(
        {
            "metadata": {"name": "n1", "labels": {"gpu-node-name": "gpu1", "zone": "a"}},
            "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "3500m", "memory": "2Gi", "pods": "110", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )
    assert (info.name, info.alias, info.ready, info.gpus, info.gpus_advertised) == ("n1", "gpu1", True, 8, True)
    assert info.labels == {"gpu-node-name": "gpu1", "zone": "a"}
    assert info.taints == (Taint("gpu", "yes", "NoSchedule"),)
    assert dict(info.allocatable) == {"cpu": 3500, "memory": 2**31, "pods": 110, "nvidia.com/gpu": 8}
