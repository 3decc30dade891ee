"""/mutate-workloads: a StatefulSet or Job of ours gets the bind entries in its pod template,
once, at apply (the chart's workloads.mutate.gpu-scheduler before 1.36).

After the patch every container of the template reads as given by the bind
(placement.container_devices), which is what makes its pods match no condition of the
pod-level mutation; what the chart's MutatingAdmissionPolicy does on 1.36+ is checked against
the real kube-apiserver in tests/e2e/test_bind_mode_admission.py.
"""

import copy

import jsonpatch
import pytest
from gpu_scheduler.placement import FROM_BIND, bind_env_entry, container_devices
from gpu_scheduler.webhook.admission import ALLOWED, PATCHED, BadRequest, mutate_workload
from test_webhook_admission import ORDER, patch_of, review

SCHEDULER = "gpu-scheduler"
CUDA = "CUDA_VISIBLE_DEVICES"
STATEFULSET = ("apps", "v1", "StatefulSet")
JOB = ("batch", "v1", "Job")


def workload(containers, init_containers=(), scheduler=SCHEDULER, annotations=None):
    spec = {"schedulerName": scheduler, "containers": copy.deepcopy(containers)}
    if init_containers:
        spec["initContainers"] = copy.deepcopy(list(init_containers))
    template = {
        "metadata": {"annotations": {"gpu-scheduling-map": "0=node1:0\n"} if annotations is None else annotations},
        "spec": spec,
    }
    return {"metadata": {"name": "train", "namespace": "ml"}, "spec": {"replicas": 1, "template": template}}


def admitted(obj, kind=STATEFULSET, operation="CREATE", old=None):
    body = review(obj, kind=kind, operation=operation)
    if operation == "UPDATE":
        # By default an update that changes the template: from one without the container "side".
        if old is None:
            old = copy.deepcopy(obj)
            old["spec"]["template"]["spec"]["containers"] = obj["spec"]["template"]["spec"]["containers"][:1]
        body["request"]["oldObject"] = old
    decision = mutate_workload(body, SCHEDULER)
    if decision.result != PATCHED:
        return decision, obj
    return decision, jsonpatch.JsonPatch(patch_of(decision)).apply(obj)


@pytest.mark.parametrize(("kind", "operation"), [(STATEFULSET, "CREATE"), (STATEFULSET, "UPDATE"), (JOB, "CREATE")])
def test_every_container_of_the_template_gets_the_bind_entry(kind, operation):
    obj = workload(
        [{"name": "main", "env": [{"name": "A", "value": "1"}, {"name": CUDA, "value": "7"}]}, {"name": "side"}],
        init_containers=[{"name": "fetch"}],
    )
    decision, placed = admitted(obj, kind, operation)
    assert decision.result == PATCHED
    assert all(op["path"].startswith("/spec/template/spec/") for op in patch_of(decision))
    pod_spec = placed["spec"]["template"]["spec"]
    assert pod_spec["containers"][0]["env"] == [{"name": "A", "value": "1"}, bind_env_entry(), ORDER]
    assert pod_spec["containers"][1]["env"] == [bind_env_entry(), ORDER]
    assert pod_spec["initContainers"][0]["env"] == [bind_env_entry(), ORDER]
    assert container_devices(placed["spec"]["template"]).values == (
        ("fetch", FROM_BIND),
        ("main", FROM_BIND),
        ("side", FROM_BIND),
    )
    # Everything but the env entries is as applied.
    for container in pod_spec["containers"] + pod_spec["initContainers"]:
        del container["env"]
    assert placed["spec"]["template"]["metadata"] == obj["spec"]["template"]["metadata"]


def test_a_template_that_has_the_entries_gets_no_patch():
    obj = workload([{"name": "main", "env": [bind_env_entry(), ORDER]}])
    decision, placed = admitted(obj)
    assert decision.result == ALLOWED
    assert placed == obj


def test_an_update_that_leaves_the_template_alone_changes_nothing():
    """Seen on kube-apiserver 1.37: adding the entries at a label's update of a StatefulSet
    of before the install started a rollout (a new generation)."""
    obj = workload([{"name": "main"}])
    decision, placed = admitted(obj, operation="UPDATE", old=copy.deepcopy(obj))
    assert decision.result == ALLOWED and placed == obj
    assert "patch" not in decision.review["response"]


def test_a_jobs_update_is_left_alone():
    """Seen on kube-apiserver 1.37: a Job's template is immutable, so adding the entries at
    an update (a label) made the API server refuse the update."""
    obj = workload([{"name": "main"}])
    old = copy.deepcopy(obj)
    old["spec"]["template"]["spec"]["containers"][0]["image"] = "other"
    decision, placed = admitted(obj, kind=JOB, operation="UPDATE", old=old)
    assert decision.result == ALLOWED and placed == obj


def test_a_literal_value_merged_into_the_entry_by_a_server_side_apply_is_replaced():
    """Seen on kube-apiserver 1.37: re-applying a template whose entry had a literal value
    merges that value into the stored entry admission wrote, and an entry with both a value
    and a valueFrom is invalid: the entry must be written again."""
    merged = {**bind_env_entry(), "value": "3"}
    obj = workload([{"name": "main", "env": [merged, ORDER]}])
    stored = workload([{"name": "main", "env": [bind_env_entry(), ORDER]}])
    decision, placed = admitted(obj, operation="UPDATE", old=stored)
    assert decision.result == PATCHED
    assert placed["spec"]["template"]["spec"]["containers"][0]["env"] == [bind_env_entry(), ORDER]


@pytest.mark.parametrize(
    ("scheduler", "annotations"),
    [("default-scheduler", None), (SCHEDULER, {}), (SCHEDULER, {"other": "x"})],
    ids=["another scheduler", "no annotations", "no map"],
)
def test_templates_of_other_schedulers_or_without_a_map_are_left_alone(scheduler, annotations):
    obj = workload([{"name": "main"}], scheduler=scheduler, annotations=annotations)
    decision, placed = admitted(obj)
    assert decision.result == ALLOWED
    assert "patch" not in decision.review["response"]
    assert placed == obj


def test_a_broken_map_is_not_judged_here():
    obj = workload([{"name": "main"}], annotations={"gpu-scheduling-map": "0=node1\n"})
    decision, _ = admitted(obj)
    assert decision.result == PATCHED  # /validate refuses it, naming the line


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (("apps", "v1", "ReplicaSet"), "/mutate-workloads handles StatefulSet, Job; got apps/ReplicaSet"),
        (("", "v1", "Pod"), "got core/Pod"),
    ],
)
def test_other_kinds_are_a_misconfigured_webhook(kind, message):
    with pytest.raises(BadRequest, match=message):
        mutate_workload(review(workload([{"name": "main"}]), kind=kind), SCHEDULER)


def test_a_template_that_is_not_an_object_is_a_bad_request():
    obj = workload([{"name": "main"}])
    obj["spec"]["template"] = ["not", "an", "object"]
    with pytest.raises(BadRequest, match="request.object.spec.template must be an object"):
        mutate_workload(review(obj, kind=STATEFULSET), SCHEDULER)
