"""kube-scheduler's filters on the pinned node: NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit, and GPU ordinals within capacity; their words and their order."""

import pytest
from gpu_scheduler.kube.objects import node_info
from gpu_scheduler.scheduling import AssignedPod, ClusterCache, NodeUsage, Taint, decide, run_filters
from gpu_scheduler.scheduling.affinity import matches_node_affinity
from gpu_scheduler.scheduling.taints import tolerates, untolerated_taint


def node(name="node1", labels=None, taints=(), unschedulable=False, allocatable=None):
    resources = allocatable or {
        "cpu": "4",
        "memory": "8Gi",
        "pods": "3",
        "nvidia.com/gpu": "4",
        "example.com/fpga": "1",
    }
    return node_info(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {
                "unschedulable": unschedulable,
                "taints": [dict(zip(("key", "value", "effect"), t, strict=True)) for t in taints],
            },
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def failure(spec=None, requests=(), devices=("0",), info=None, usage=None):
    return run_filters(spec or {}, requests, devices, info or node(), usage or NodeUsage())


# -- TaintToleration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"key": "gpu", "operator": "Equal", "value": "a", "effect": "NoSchedule"}, ("gpu", "a", "NoSchedule"), True),
        ({"key": "gpu", "value": "a"}, ("gpu", "a", "NoExecute"), True),  # no effect: every effect
        ({"key": "gpu", "value": "b"}, ("gpu", "a", "NoSchedule"), False),
        ({"key": "gpu", "operator": "Exists"}, ("gpu", "anything", "NoSchedule"), True),
        ({"operator": "Exists"}, ("any", "thing", "NoExecute"), True),  # empty key + Exists: all taints
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, ("gpu", "", "NoSchedule"), False),
        ({"key": "other", "operator": "Exists"}, ("gpu", "", "NoSchedule"), False),
        ({"key": "gpu", "operator": "Lt", "value": "1"}, ("gpu", "0", "NoSchedule"), False),  # unknown operator
    ],
)
def test_toleration_matching_follows_the_api(toleration, taint, tolerated):
    assert tolerates(toleration, Taint(*taint)) is tolerated


def test_prefer_no_schedule_is_not_a_filter_and_the_first_untolerated_taint_is_named():
    taints = (Taint("soft", "", "PreferNoSchedule"), Taint("a", "1", "NoSchedule"), Taint("b", "2", "NoExecute"))
    assert untolerated_taint(taints, [{"key": "a", "operator": "Exists"}]) == Taint("b", "2", "NoExecute")
    assert untolerated_taint(taints, [{"operator": "Exists"}]) is None
    result = failure(info=node(taints=[("dedicated", "ml", "NoSchedule")]))
    assert (result.plugin, result.reasons) == ("TaintToleration", ("node(s) had untolerated taint {dedicated: ml}",))


def test_a_cordoned_node_refuses_unless_the_pod_tolerates_the_unschedulable_taint():
    cordoned = node(unschedulable=True)
    assert failure(info=cordoned).reasons == ("node(s) were unschedulable",)
    daemon = {
        "tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    }
    assert failure(daemon, info=cordoned) is None


# -- NodeAffinity ---------------------------------------------------------------------------------


def affinity(*terms):
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
        }
    }


def expr(key, operator, *values):
    return {"key": key, "operator": operator, "values": list(values)}


LABELS = {"zone": "a", "gpu": "a100", "cores": "64"}


