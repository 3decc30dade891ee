"""NodeVolumeLimits on the map's node: the distinct CSI volumes the node's pods use plus the pod's
new ones may not exceed a driver's count on the node's CSINode, in kube-scheduler 1.37's words
(recorded, testdata/kube_scheduler_messages.json);
the pod is tried again when a pod leaves the node or the CSINode changes."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import (
    assigned_pod,
    claim_info,
    csi_node_info,
    node_info,
    trim_pending_pod,
    volume_info,
    watched_pod,
)
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import ClusterCache, Code, SharingPolicy, decide
from gpu_scheduler.scheduling.volume_limits import MAX_VOLUME_COUNT_EXCEEDED, NODE_VOLUME_LIMITS, CSINode
from gpu_scheduler.scheduling.volumes import StorageClass
from recorded import ours, reason_for_the_pinned_node
from test_volume_binding import NODE, api_claim, api_node, api_pod, uses

DRIVER = "ebs.csi.aws.com"


def api_csi_node(name: str = NODE, count: int | None = 2, driver: str = DRIVER) -> dict:
    entry: dict = {"name": driver, "nodeID": name}
    if count is not None:
        entry["allocatable"] = {"count": count}
    return {"metadata": {"name": name}, "spec": {"drivers": [entry, {"name": "other.csi", "nodeID": name}]}}


def csi_volume(name: str, driver: str = DRIVER, handle: str | None = None) -> dict:
    return {"metadata": {"name": name}, "spec": {"csi": {"driver": driver, "volumeHandle": handle or f"vol-{name}"}}}


def running(name: str, uid: str, claims: list[str], node: str = NODE) -> dict:
    pod = api_pod(name, uid, [uses(c, f"v{i}") for i, c in enumerate(claims)], node)
    pod["spec"]["nodeName"] = node
    pod["spec"]["schedulerName"] = "other"
    return pod


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    for name in ("node2", NODE):
        cache.upsert_node(node_info(api_node(name)))
    for claim in ("a", "b", "c"):
        cache.volumes.upsert_claim(claim_info(api_claim(claim, f"pv-{claim}")))
        cache.volumes.upsert_volume(volume_info(csi_volume(f"pv-{claim}")))
    cache.csi_nodes[NODE] = csi_node_info(api_csi_node())
    return cache


def pending(claims: list[str]) -> dict:
    return trim_pending_pod(api_pod(volumes=[uses(c, f"v{i}") for i, c in enumerate(claims)]))


def test_the_words_are_what_kube_scheduler_said():
    assert MAX_VOLUME_COUNT_EXCEEDED == reason_for_the_pinned_node("csi-taker")


def test_a_csi_node_keeps_only_the_drivers_that_give_a_count():
    assert csi_node_info(api_csi_node(count=3)) == CSINode(NODE, ((DRIVER, 3),))
    assert csi_node_info(api_csi_node(count=None)).limits == ()


def test_volumes_past_the_drivers_count_are_refused_in_kube_schedulers_words(cache):
    cache.add_pod(assigned_pod(running("db", "u9", ["a", "b"]), "gpu-scheduler"))
    decision = decide(pending(["c"]), cache)
    assert decision.code is Code.UNSCHEDULABLE
    assert decision.plugin == NODE_VOLUME_LIMITS
    assert decision.reason == ours(MAX_VOLUME_COUNT_EXCEEDED, NODE_VOLUME_LIMITS, NODE)


def test_up_to_the_count_binds_and_a_volume_already_on_the_node_is_not_new(cache):
    cache.add_pod(assigned_pod(running("db", "u9", ["a"]), "gpu-scheduler"))
    assert decide(pending(["b"]), cache).bind  # 1 + 1 = 2
    cache.add_pod(assigned_pod(running("db2", "u8", ["b"]), "gpu-scheduler"))
    assert decide(pending(["a", "b"]), cache).bind  # both used on the node already


def test_one_volume_under_two_claims_counts_once(cache):
    cache.volumes.upsert_claim(claim_info(api_claim("a2", "pv-a2")))
    cache.volumes.upsert_volume(volume_info(csi_volume("pv-a2", handle="vol-pv-a")))  # the same handle as pv-a
    cache.add_pod(assigned_pod(running("db", "u9", ["a", "b"]), "gpu-scheduler"))
    assert decide(pending(["a2"]), cache).bind


def test_other_nodes_other_drivers_and_nodes_without_counts_do_not_count(cache):
    cache.add_pod(assigned_pod(running("db", "u9", ["a", "b"], node="node2"), "gpu-scheduler"))
    assert decide(pending(["c"]), cache).bind  # the volumes are on node2
    cache.add_pod(assigned_pod(running("db2", "u8", ["a", "b"]), "gpu-scheduler"))
    cache.volumes.upsert_claim(claim_info(api_claim("d", "pv-d")))
    cache.volumes.upsert_volume(volume_info(csi_volume("pv-d", driver="other.csi")))
    assert decide(pending(["d"]), cache).bind  # other.csi gives no count
    del cache.csi_nodes[NODE]
    assert decide(pending(["c"]), cache).bind


def test_an_unbound_claim_counts_as_a_new_volume_of_its_class_provisioner(cache):
    cache.volumes.upsert_class(StorageClass("gp3", "WaitForFirstConsumer", DRIVER))
    cache.volumes.upsert_claim(claim_info(api_claim("new", cls="gp3")))
    cache.add_pod(assigned_pod(running("db", "u9", ["a", "b"]), "gpu-scheduler"))
    decision = decide(pending(["new"]), cache)
    assert decision.plugin == NODE_VOLUME_LIMITS, decision


def test_a_volume_that_is_not_csi_is_not_counted(cache):
    cache.volumes.upsert_volume(volume_info({"metadata": {"name": "pv-c"}, "spec": {"hostPath": {"path": "/x"}}}))
    cache.add_pod(assigned_pod(running("db", "u9", ["a", "b"]), "gpu-scheduler"))
    assert decide(pending(["c"]), cache).bind


# -- waking -----------------------------------------------------------------------------------------


@pytest.fixture
def state() -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY)
    state.nodes_listed([node_info(api_node(n)) for n in ("node2", NODE)])
    state.claims_listed([claim_info(api_claim(c, f"pv-{c}")) for c in ("a", "b", "c")])
    state.volumes_listed([volume_info(csi_volume(f"pv-{c}")) for c in ("a", "b", "c")])
    state.storage_classes_listed([])
    state.csi_nodes_listed([csi_node_info(api_csi_node())])
    return state


def refused(state: SchedulerState) -> str:
    state.pod_changed(watched_pod(api_pod(volumes=[uses("c")]), "gpu-scheduler"))
    uid, taken = state.pop(0.0)
    decision = state.decide(uid, taken)
    assert decision.plugin == NODE_VOLUME_LIMITS, decision
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state(uid) == BACKOFF
    return uid


def test_a_refused_pod_is_woken_when_a_pod_leaves_its_node(state):
    db = watched_pod(running("db", "u9", ["a", "b"]), "gpu-scheduler")
    state.pod_changed(db)
    uid = refused(state)
    assert state.pod_deleted(db) is True
    assert state.queue_state(uid) == ACTIVE
    uid, taken = state.pop(0.0)
    assert state.decide(uid, taken).bind


def test_a_refused_pod_is_woken_when_its_csi_node_changes(state):
    state.pod_changed(watched_pod(running("db", "u9", ["a", "b"]), "gpu-scheduler"))
    uid = refused(state)
    assert state.csi_node_changed(csi_node_info(api_csi_node(count=2))) is False  # no change
    assert state.csi_node_changed(csi_node_info(api_csi_node(count=3))) is True
    assert state.queue_state(uid) == ACTIVE
    uid, taken = state.pop(0.0)
    assert state.decide(uid, taken).bind
    assert state.csi_nodes_listed([]) is False  # nothing waits on it any more
