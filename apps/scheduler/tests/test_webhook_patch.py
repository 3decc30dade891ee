"""The JSON Patch that gives containers the CUDA_VISIBLE_DEVICES entry reading the bind's
devices (and a pod created on a node its annotations), applied for real with `jsonpatch`."""

import copy
import json

import jsonpatch
from gpu_scheduler.placement import DEVICES_ANNOTATION, MapEntry, bind_annotations, bind_env_entry
from gpu_scheduler.webhook.patch import (
    bind_patch,
    env_with,
    new_ephemeral_containers_patch,
    pointer_token,
)
from hypothesis import given
from hypothesis import strategies as st

ENTRY = MapEntry(index=2, node="node3", devices=("0", "1", "2"), line=3)
PLACEMENT = '{"index":2,"node":"node3","cudaVisibleDevices":"0,1,2"}'
# What a pod created on node3 gets from the webhook (no Binding will annotate it).
ANNOTATIONS = {DEVICES_ANNOTATION: "0,1,2", "gpu-scheduler/placement": PLACEMENT}
CUDA = "CUDA_VISIBLE_DEVICES"
BIND = bind_env_entry()
# The map's ordinals are nvidia-smi's, which CUDA follows only in PCI bus order.
ORDER = {"name": "CUDA_DEVICE_ORDER", "value": "PCI_BUS_ID"}


def statefulset_pod(containers, init_containers=None, annotations=None):
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-2",
            "namespace": "ml",
            "labels": {"apps.kubernetes.io/pod-index": "2"},
            "annotations": {
                "gpu-scheduling-map": "2=node3:0,1,2\n",
                **(annotations or {}),
            },
        },
        "spec": {"schedulerName": "gpu-scheduler", "containers": containers},
    }
    if init_containers is not None:
        pod["spec"]["initContainers"] = init_containers
    return pod


def apply(pod, operations):
    return jsonpatch.JsonPatch(operations).apply(pod)


def test_containers_without_env_get_a_new_env_list():
    pod = statefulset_pod([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}])
    patched = apply(pod, bind_patch(pod))
    for container in patched["spec"]["containers"]:
        assert container["env"] == [BIND, ORDER]


def test_existing_value_from_and_duplicates_collapse_into_one_entry_at_the_first_position():
    env = [
        {"name": "A", "value": "1"},
        {
            "name": CUDA,
            "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "devices"}},
        },
        {"name": "B", "value": "2"},
        {"name": CUDA, "value": "7"},
        {"name": "C", "value": "$(CUDA_VISIBLE_DEVICES)"},
    ]
    pod = statefulset_pod([{"name": "main", "env": env}])
    patched = apply(pod, bind_patch(pod))
    assert patched["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        BIND,
        ORDER,
        {"name": "B", "value": "2"},
        {"name": "C", "value": "$(CUDA_VISIBLE_DEVICES)"},
    ]


def test_a_container_that_sets_cuda_device_order_keeps_its_own():
    own = {"name": "CUDA_DEVICE_ORDER", "value": "FASTEST_FIRST"}
    from_config = {"name": "CUDA_DEVICE_ORDER", "valueFrom": {"configMapKeyRef": {"name": "cuda", "key": "order"}}}
    pod = statefulset_pod(
        [{"name": "a", "env": [own]}, {"name": "b", "env": [from_config, {"name": CUDA, "value": "7"}]}]
    )
    patched = apply(pod, bind_patch(pod))
    assert patched["spec"]["containers"][0]["env"] == [own, BIND]
    assert patched["spec"]["containers"][1]["env"] == [from_config, BIND]


def test_cuda_device_order_follows_the_devices_and_is_not_added_twice():
    pod = statefulset_pod([{"name": "a", "env": [{"name": CUDA, "value": "7"}, {"name": "Z", "value": "1"}]}])
    patched = apply(pod, bind_patch(pod))
    assert patched["spec"]["containers"][0]["env"] == [BIND, ORDER, {"name": "Z", "value": "1"}]
    assert bind_patch(patched) == []


