"""Admission decisions beyond the golden files: request checks, operations, warnings."""

import base64
import copy
import json

import pytest
from gpu_scheduler.webhook.admission import (
    ALLOWED,
    DENIED,
    MAX_MESSAGE,
    PATCHED,
    BadRequest,
    mutate,
    validate,
)
from gpu_scheduler.webhook.nodes import NodeFacts, NodeReadError
from inventories import GPU0, ONE_A100

SCHEDULER = "gpu-scheduler"
MAP = "0=node1:0,1\n1=node2:2\n2=node3:0,1,2\n"


def pod(index=2, annotations=None, scheduler=SCHEDULER, containers=None):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{index}",
            "labels": {"apps.kubernetes.io/pod-index": str(index)},
            "annotations": {"gpu-scheduling-map": MAP} if annotations is None else annotations,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": "train",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": containers or [{"name": "main", "image": "x"}],
        },
    }


def review(obj, kind=("", "v1", "Pod"), operation="CREATE", namespace="ml", sub_resource=None):
    group, version, name = kind
    request = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": group, "version": version, "kind": name},
        "resource": {
            "group": group,
            "version": version,
            "resource": name.lower() + "s",
        },
        "operation": operation,
        "namespace": namespace,
        "object": obj,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": request,
    }


def workload(kind, spec=None, annotations=None, scheduler=SCHEDULER, name="train"):
    template = {
        "metadata": {"annotations": {"gpu-scheduling-map": MAP} if annotations is None else annotations},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "x"}],
        },
    }
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"template": template, **(spec or {})},
    }


def created_on(node_name, obj):
    """`obj` created with spec.nodeName: no Binding will give it its devices, so the
    webhook reads its map (and refuses what the scheduler would have refused)."""
    obj["spec"]["nodeName"] = node_name
    return obj


def patch_of(decision):
    return json.loads(base64.b64decode(decision.review["response"]["patch"]))


# -- requests that are not AdmissionReviews --------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the body must be an object"),
        ("review", "the body must be an object"),
        (
            {
                "apiVersion": "admission.k8s.io/v1beta1",
                "kind": "AdmissionReview",
                "request": {},
            },
            "admissionReviewVersions: [v1]",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "Pod"},
            "expected apiVersion admission.k8s.io/v1 and kind AdmissionReview",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "request must be an object",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"kind": {}},
            },
            "request.uid",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "", "kind": {}},
            },
            "request.uid",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u"},
            },
            "request.kind must be an object",
        ),
    ],
)
def test_malformed_reviews_are_bad_requests_that_say_what_is_wrong(body, message):
    for decide in (mutate, validate):
        with pytest.raises(BadRequest, match=None) as caught:
            decide(body, SCHEDULER)
        assert message in str(caught.value)


def test_mutate_refuses_other_kinds_so_a_wrong_rule_shows():
    with pytest.raises(BadRequest, match="/mutate handles Pods, got 'Deployment'"):
        mutate(review(workload("Deployment"), kind=("apps", "v1", "Deployment")), SCHEDULER)


def test_validate_refuses_kinds_without_a_pod_template():
    with pytest.raises(BadRequest, match="got core/ConfigMap"):
        validate(review({"metadata": {"name": "c"}}, kind=("", "v1", "ConfigMap")), SCHEDULER)


@pytest.mark.parametrize(
    ("mangle", "where"),
    [
        (
            lambda p: p.update(spec={"schedulerName": SCHEDULER, "containers": {"name": "x"}}),
            "request.object.spec.containers",
        ),
        (
            lambda p: p["spec"]["containers"][0].update(env={"A": "1"}),
            "request.object.spec.containers[0].env",
        ),
        (
            lambda p: p["metadata"].update(labels={"apps.kubernetes.io/pod-index": 2}),
            "request.object.metadata.labels",
        ),
        (
            lambda p: p["metadata"].update(annotations=["gpu-scheduling-map"]),
            "request.object.metadata.annotations",
        ),
        (lambda p: p["metadata"].update(name=7), "request.object.metadata.name"),
        (lambda p: p.update(metadata="train-2"), "request.object.metadata"),
        (
            lambda p: p["spec"].update(schedulerName=["gpu-scheduler"]),
            "request.object.spec.schedulerName",
        ),
    ],
)
def test_mistyped_pod_fields_are_bad_requests_naming_the_field(mangle, where):
    broken = pod()
    mangle(broken)
    with pytest.raises(BadRequest, match=None) as caught:
        mutate(review(broken), SCHEDULER)
    assert str(caught.value).startswith(where)


