"""PodTopologySpread (DoNotSchedule) and InterPodAffinity (required terms) on the map's node, in
kube-scheduler 1.37's recorded words (testdata/kube_scheduler_messages.json), and a pod they
refused woken when pods or nodes change."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import assigned_pod, node_info, trim_pending_pod, watched_pod
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import ClusterCache, Code, SharingPolicy, decide
from recorded import ours, reason_for_the_pinned_node

NODE = "node3"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
AFFINITY = reason_for_the_pinned_node("affinity")
ANTI_AFFINITY = reason_for_the_pinned_node("anti-affinity")
EXISTING_ANTI_AFFINITY = reason_for_the_pinned_node("existing-anti-affinity")
SPREAD = reason_for_the_pinned_node("topology-spread")
SPREAD_MISSING_LABEL = reason_for_the_pinned_node("topology-spread-missing-label")

# node1, node2 in zone a; node3, node4 in zone b
ZONES = {"node1": "a", "node2": "a", "node3": "b", "node4": "b"}


def api_node(name: str, **labels: str) -> dict:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    zone = {ZONE: ZONES[name]} if name in ZONES else {}
    return {
        "metadata": {"name": name, "labels": {HOST: name, **zone, **labels}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def api_pod(name: str, labels=None, node: str = "", namespace: str = "ml", index: int = 0, **spec) -> dict:
    return {
        "metadata": {
            "namespace": namespace,
            "name": f"{name}-{index}",
            "uid": f"{namespace}-{name}-{index}",
            "labels": labels or {},
            "annotations": {"gpu-scheduling-map": f"{index}={NODE}:{index}\n"},
        },
        "spec": {
            "schedulerName": "gpu-scheduler",
            "nodeName": node,
            "containers": [{"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": str(index)}]}],
            **spec,
        },
    }


def term(key: str, namespaces=None, namespace_selector=None, **match_labels: str) -> dict:
    found = {"topologyKey": key, "labelSelector": {"matchLabels": match_labels}}
    if namespaces is not None:
        found["namespaces"] = namespaces
    if namespace_selector is not None:
        found["namespaceSelector"] = namespace_selector
    return found


def affinity(kind: str, *terms: dict) -> dict:
    return {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}}


def spread(key: str, max_skew: int = 1, **extra) -> dict:
    constraint = {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "train"}},
        **extra,
    }
    return {"topologySpreadConstraints": [constraint]}


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    for name in ZONES:
        cache.upsert_node(node_info(api_node(name)))
    return cache


def on(cache: ClusterCache, name: str, node: str, labels=None, namespace: str = "ml", **spec) -> None:
    cache.add_pod(assigned_pod(api_pod(name, labels, node=node, namespace=namespace, **spec), "gpu-scheduler"))


def refusal(cache: ClusterCache, pod: dict):
    decision = decide(trim_pending_pod(pod), cache)
    assert decision.code is Code.UNSCHEDULABLE and decision.retryable
    return decision.plugin, decision.reason


# -- InterPodAffinity ---------------------------------------------------------------------------


def test_required_anti_affinity_refuses_a_node_whose_domain_runs_a_matching_pod(cache):
    pod = api_pod("train", {"app": "train"}, **affinity("podAntiAffinity", term(HOST, app="train")))
    on(cache, "other", NODE, {"app": "train"})
    assert refusal(cache, pod) == ("InterPodAffinity", ours(ANTI_AFFINITY, "InterPodAffinity", NODE))
    cache.remove_pod("ml-other-0")
    on(cache, "other", "node4", {"app": "train"})  # another host: fine
    assert decide(trim_pending_pod(pod), cache).bind
    # one zone: node4 is in node3's
    zonal = api_pod("train", {"app": "train"}, **affinity("podAntiAffinity", term(ZONE, app="train")))
    assert refusal(cache, zonal)[0] == "InterPodAffinity"


def test_anti_affinity_counts_only_the_terms_namespaces(cache):
    on(cache, "other", NODE, {"app": "train"}, namespace="elsewhere")
    own = api_pod("train", **affinity("podAntiAffinity", term(HOST, app="train")))
    assert decide(trim_pending_pod(own), cache).bind  # default: the pod's own namespace
    listed = api_pod("train", **affinity("podAntiAffinity", term(HOST, namespaces=["elsewhere"], app="train")))
    assert refusal(cache, listed)[1] == ours(ANTI_AFFINITY, "InterPodAffinity", NODE)
    every = api_pod("train", **affinity("podAntiAffinity", term(HOST, namespace_selector={}, app="train")))
    assert refusal(cache, every)[1] == ours(ANTI_AFFINITY, "InterPodAffinity", NODE)


def test_existing_pods_anti_affinity_refuses_the_pod_it_matches(cache):
    on(cache, "guard", "node4", **affinity("podAntiAffinity", term(ZONE, app="train")))
    pod = api_pod("train", {"app": "train"})
    assert refusal(cache, pod) == ("InterPodAffinity", ours(EXISTING_ANTI_AFFINITY, "InterPodAffinity", NODE))
    assert decide(trim_pending_pod(api_pod("train", {"app": "other"})), cache).bind
    # The guard's term is in its own namespace: a pod of another one is not matched.
    assert decide(trim_pending_pod(api_pod("train", {"app": "train"}, namespace="dev")), cache).bind
    cache.remove_pod("ml-guard-0")
    assert decide(trim_pending_pod(pod), cache).bind


def test_required_affinity_needs_a_matching_pod_in_the_nodes_domain(cache):
    pod = api_pod("worker", {"app": "worker"}, **affinity("podAffinity", term(ZONE, app="ps")))
    on(cache, "ps", "node1", {"app": "ps"})  # zone a; the map's node is in zone b
    assert refusal(cache, pod) == ("InterPodAffinity", ours(AFFINITY, "InterPodAffinity", NODE))
    on(cache, "ps2", "node4", {"app": "ps"}, index=1)
    assert decide(trim_pending_pod(pod), cache).bind


def test_the_first_pod_of_a_group_that_matches_its_own_affinity_may_go(cache):
    group = affinity("podAffinity", term(ZONE, app="ring"))
    assert decide(trim_pending_pod(api_pod("ring", {"app": "ring"}, **group)), cache).bind
    # It does not match itself: it waits for a pod it matches.
    assert refusal(cache, api_pod("ring", {"app": "other"}, **group))[0] == "InterPodAffinity"
    # A matching pod elsewhere: the group exists, and the node is not in its domain.
    on(cache, "ring", "node1", {"app": "ring"}, index=1)
    assert refusal(cache, api_pod("ring", {"app": "ring"}, **group))[0] == "InterPodAffinity"


def test_a_node_without_the_affinity_terms_key_is_refused(cache):
    pod = api_pod("worker", {"app": "ps"}, **affinity("podAffinity", term("rack", app="ps")))
    assert refusal(cache, pod)[1] == ours(AFFINITY, "InterPodAffinity", NODE)


def test_two_anti_affine_pods_decided_back_to_back_see_each_other_and_the_second_is_woken_when_the_first_goes():
    state = SchedulerState("gpu-node-name", SharingPolicy.WARN)
    state.nodes_listed([node_info(api_node(n)) for n in ZONES])
    one = affinity("podAntiAffinity", term(HOST, app="rank"))
    state.pod_changed(watched_pod(api_pod("a", {"app": "rank"}, index=0, **one), "gpu-scheduler"))
    state.pod_changed(watched_pod(api_pod("b", {"app": "rank"}, index=1, **one), "gpu-scheduler"))
    uid, pod = state.pop(0.0)
    assert state.decide(uid, pod).bind  # assumed, with its labels and terms
    uid, pod = state.pop(0.0)
    decision = state.decide(uid, pod)
    assert decision.plugin == "InterPodAffinity"
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state(uid) == BACKOFF
    assert state.pod_gone("ml-a-0") is True
    assert state.queue_state(uid) == ACTIVE


def test_a_refused_pod_is_woken_by_a_pod_added_or_removed_on_any_node_and_by_a_node_relabelled():
    state = SchedulerState("gpu-node-name", SharingPolicy.WARN)
    state.nodes_listed([node_info(api_node(n)) for n in ZONES])
    pod = api_pod("worker", {"app": "worker"}, **affinity("podAffinity", term(ZONE, app="ps")))
    state.pod_changed(watched_pod(api_pod("ps", {"app": "ps"}, node="node1", index=1), "gpu-scheduler"))
    state.pod_changed(watched_pod(pod, "gpu-scheduler"))

    def refuse():
        uid, taken = state.pop(0.0)
        decision = state.decide(uid, taken)
        assert decision.plugin == "InterPodAffinity"
        state.refused(uid, decision, now=0.0, jitter=0.5)
        assert state.queue_state(uid) == BACKOFF
        return uid

    uid = refuse()
    other = watched_pod(api_pod("unrelated", {"app": "x"}, node="node2", index=2), "gpu-scheduler")
    assert state.pod_changed(other) is True  # a pod on another node: topology domains may change
    assert state.queue_state(uid) == ACTIVE
    refuse()
    assert state.pod_changed(other) is False  # the same pod again: nothing changed
    assert state.pod_deleted(other) is True
    refuse()
    assert state.node_changed(node_info(api_node("node1", rack="r1"))) is True  # relabelled
    refuse()
    ps = watched_pod(api_pod("ps", {"app": "ps"}, node="node4", index=3), "gpu-scheduler")
    assert state.pod_changed(ps) is True
    uid, taken = state.pop(0.0)
    assert state.decide(uid, taken).bind


def test_the_recorded_words_are_kube_schedulers_constants():
    # v1.37 pkg/scheduler/framework/plugins/{interpodaffinity,podtopologyspread}/filtering.go
    assert (AFFINITY, ANTI_AFFINITY, EXISTING_ANTI_AFFINITY) == (
        "node(s) didn't match pod affinity rules",
        "node(s) didn't match pod anti-affinity rules",
        "node(s) didn't satisfy existing pods anti-affinity rules",
    )
    assert SPREAD_MISSING_LABEL == SPREAD + " (missing required label)"


def test_no_pod_on_a_node_keeps_terms_unless_it_has_anti_affinity(cache):
    plain = assigned_pod(api_pod("web", {"app": "web"}, node=NODE), "gpu-scheduler")
    assert plain.anti_affinity == () and plain.labels == {"app": "web"}
    assert list(cache.anti_affinity_pods()) == []
    trimmed = trim_pending_pod(api_pod("web", **affinity("podAffinity", term(HOST, app="x"))))
    assert trimmed["spec"]["affinity"] == affinity("podAffinity", term(HOST, app="x"))["affinity"]


# -- PodTopologySpread ----------------------------------------------------------------------------


def test_topology_spread_refuses_a_node_whose_domain_would_exceed_max_skew(cache):
    on(cache, "t1", "node3", {"app": "train"}, index=1)  # zone b: 1, zone a: 0
    pod = api_pod("train", {"app": "train"}, **spread(ZONE))
    assert refusal(cache, pod) == ("PodTopologySpread", ours(SPREAD, "PodTopologySpread", NODE))
    assert decide(trim_pending_pod(api_pod("train", {"app": "train"}, **spread(ZONE, 2))), cache).bind
    on(cache, "t2", "node1", {"app": "train"}, index=2)  # a: 1, b: 1
    assert decide(trim_pending_pod(pod), cache).bind


def test_topology_spread_counts_the_pods_namespace_and_not_pods_being_deleted(cache):
    on(cache, "t1", "node3", {"app": "train"}, namespace="dev", index=1)
    pod = api_pod("train", {"app": "train"}, **spread(ZONE))
    assert decide(trim_pending_pod(pod), cache).bind
    deleting = api_pod("t2", {"app": "train"}, node="node3", index=2)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    cache.add_pod(assigned_pod(deleting, "gpu-scheduler"))
    assert decide(trim_pending_pod(pod), cache).bind


def test_topology_spread_skips_nodes_the_pods_node_affinity_excludes(cache):
    on(cache, "t1", "node3", {"app": "train"}, index=1)
    only_b = {"nodeSelector": {ZONE: "b"}}
    # Zone a is not eligible: zone b is the only domain, and its skew is 0.
    assert decide(trim_pending_pod(api_pod("train", {"app": "train"}, **spread(ZONE), **only_b)), cache).bind
    ignore = spread(ZONE, nodeAffinityPolicy="Ignore")
    assert refusal(cache, api_pod("train", {"app": "train"}, **ignore, **only_b))[0] == "PodTopologySpread"


def test_topology_spread_min_domains_and_match_label_keys(cache):
    on(cache, "t1", "node1", {"app": "train", "rev": "1"}, index=1)
    on(cache, "t2", "node3", {"app": "train", "rev": "1"}, index=2)
    pod = api_pod("train", {"app": "train", "rev": "2"}, **spread(ZONE))
    assert decide(trim_pending_pod(pod), cache).bind  # a: 1, b: 1 -> b: 2, skew 1
    # Two domains, fewer than minDomains: the least is taken as 0, and b would be 2.
    assert refusal(cache, api_pod("train", {"app": "train"}, **spread(ZONE, minDomains=3)))[0] == "PodTopologySpread"
    # matchLabelKeys: only pods of its own revision count; a pod of revision 1 would break the skew.
    by_rev = spread(HOST, matchLabelKeys=["rev"])
    assert decide(trim_pending_pod(api_pod("train", {"app": "train", "rev": "2"}, **by_rev)), cache).bind
    assert refusal(cache, api_pod("train", {"app": "train", "rev": "1"}, **by_rev))[0] == "PodTopologySpread"


def test_a_node_without_the_topology_key_is_refused_saying_the_label_is_missing(cache):
    pod = api_pod("train", {"app": "train"}, **spread("rack"))
    assert refusal(cache, pod) == ("PodTopologySpread", ours(SPREAD_MISSING_LABEL, "PodTopologySpread", NODE))


def test_schedule_anyway_constraints_are_not_filters(cache):
    on(cache, "t1", "node3", {"app": "train"}, index=1)
    soft = spread(ZONE, whenUnsatisfiable="ScheduleAnyway")
    assert decide(trim_pending_pod(api_pod("train", {"app": "train"}, **soft)), cache).bind
    assert "topologySpreadConstraints" not in trim_pending_pod(api_pod("train", **soft))["spec"]


def test_spread_runs_before_inter_pod_affinity_as_in_kube_scheduler(cache):
    on(cache, "t1", "node3", {"app": "train"}, index=1)
    both = {**spread(ZONE), **affinity("podAntiAffinity", term(HOST, app="train"))}
    assert refusal(cache, api_pod("train", {"app": "train"}, **both))[0] == "PodTopologySpread"


def test_a_pods_own_hold_in_doubt_is_not_counted_against_it(cache):
    # Its binding's answer was lost: it is held on the node and retried; its own labels there
    # must not break its anti-affinity or its spread.
    both = {**spread(HOST), **affinity("podAntiAffinity", term(HOST, app="train"))}
    pod = api_pod("train", {"app": "train"}, **both)
    cache.assume(assigned_pod({**pod, "spec": {**pod["spec"], "nodeName": NODE}}, "gpu-scheduler"))
    assert decide(trim_pending_pod(pod), cache).bind
