"""`gpu-scheduler webhook` (on 1.35 for every pod of ours lacking the bind entry, and on every
version for pods created on a node and `kubectl debug`).

Every container gets the env entry that reads the devices annotation the scheduler's Binding
writes, so what the scheduler's fail-closed check reads (placement.container_devices) is
FROM_BIND for each; the map is read only for a pod created with spec.nodeName, which no
Binding annotates, and which gets both annotations from the webhook instead.
"""

import copy

import jsonpatch
import pytest
from gpu_scheduler.placement import (
    DEVICES_ANNOTATION,
    FROM_BIND,
    PLACEMENT_ANNOTATION,
    bind_env_entry,
    container_devices,
)
from gpu_scheduler.webhook.admission import ALLOWED, DENIED, PATCHED, TOTAL_ANNOTATION_BYTES, mutate
from gpu_scheduler.webhook.patch import bind_patch
from hypothesis import given
from hypothesis import strategies as st
from test_webhook_admission import ORDER, patch_of, pod, review

SCHEDULER = "gpu-scheduler"
CUDA = "CUDA_VISIBLE_DEVICES"
# As the API server stores it: it defaults fieldRef.apiVersion.
STORED_BIND_ENTRY = {
    "name": CUDA,
    "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{DEVICES_ANNOTATION}']"}},
}


def bind_mutate(body, **kwargs):
    return mutate(body, SCHEDULER, **kwargs)


def applied(body, decision):
    obj = body["request"]["object"]
    if decision.result != PATCHED:
        return obj
    return jsonpatch.JsonPatch(patch_of(decision)).apply(obj)


def test_every_container_and_init_container_gets_the_bind_entry_and_no_annotation():
    new = pod(2, containers=[{"name": "main", "env": [{"name": CUDA, "value": "7"}]}, {"name": "side"}])
    new["spec"]["initContainers"] = [{"name": "fetch"}]
    body = review(new)
    decision = bind_mutate(body)
    assert decision.result == PATCHED
    placed = applied(body, decision)
    for container in placed["spec"]["initContainers"] + placed["spec"]["containers"]:
        assert container["env"] == [bind_env_entry(), ORDER], container["name"]
    assert placed["metadata"]["annotations"] == new["metadata"]["annotations"]  # the bind writes them
    assert container_devices(placed).values == (("fetch", FROM_BIND), ("main", FROM_BIND), ("side", FROM_BIND))


def test_a_pod_whose_containers_all_read_the_bind_is_left_alone():
    containers = [{"name": "main", "env": [copy.deepcopy(STORED_BIND_ENTRY)]}]
    decision = bind_mutate(review(pod(2, containers=containers)))
    assert decision.result == ALLOWED
    assert "patch" not in decision.review["response"]


def test_a_broken_map_is_not_read_for_a_pod_the_scheduler_will_bind():
    """The scheduler reads the map at bind and refuses a broken one for good (FailedScheduling),
    as with the 1.36+ MutatingAdmissionPolicy, which parses no map either."""
    decision = bind_mutate(review(pod(2, annotations={"gpu-scheduling-map": "this is broken"})))
    assert decision.result == PATCHED


def test_a_pod_without_a_map_is_left_alone():
    decision = bind_mutate(review(pod(2, annotations={})))
    assert decision.result == ALLOWED
    assert "patch" not in decision.review["response"]


def test_a_pod_created_on_its_lines_node_gets_the_devices_and_placement_annotations():
    new = pod(2)
    new["spec"]["nodeName"] = "node3"
    body = review(new)
    decision = bind_mutate(body)
    placed = applied(body, decision)
    assert placed["metadata"]["annotations"][DEVICES_ANNOTATION] == "0,1,2"
    assert placed["metadata"]["annotations"][PLACEMENT_ANNOTATION] == (
        '{"index":2,"node":"node3","cudaVisibleDevices":"0,1,2"}'
    )
    assert placed["spec"]["containers"][0]["env"] == [bind_env_entry(), ORDER]
    assert container_devices(placed).devices() == ("0", "1", "2")