@pytest.mark.parametrize(
    ("spec", "matches"),
    [
        ({}, True),
        ({"nodeSelector": {"zone": "a"}}, True),
        ({"nodeSelector": {"zone": "a", "gpu": "h100"}}, False),
        (affinity({"matchExpressions": [expr("zone", "In", "a", "b")]}), True),
        (affinity({"matchExpressions": [expr("zone", "NotIn", "a")]}), False),
        (affinity({"matchExpressions": [expr("missing", "NotIn", "a")]}), True),  # absent label: not in
        (affinity({"matchExpressions": [expr("gpu", "Exists")]}), True),
        (affinity({"matchExpressions": [expr("gpu", "DoesNotExist")]}), False),
        (affinity({"matchExpressions": [expr("cores", "Gt", "32")]}), True),
        (affinity({"matchExpressions": [expr("cores", "Lt", "32")]}), False),
        (affinity({"matchExpressions": [expr("zone", "Gt", "1")]}), False),  # not an integer
        (affinity({"matchFields": [expr("metadata.name", "In", "node1")]}), True),
        (affinity({"matchFields": [expr("metadata.name", "NotIn", "node1")]}), False),
        # Terms are ORed, requirements within one ANDed; an empty term matches nothing.
        (
            affinity({"matchExpressions": [expr("zone", "In", "b")]}, {"matchExpressions": [expr("gpu", "Exists")]}),
            True,
        ),
        (affinity({"matchExpressions": [expr("zone", "In", "a"), expr("gpu", "In", "h100")]}), False),
        (affinity({}), False),
        (affinity(), False),
        ({"nodeSelector": {"zone": "b"}, **affinity({"matchExpressions": [expr("zone", "In", "a")]})}, False),
    ],
)
def test_node_selector_and_required_affinity_follow_the_api(spec, matches):
    assert matches_node_affinity(spec, node(labels=LABELS)) is matches


def test_a_node_outside_the_pods_affinity_is_refused_in_kube_schedulers_words():
    result = failure({"nodeSelector": {"zone": "b"}}, info=node(labels=LABELS))
    assert (result.plugin, result.reasons) == ("NodeAffinity", ("node(s) didn't match Pod's node affinity/selector",))


# -- NodeResourcesFit -------------------------------------------------------------------------------


def test_requests_are_checked_against_allocatable_minus_what_the_nodes_pods_request():
    used = NodeUsage()
    used.add((("cpu", 3000), ("memory", 2**32)))
    assert failure(requests=(("cpu", 1000),), usage=used) is None
    result = failure(requests=(("cpu", 1001), ("memory", 2**32 + 1), ("example.com/fpga", 2)), usage=used)
    assert result.plugin == "NodeResourcesFit"
    assert result.reasons == ("Insufficient cpu", "Insufficient memory", "Insufficient example.com/fpga")
    assert failure(requests=(("example.com/unknown", 1),)).reasons == ("Insufficient example.com/unknown",)


def test_a_full_node_has_too_many_pods():
    full = NodeUsage()
    for _ in range(3):
        full.add(())
    assert failure(usage=full).reasons == ("Too many pods",)
    full.remove(())
    assert failure(usage=full) is None


def test_the_cache_counts_every_pod_on_the_node_and_the_assumed_ones():
    cache = ClusterCache()
    cache.nodes.upsert(node())
    pod = {
        "metadata": {
            "namespace": "ml",
            "name": "big-0",
            "uid": "u-big",
            "annotations": {"gpu-scheduling-map": "0=node1:0"},
        },
        "requests": (("cpu", 2000),),
    }
    cache.add_pod(AssignedPod("other-scheduler", "kube-system/x", "node1", (("cpu", 1500),)))
    assert decide(pod, cache).bind
    cache.assume(AssignedPod("u-first", "ml/first-0", "node1", (("cpu", 1000),)))
    decision = decide(pod, cache)
    assert not decision.bind and decision.retryable
    assert decision.reason == (
        "0/1 nodes are available: 1 Insufficient cpu. The map (line 1) pins the pod to node node1, "
        "which NodeResourcesFit refused."
    )
    cache.forget("u-first")
    assert decide(pod, cache).bind


def test_filters_run_in_kube_schedulers_order_and_the_first_failure_is_reported():
    info = node(unschedulable=True, taints=[("t", "v", "NoSchedule")], labels={})
    spec = {"nodeSelector": {"zone": "a"}}
    order = []
    for _ in range(4):
        result = failure(spec, requests=(("cpu", 99_000),), devices=("9",), info=info)
        order.append(result.plugin)
        if result.plugin == "NodeUnschedulable":
            info = node(taints=[("t", "v", "NoSchedule")])
        elif result.plugin == "TaintToleration":
            info = node()
        elif result.plugin == "NodeAffinity":
            spec = {}
    order.append(failure(spec, requests=(), devices=("9",), info=info).plugin)
    assert order == ["NodeUnschedulable", "TaintToleration", "NodeAffinity", "NodeResourcesFit", "GPUDevices"]