# -- /mutate ---------------------------------------------------------------


@pytest.mark.pipeline_sample
def test_patched_decision_reports_index_node_and_devices_for_the_log():
    decision = mutate(review(created_on("node3", pod(2))), SCHEDULER)
    assert decision.result == PATCHED
    assert decision.fields == {
        "pod": "ml/train-2",
        "index": 2,
        "node": "node3",
        "devices": "0,1,2",
    }
    assert decision.review["response"]["patchType"] == "JSONPatch"
    assert decision.review["response"]["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002"


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_mutate_leaves_existing_pods_alone(operation):
    decision = mutate(review(pod(2), operation=operation), SCHEDULER)
    assert decision.result == ALLOWED
    assert decision.review["response"] == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }


# A node name longer than a label value (63 characters): never an alias.
LONG_NODE = "gpu-worker-03.rack-17.frankfurt-2.training-cluster.example.internal"


def pinned(node_name, line_node):
    """A pod created with spec.nodeName set, whose map line names `line_node`."""
    created = pod(2, annotations={"gpu-scheduling-map": f"2={line_node}:0,1,2\n"})
    created["spec"]["nodeName"] = node_name
    return review(created)


def test_a_pod_created_on_another_node_than_its_map_line_names_is_refused_naming_both():
    # Issue 16, point 10: it was given the line's devices on the node it named itself.
    assert len(LONG_NODE) > 63
    decision = mutate(pinned("node1", LONG_NODE), SCHEDULER)
    assert decision.result == DENIED
    message = decision.review["response"]["status"]["message"]
    assert message.startswith(
        f"pod ml/train-2: spec.nodeName is node1 but line 1 of its gpu-scheduling-map names node {LONG_NODE}"
    )
    assert "CUDA_VISIBLE_DEVICES=0,1,2" in message
    assert decision.fields["nodeName"] == "node1"


def test_without_node_access_a_pod_created_on_a_node_its_line_may_name_by_alias_gets_a_warning_naming_both():
    # node3 may be kind-worker's alias label, or another node: only reading the node can tell.
    decision = mutate(pinned("kind-worker", "node3"), SCHEDULER)
    assert decision.result == PATCHED
    assert decision.review["response"]["warnings"] == [
        "pod ml/train-2: spec.nodeName kind-worker is not node3, the node of line 1 of its map; "
        "unless node3 is kind-worker's alias label, it gets another node's devices (0,1,2); "
        "not checked: the webhook may not read nodes"
    ]


class Nodes:
    """The webhook's NodeReader as admission uses it, over a fixed set of nodes
    (the reader itself: test_webhook_nodes.py, and against kube-apiserver
    tests/e2e/test_webhook_node_reader.py)."""

    alias_label = "gpu-node-name"

    def __init__(self, aliases, error=None, inventories=None):
        self.aliases, self.error, self.asked = aliases, error, []
        self.inventories = inventories or {}

    def node(self, name):
        self.asked.append(name)
        if self.error:
            raise NodeReadError(self.error)
        if name not in self.aliases:
            return None
        return NodeFacts(name, self.aliases[name], self.inventories.get(name))

    def inventory(self, name):
        # As NodeReader does before its watch of the nodes that publish GPUs is current.
        facts = self.node(name)
        return None if facts is None else facts.inventory


def test_a_pod_created_on_the_node_whose_alias_its_line_names_is_admitted_without_a_warning():
    nodes = Nodes({"kind-worker": "node3"})
    decision = mutate(pinned("kind-worker", "node3"), SCHEDULER, nodes)
    assert decision.result == PATCHED
    assert "warnings" not in decision.review["response"]
    # kind-worker for its alias; node3, the line's node, for its GPUs (none by that name).
    assert nodes.asked == ["kind-worker", "node3"]