def test_a_pod_created_on_a_node_is_still_judged_by_its_map():
    broken = pod(2, annotations={"gpu-scheduling-map": "2=node3\n"})
    broken["spec"]["nodeName"] = "node3"
    decision = bind_mutate(review(broken))
    assert decision.result == DENIED
    assert "line 1" in decision.review["response"]["status"]["message"]


def test_a_pod_created_on_a_node_without_a_map_is_refused():
    # No scheduler will ever check it: admitted, its containers would see every GPU of the node.
    bare = pod(2, annotations={})
    bare["spec"]["nodeName"] = "node3"
    decision = bind_mutate(review(bare))
    assert decision.result == DENIED
    assert "has no gpu-scheduling-map annotation" in decision.review["response"]["status"]["message"]


def test_annotations_that_would_overflow_on_a_pod_created_on_a_node_name_both_of_ours():
    filler = "# " + "x" * (TOTAL_ANNOTATION_BYTES - 100) + "\n"
    big = pod(0, annotations={"gpu-scheduling-map": filler + "0=node1:0\n"})
    big["spec"]["nodeName"] = "node1"
    message = bind_mutate(review(big)).review["response"]["status"]["message"]
    assert DEVICES_ANNOTATION in message and PLACEMENT_ANNOTATION in message


def debugged(container_env, annotations):
    running = pod(2, containers=[{"name": "main", "env": container_env}])
    running["metadata"]["annotations"].update(annotations)
    old = copy.deepcopy(running)
    old["spec"]["ephemeralContainers"] = [{"name": "debugger-1"}]
    running["spec"]["ephemeralContainers"] = [{"name": "debugger-1"}, {"name": "debugger-2"}]
    body = review(running, operation="UPDATE", sub_resource="ephemeralcontainers")
    body["request"]["oldObject"] = old
    return body


def test_a_debug_container_of_a_bound_pod_reads_the_same_annotation_as_its_other_containers():
    body = debugged([copy.deepcopy(STORED_BIND_ENTRY), ORDER], {DEVICES_ANNOTATION: "0,1,2"})
    assert patch_of(bind_mutate(body)) == [
        {"op": "add", "path": "/spec/ephemeralContainers/1/env", "value": [bind_env_entry(), ORDER]}
    ]


def test_a_debug_container_of_a_pod_given_literal_devices_before_bind_mode_gets_those():
    body = debugged([{"name": CUDA, "value": "0,1,2"}], {})
    assert patch_of(bind_mutate(body))[0]["value"][0] == {"name": CUDA, "value": "0,1,2"}


ENV_NAMES = st.sampled_from([CUDA, "CUDA_DEVICE_ORDER", "A", "B"])
ENV_ITEM = st.one_of(
    st.builds(lambda n, v: {"name": n, "value": v}, ENV_NAMES, st.text(max_size=4)),
    st.builds(lambda n: {"name": n, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, ENV_NAMES),
    st.just(copy.deepcopy(STORED_BIND_ENTRY)),
)


@given(st.lists(st.lists(ENV_ITEM, max_size=5), min_size=1, max_size=3), st.lists(ENV_ITEM, max_size=5))
def test_after_the_patch_the_scheduler_reads_every_container_as_given_by_the_bind(envs, init_env):
    # The scheduler refuses a pod with a container it reads no entry from (fails closed):
    # whatever env a pod arrives with, what the webhook leaves must pass that check, once.
    new = pod(2, containers=[{"name": f"c{i}", "env": env} for i, env in enumerate(envs)])
    new["spec"]["initContainers"] = [{"name": "init", "env": init_env}]
    placed = jsonpatch.JsonPatch(bind_patch(new)).apply(new)
    given_devices = container_devices(placed)
    assert given_devices.missing == () and not given_devices.literals
    assert all(value is FROM_BIND for _, value in given_devices.values)
    assert bind_patch(placed) == []
    # A container the patch gave the entry also orders its GPUs as the map does; one that
    # read the bind already is not touched at all.
    before = dict(container_devices(new).values)
    for container in placed["spec"]["initContainers"] + placed["spec"]["containers"]:
        if before[container["name"]] is not FROM_BIND:
            assert any(item["name"] == "CUDA_DEVICE_ORDER" for item in container["env"]), container


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
def test_updates_of_a_pod_are_left_alone(operation):
    assert bind_mutate(review(pod(2), operation=operation)).result == ALLOWED
