"""VolumeRestrictions on the map's node: a ReadWriteOncePod claim another live pod (on any node)
uses refuses the pod in kube-scheduler 1.37's words (recorded, testdata/kube_scheduler_messages.json),
and the pod is tried again when that pod goes; the claims of pods on nodes are kept only for pods
that have some."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import assigned_pod, claim_info, node_info, trim_pending_pod, volume_info, watched_pod
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import ClusterCache, Code, SharingPolicy, decide
from gpu_scheduler.scheduling.volume_restrictions import READ_WRITE_ONCE_POD_CONFLICT, VOLUME_RESTRICTIONS
from gpu_scheduler.scheduling.volumes import claim_wait_key
from recorded import ours, reason_for_the_pinned_node
from test_volume_binding import NODE, api_claim, api_node, api_pod, api_volume, uses


def rwop_claim(name: str = "data", modes: tuple[str, ...] = ("ReadWriteOncePod",)) -> dict:
    claim = api_claim(name, f"pv-{name}")
    claim["spec"]["accessModes"] = list(modes)
    return claim


def running(name: str, uid: str, node: str = "node2", volumes: list | None = None, scheduler: str = "other") -> dict:
    pod = api_pod(name, uid, volumes, node)
    pod["spec"]["nodeName"] = node
    pod["spec"]["schedulerName"] = scheduler
    return pod


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    for name in ("node2", NODE):
        cache.upsert_node(node_info(api_node(name)))
    cache.volumes.upsert_volume(volume_info(api_volume("pv-data")))
    return cache


def test_the_words_are_what_kube_scheduler_said_with_the_other_pod_on_another_node():
    assert READ_WRITE_ONCE_POD_CONFLICT == reason_for_the_pinned_node("rwop-taker")


def test_a_read_write_once_pod_claim_another_pod_uses_on_any_node_is_refused(cache):
    cache.volumes.upsert_claim(claim_info(rwop_claim()))
    cache.add_pod(assigned_pod(running("holder", "u9", "node2", [uses("data")]), "gpu-scheduler"))
    decision = decide(trim_pending_pod(api_pod(volumes=[uses("data")])), cache)
    assert decision.code is Code.UNSCHEDULABLE
    assert decision.plugin == VOLUME_RESTRICTIONS
    assert decision.reason == ours(READ_WRITE_ONCE_POD_CONFLICT, VOLUME_RESTRICTIONS, NODE)
    assert claim_wait_key("ml/data") in decision.waiting_on


@pytest.mark.parametrize("modes", [("ReadWriteOnce",), ("ReadWriteMany", "ReadOnlyMany")])
def test_a_claim_without_read_write_once_pod_may_be_shared(cache, modes):
    cache.volumes.upsert_claim(claim_info(rwop_claim(modes=modes)))
    cache.add_pod(assigned_pod(running("holder", "u9", NODE, [uses("data")]), "gpu-scheduler"))
    assert decide(trim_pending_pod(api_pod(volumes=[uses("data")])), cache).bind


def test_the_pod_itself_held_in_doubt_is_no_conflict(cache):
    # A pod whose binding's answer was lost stays assumed while it is retried: its own claim
    # is no other pod's.
    cache.volumes.upsert_claim(claim_info(rwop_claim()))
    cache.add_pod(assigned_pod(running("train-0", "u1", NODE, [uses("data")], "gpu-scheduler"), "gpu-scheduler"))
    assert decide(trim_pending_pod(api_pod(volumes=[uses("data")])), cache).bind


def test_a_pod_without_claims_keeps_none_and_a_pods_claims_are_forgotten_with_it(cache):
    bare = assigned_pod(running("web", "u5", NODE), "gpu-scheduler")
    assert (bare.claims, bare.ephemeral_claims) == ((), ())
    eph = {"name": "scratch2", "ephemeral": {"volumeClaimTemplate": {}}}
    with_claims = assigned_pod(running("db", "u6", NODE, [uses("data"), eph]), "gpu-scheduler")
    assert (with_claims.claims, with_claims.ephemeral_claims) == (("ml/data",), ("ml/db-scratch2",))
    cache.add_pod(with_claims)
    assert cache.claim_used_by_others("ml/data", "u1")
    assert set(cache.node_claims(NODE)) == {"ml/data", "ml/db-scratch2"}
    cache.remove_pod("u6")
    assert not cache.claim_used_by_others("ml/data", "u1")
    assert list(cache.node_claims(NODE)) == []
    assert cache.released_claims() == [claim_wait_key("ml/data")]
    assert cache.released_claims() == []


# -- waking: the pod is tried again when the other pod goes ------------------------------------------


@pytest.fixture
def state() -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY)
    state.nodes_listed([node_info(api_node(n)) for n in ("node2", NODE)])
    for listed in (state.claims_listed, state.volumes_listed, state.storage_classes_listed, state.csi_nodes_listed):
        listed([])
    state.volume_changed(volume_info(api_volume("pv-data")))
    return state


def test_a_refused_pod_is_woken_when_the_pod_using_its_claim_goes_and_then_binds(state):
    state.claim_changed(claim_info(rwop_claim()))
    holder = watched_pod(running("holder", "u9", "node2", [uses("data")]), "gpu-scheduler")
    state.pod_changed(holder)
    state.pod_changed(watched_pod(api_pod(volumes=[uses("data")]), "gpu-scheduler"))
    uid, taken = state.pop(0.0)
    decision = state.decide(uid, taken)
    assert decision.plugin == VOLUME_RESTRICTIONS, decision
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state(uid) == BACKOFF
    assert state.pod_deleted(holder) is True  # on node2, not the map's node: woken by its claim
    assert state.queue_state(uid) == ACTIVE
    uid, taken = state.pop(0.0)
    assert state.decide(uid, taken).bind


def test_two_pods_of_one_claim_decided_back_to_back_cannot_both_bind(state):
    # The first is assumed with its claims, so the second sees the claim in use.
    state.claim_changed(claim_info(rwop_claim()))
    state.pod_changed(watched_pod(api_pod("a-0", "ua", [uses("data")]), "gpu-scheduler"))
    state.pod_changed(watched_pod(api_pod("b-0", "ub", [uses("data")]), "gpu-scheduler"))
    decisions = []
    for _ in range(2):
        uid, taken = state.pop(0.0)
        decisions.append(state.decide(uid, taken))
    assert [d.bind for d in decisions] == [True, False]
    assert decisions[1].plugin == VOLUME_RESTRICTIONS