@pytest.mark.parametrize(
    ("aliases", "why"),
    [
        ({"kind-worker": "node1"}, "kind-worker's gpu-node-name label is node1"),
        ({"kind-worker": None}, "kind-worker has no gpu-node-name label"),
        ({}, "no node kind-worker exists"),
    ],
)
def test_a_pod_created_on_a_node_whose_alias_is_not_its_lines_node_is_refused_naming_both(aliases, why):
    # Issue 16, point 10: it was admitted with a warning and ran with node3's devices.
    decision = mutate(pinned("kind-worker", "node3"), SCHEDULER, Nodes(aliases))
    assert decision.result == DENIED
    message = decision.review["response"]["status"]["message"]
    assert message == (
        "pod ml/train-2: spec.nodeName is kind-worker but line 1 of its gpu-scheduling-map names node node3 "
        f"(and {why}), so it would run on kind-worker with CUDA_VISIBLE_DEVICES=0,1,2, devices of node3; "
        "leave spec.nodeName out (gpu-scheduler binds the pod to its line's node) or make the two agree"
    )


def test_a_node_that_cannot_be_read_gets_a_warning_not_a_failed_admission():
    nodes = Nodes({}, error="could not read node kind-worker: GET /api/v1/nodes/kind-worker: HTTP 403: forbidden")
    decision = mutate(pinned("kind-worker", "node3"), SCHEDULER, nodes)
    assert decision.result == PATCHED
    (warning,) = decision.review["response"]["warnings"]
    assert warning.endswith(
        "not checked: could not read node kind-worker: GET /api/v1/nodes/kind-worker: HTTP 403: forbidden"
    )


def test_a_device_the_lines_node_does_not_have_is_refused_listing_its_gpus():
    # Issue 19, point 3: checked at admission where the node publishes its GPUs.
    nodes = Nodes({"node3": "node3"}, inventories={"node3": ONE_A100})
    decision = mutate(pinned("node3", "node3"), SCHEDULER, nodes)
    assert decision.result == DENIED
    assert decision.review["response"]["status"]["message"] == (
        "pod ml/train-2: line 1 of its gpu-scheduling-map names GPU 1, 2 on node node3, which has no such GPU "
        f"(its GPUs: 0 {GPU0} (NVIDIA A100-SXM4-40GB))"
    )


def test_devices_are_not_checked_where_the_node_publishes_no_inventory_or_cannot_be_read():
    assert mutate(pinned("node3", "node3"), SCHEDULER, Nodes({"node3": "node3"})).result == PATCHED
    assert mutate(pinned("node3", "node3"), SCHEDULER, Nodes({}, error="no answer")).result == PATCHED


def test_a_line_node_too_long_for_an_alias_is_refused_without_reading_the_node():
    nodes = Nodes({"node1": LONG_NODE})
    assert mutate(pinned("node1", LONG_NODE), SCHEDULER, nodes).result == DENIED
    assert nodes.asked == []


@pytest.mark.parametrize("node_name", ["node3", LONG_NODE, None])
def test_a_pod_created_on_its_map_lines_node_or_on_none_is_admitted_without_a_warning(node_name):
    decision = mutate(pinned(node_name, node_name or "node3"), SCHEDULER)
    assert decision.result == PATCHED
    assert "warnings" not in decision.review["response"]


PLACED = '{"index":2,"node":"node3","cudaVisibleDevices":"0,1,2"}'
ORDER = {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}