def test_the_annotations_of_a_pod_created_on_a_node_are_added_next_to_the_existing_ones():
    pod = statefulset_pod([{"name": "main"}])
    patched = apply(pod, bind_patch(pod, bind_annotations(ENTRY)))
    assert patched["metadata"]["annotations"] == {"gpu-scheduling-map": "2=node3:0,1,2\n", **ANNOTATIONS}
    assert json.loads(PLACEMENT) == {
        "index": 2,
        "node": "node3",
        "cudaVisibleDevices": "0,1,2",
    }
    assert bind_annotations(ENTRY) == ANNOTATIONS


def test_pod_without_annotations_gets_the_annotations_object():
    pod = statefulset_pod([{"name": "main"}])
    del pod["metadata"]["annotations"]
    patched = apply(pod, bind_patch(pod, ANNOTATIONS))
    assert patched["metadata"]["annotations"] == ANNOTATIONS


def test_stale_placement_annotation_is_replaced():
    pod = statefulset_pod([{"name": "main"}], annotations={"gpu-scheduler/placement": '{"index":0}'})
    patched = apply(pod, bind_patch(pod, ANNOTATIONS))
    assert patched["metadata"]["annotations"]["gpu-scheduler/placement"] == PLACEMENT


def test_applying_the_patch_twice_changes_nothing_more():
    pod = statefulset_pod(
        [
            {
                "name": "main",
                "env": [{"name": CUDA, "value": "9"}, {"name": CUDA, "value": "8"}],
            },
            {"name": "side"},
        ],
        init_containers=[{"name": "init"}],
    )
    operations = bind_patch(pod, ANNOTATIONS)
    once = apply(pod, operations)
    assert apply(once, operations) == once


def test_a_pod_that_already_has_its_entries_and_annotations_gets_no_operations():
    pod = statefulset_pod([{"name": "main"}], init_containers=[{"name": "init"}])
    patched = apply(pod, bind_patch(pod, ANNOTATIONS))
    assert bind_patch(patched, ANNOTATIONS) == []


def test_only_what_differs_is_patched():
    pod = statefulset_pod(
        [
            {"name": "right", "env": [BIND, ORDER]},
            {"name": "wrong", "env": []},
        ],
        annotations=ANNOTATIONS,
    )
    assert bind_patch(pod, ANNOTATIONS) == [
        {
            "op": "add",
            "path": "/spec/containers/1/env",
            "value": [BIND, ORDER],
        }
    ]


def test_only_ephemeral_containers_new_in_the_request_are_patched_with_a_literal_to_copy():
    old = statefulset_pod([{"name": "main"}])
    old["spec"]["ephemeralContainers"] = [{"name": "debugger-1", "image": "busybox"}]
    pod = copy.deepcopy(old)
    pod["spec"]["ephemeralContainers"].append({"name": "debugger-2", "image": "busybox", "env": [{"name": "A"}]})
    assert new_ephemeral_containers_patch(pod, old, "0,1,2") == [
        {
            "op": "add",
            "path": "/spec/ephemeralContainers/1/env",
            "value": [{"name": "A"}, {"name": CUDA, "value": "0,1,2"}, ORDER],
        }
    ]


def test_pointer_token_escapes_tilde_before_slash():
    assert pointer_token("gpu-scheduler/placement") == "gpu-scheduler~1placement"
    assert pointer_token("a~/b") == "a~0~1b"
    document = {"a~/b": 1}
    assert jsonpatch.JsonPatch([{"op": "replace", "path": "/" + pointer_token("a~/b"), "value": 2}]).apply(
        document
    ) == {"a~/b": 2}


ENV_NAMES = st.sampled_from([CUDA, "A", "B", "PATH", "cuda_visible_devices"])
ENV_ITEM = st.one_of(
    st.builds(lambda n, v: {"name": n, "value": v}, ENV_NAMES, st.text(max_size=5)),
    st.builds(
        lambda n: {
            "name": n,
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
        },
        ENV_NAMES,
    ),
)


@given(st.lists(ENV_ITEM, max_size=8), st.text(min_size=1, max_size=10))
def test_env_with_keeps_every_other_entry_in_order_and_exactly_one_cuda_entry(env, devices):
    original = copy.deepcopy(env)
    result = env_with(env, CUDA, devices)
    assert env == original  # the pod's own list is not modified
    assert [item for item in result if item["name"] != CUDA] == [item for item in env if item["name"] != CUDA]
    assert [item for item in result if item["name"] == CUDA] == [{"name": CUDA, "value": devices}]
    assert env_with(result, CUDA, devices) == result