ADMITTED_ENV = [{"name": "OTHER", "value": "1"}, {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2"}, ORDER]


def debugged(before, added, annotations=None, env=ADMITTED_ENV):
    """A review of `kubectl debug` on a running pod of ours: ephemeral containers
    `before` in oldObject, `before + added` in object; its container has `env`, by
    default what the webhook gave it at creation."""
    running = pod(2, containers=[{"name": "main", "env": copy.deepcopy(env)}])
    running["metadata"]["annotations"]["gpu-scheduler/placement"] = PLACED
    if annotations is not None:
        running["metadata"]["annotations"] = annotations
    old = copy.deepcopy(running)
    old["spec"]["ephemeralContainers"] = copy.deepcopy(before)
    running["spec"]["ephemeralContainers"] = copy.deepcopy(before + added)
    body = review(running, operation="UPDATE", sub_resource="ephemeralcontainers")
    body["request"]["oldObject"] = old
    return body


def test_a_new_debug_container_gets_the_devices_and_nothing_else_is_touched():
    decision = mutate(debugged([], [{"name": "debugger", "image": "busybox"}]), SCHEDULER)
    assert patch_of(decision) == [
        {
            "op": "add",
            "path": "/spec/ephemeralContainers/0/env",
            "value": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2"}, ORDER],
        }
    ]
    assert decision.fields == {
        "pod": "ml/train-2",
        "subresource": "ephemeralcontainers",
        "devices": "0,1,2",
    }


def test_ephemeral_containers_already_there_are_never_changed():
    """The API server refuses any change to an existing ephemeral container: patching
    the first debug container again would make every later `kubectl debug` fail."""
    first = {"name": "debugger-1", "image": "busybox"}  # added before the webhook knew
    decision = mutate(debugged([first], [{"name": "debugger-2", "image": "busybox"}]), SCHEDULER)
    assert [operation["path"] for operation in patch_of(decision)] == ["/spec/ephemeralContainers/1/env"]


def test_a_debug_container_gets_the_devices_given_at_creation_not_the_maps_current_line():
    annotations = {"gpu-scheduling-map": "2=node3:3\n", "gpu-scheduler/placement": PLACED}
    decision = mutate(debugged([], [{"name": "debugger"}], annotations=annotations), SCHEDULER)
    assert patch_of(decision)[0]["value"][0] == {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2"}


def test_a_debug_container_gets_its_pods_devices_even_after_the_placement_annotation_was_edited():
    # Issue 16, point 3: `kubectl annotate --overwrite gpu-scheduler/placement=...` then
    # `kubectl debug` gave the debug container GPU 3, which another pod may hold.
    edited = '{"index":2,"node":"node3","cudaVisibleDevices":"3"}'
    annotations = {"gpu-scheduling-map": MAP, "gpu-scheduler/placement": edited}
    decision = mutate(debugged([], [{"name": "debugger"}], annotations=annotations), SCHEDULER)
    assert patch_of(decision)[0]["value"][0] == {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2"}


def test_a_broken_map_never_stops_a_debug_container():
    annotations = {"gpu-scheduling-map": "this is broken", "gpu-scheduler/placement": PLACED}
    decision = mutate(debugged([], [{"name": "debugger"}], annotations=annotations), SCHEDULER)
    assert decision.result == PATCHED


def test_a_pod_created_without_the_webhook_gives_its_debug_container_nothing():
    created_without = debugged([], [{"name": "debugger"}], annotations={"gpu-scheduling-map": MAP}, env=[])
    decision = mutate(created_without, SCHEDULER)
    assert decision.result == ALLOWED
    assert "patch" not in decision.review["response"]
    # A recorded placement without devices in the containers is no more than a claim.
    decision = mutate(debugged([], [{"name": "debugger"}], env=[]), SCHEDULER)
    assert decision.result == ALLOWED
    assert "patch" not in decision.review["response"]


def test_a_debug_request_without_the_old_pod_is_a_bad_request():
    body = debugged([], [{"name": "debugger"}])
    del body["request"]["oldObject"]
    with pytest.raises(BadRequest, match="request.oldObject"):
        mutate(body, SCHEDULER)


def test_pod_of_another_scheduler_is_allowed_even_with_a_broken_map():
    decision = mutate(
        review(
            pod(
                2,
                annotations={"gpu-scheduling-map": "nonsense"},
                scheduler="default-scheduler",
            )
        ),
        SCHEDULER,
    )
    assert decision.result == ALLOWED
    assert "patch" not in decision.review["response"]


def test_only_pods_of_our_scheduler_count_as_examined_for_the_log():
    assert mutate(review(pod(2, scheduler="default-scheduler")), SCHEDULER).examined is False
    assert mutate(review(pod(2), operation="UPDATE"), SCHEDULER).examined is False
    assert mutate(review(pod(2)), SCHEDULER).examined is True
    assert mutate(review(created_on("node3", pod(9))), SCHEDULER).examined is True  # denied: no line 9


def test_scheduler_name_is_configurable():
    assert mutate(review(pod(2)), "other-gpu-scheduler").result == ALLOWED
    assert mutate(review(pod(2, scheduler="other-gpu-scheduler")), "other-gpu-scheduler").result == PATCHED


def test_denial_names_the_pod_with_the_request_namespace_and_every_bad_line():
    broken = created_on("node2", pod(1, annotations={"gpu-scheduling-map": "0=node1:0\n1=node2:a\n2=:1\n"}))
    decision = mutate(review(broken, namespace="team-a"), SCHEDULER)
    assert decision.result == DENIED
    status = decision.review["response"]["status"]
    assert status["code"] == 422
    assert status["message"].startswith("pod team-a/train-1: gpu-scheduling-map: line 2: ")
    assert "; line 3: missing node name" in status["message"]
    assert decision.review["response"]["allowed"] is False


def test_denial_message_stays_short_for_an_enormous_map():
    huge = "\n".join(f"{i}=node{i}:{'x' * 200}" for i in range(5000))
    decision = mutate(review(created_on("node1", pod(1, annotations={"gpu-scheduling-map": huge}))), SCHEDULER)
    assert decision.result == DENIED
    assert len(decision.review["response"]["status"]["message"]) <= MAX_MESSAGE


def test_pod_without_name_or_index_is_denied_naming_its_generate_name():
    bare = created_on("node1", pod(0))
    bare["metadata"] = {
        "generateName": "worker-",
        "annotations": {"gpu-scheduling-map": MAP},
    }
    decision = mutate(review(bare, namespace="team-b"), SCHEDULER)
    assert decision.result == DENIED
    message = decision.review["response"]["status"]["message"]
    assert "team-b/worker-<generated>" in message
    assert "name it <name>-<index>" in message


# -- /validate -------------------------------------------------------------


def test_cronjob_map_is_checked_in_its_job_template():
    cron = {
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {
                "spec": workload(
                    "Job",
                    {"completionMode": "Indexed"},
                    annotations={"gpu-scheduling-map": "0=node1"},
                )["spec"]
            },
        },
    }
    decision = validate(review(cron, kind=("batch", "v1", "CronJob")), SCHEDULER)
    assert decision.result == DENIED
    assert decision.review["response"]["status"]["message"].startswith(
        "CronJob ml/nightly: gpu-scheduling-map in spec.jobTemplate.spec.template.metadata.annotations: line 1: "
    )


def test_non_indexed_job_is_allowed_with_a_warning():
    decision = validate(
        review(workload("Job", {"completions": 2}), kind=("batch", "v1", "Job")),
        SCHEDULER,
    )
    assert decision.result == ALLOWED
    expected = (
        "Job ml/train: pods of a non-Indexed Job have no stable index, so gpu-scheduler will deny them; "
        "use a StatefulSet or an Indexed Job, or a line `*=*:gpus=<count>` for every pod"
    )
    assert decision.review["response"]["warnings"] == [expected]


def test_a_map_with_a_line_for_every_pod_warns_of_no_index():
    for kind, spec in (("Deployment", {"replicas": 3}), ("Job", {"completions": 2}), ("StatefulSet", {"replicas": 9})):
        obj = workload(kind, spec, annotations={"gpu-scheduling-map": "0=node1:0\n*=*[pool=a100]:gpus=2\n"})
        decision = validate(review(obj, kind=("apps" if kind != "Job" else "batch", "v1", kind)), SCHEDULER)
        assert decision.result == ALLOWED, kind
        assert not decision.review["response"].get("warnings"), kind


def test_a_pod_created_on_a_node_with_a_count_line_is_denied():
    obj = created_on("node1", pod(0, annotations={"gpu-scheduling-map": "0=*:gpus=1\n"}))
    decision = mutate(review(obj), SCHEDULER)
    assert decision.result == DENIED
    message = decision.review["response"]["status"]["message"]
    assert "asks the scheduler to choose 1 GPU on any node, but spec.nodeName node1" in message


def test_statefulset_ordinals_start_is_taken_into_account():
    sts = workload("StatefulSet", {"replicas": 3, "ordinals": {"start": 1}})
    warnings = validate(review(sts, kind=("apps", "v1", "StatefulSet")), SCHEDULER).review["response"]["warnings"]
    assert warnings == ["StatefulSet ml/train: gpu-scheduling-map has no line for index 3; those pods will be denied"]


def test_missing_index_warning_lists_at_most_ten():
    job = workload("Job", {"completionMode": "Indexed", "completions": 40})
    (warning,) = validate(review(job, kind=("batch", "v1", "Job")), SCHEDULER).review["response"]["warnings"]
    assert warning.endswith("index 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 and 27 more; those pods will be denied")


@pytest.mark.parametrize("replicas", ["5", None, True, -3])
def test_odd_replica_values_only_skip_the_warning(replicas):
    sts = workload("StatefulSet", {"replicas": replicas})
    decision = validate(review(sts, kind=("apps", "v1", "StatefulSet")), SCHEDULER)
    assert decision.result == ALLOWED
    assert "warnings" not in decision.review["response"]


def test_object_being_deleted_is_never_blocked():
    sts = workload("StatefulSet", annotations={"gpu-scheduling-map": "broken"})
    sts["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    assert (
        validate(
            review(sts, kind=("apps", "v1", "StatefulSet"), operation="UPDATE"),
            SCHEDULER,
        ).result
        == ALLOWED
    )


@pytest.mark.parametrize(
    ("operation", "sub_resource"),
    [("DELETE", None), ("UPDATE", "status"), ("UPDATE", "scale")],
)
def test_deletes_and_subresources_are_not_validated(operation, sub_resource):
    sts = workload("StatefulSet", annotations={"gpu-scheduling-map": "broken"})
    decision = validate(
        review(
            sts,
            kind=("apps", "v1", "StatefulSet"),
            operation=operation,
            sub_resource=sub_resource,
        ),
        SCHEDULER,
    )
    assert decision.result == ALLOWED


def test_update_with_a_broken_map_is_denied():
    sts = workload("StatefulSet", annotations={"gpu-scheduling-map": "0=node1:0\n0=node1:1"})
    decision = validate(review(sts, kind=("apps", "v1", "StatefulSet"), operation="UPDATE"), SCHEDULER)
    assert decision.result == DENIED
    assert decision.fields["object"] == "StatefulSet ml/train"


def updated(old, new, kind=("", "v1", "Pod")):
    body = review(new, kind=kind, operation="UPDATE")
    body["request"]["oldObject"] = old
    return body


def test_an_update_that_leaves_a_broken_map_alone_is_allowed():
    """The Job controller removes its finalizer from a finished pod: the map was
    broken before and is unchanged, so there is nothing to judge (bug 7)."""
    old = pod(2, annotations={"gpu-scheduling-map": "2=node3\n"})
    old["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    new = copy.deepcopy(old)
    new["metadata"]["finalizers"] = []
    decision = validate(updated(old, new), SCHEDULER)
    assert decision.result == ALLOWED
    assert decision.examined is False


def test_an_update_that_breaks_the_map_is_denied_naming_the_line():
    old = pod(2)
    new = pod(2, annotations={"gpu-scheduling-map": "2=node3\n"})
    decision = validate(updated(old, new), SCHEDULER)
    assert decision.result == DENIED
    assert "line 1:" in decision.review["response"]["status"]["message"]


def test_an_update_that_adds_a_broken_map_is_denied():
    old = pod(2, annotations={})
    decision = validate(updated(old, pod(2, annotations={"gpu-scheduling-map": "nonsense"})), SCHEDULER)
    assert decision.result == DENIED


@pytest.mark.parametrize(
    ("kind", "spec"),
    [
        (("apps", "v1", "StatefulSet"), {"replicas": 3}),
        (("apps", "v1", "Deployment"), {"replicas": 3}),
        (("batch", "v1", "Job"), {"parallelism": 2}),
    ],
)
def test_a_workload_update_that_leaves_a_broken_map_alone_is_allowed(kind, spec):
    old = workload(kind[2], annotations={"gpu-scheduling-map": "nonsense"})
    new = workload(kind[2], spec=spec, annotations={"gpu-scheduling-map": "nonsense"})
    assert validate(updated(old, new, kind), SCHEDULER).result == ALLOWED


def test_a_template_switched_to_our_scheduler_is_judged_even_with_the_same_map():
    old = workload("StatefulSet", annotations={"gpu-scheduling-map": "nonsense"}, scheduler="default-scheduler")
    new = workload("StatefulSet", annotations={"gpu-scheduling-map": "nonsense"})
    assert validate(updated(old, new, ("apps", "v1", "StatefulSet")), SCHEDULER).result == DENIED


def test_a_cronjob_update_is_judged_by_its_job_templates_map():
    def cronjob(text, schedule):
        job = workload("Job", annotations={"gpu-scheduling-map": text})
        return {"metadata": {"name": "nightly"}, "spec": {"schedule": schedule, "jobTemplate": {"spec": job["spec"]}}}

    kind = ("batch", "v1", "CronJob")
    unchanged = updated(cronjob("nonsense", "0 1 * * *"), cronjob("nonsense", "0 2 * * *"), kind)
    assert validate(unchanged, SCHEDULER).result == ALLOWED
    broken = updated(cronjob(MAP, "0 1 * * *"), cronjob("nonsense", "0 1 * * *"), kind)
    assert validate(broken, SCHEDULER).result == DENIED


def test_decisions_do_not_modify_the_review():
    original = review(pod(2))
    kept = copy.deepcopy(original)
    mutate(original, SCHEDULER)
    validate(original, SCHEDULER)
    assert original == kept
