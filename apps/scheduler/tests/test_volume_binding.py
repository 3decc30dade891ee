"""VolumeBinding on the map's node: bound claims whose volume's node affinity must admit the
node, claims that must exist and unbound Immediate claims that make the pod wait; kube-scheduler's
words, recorded (testdata/kube_scheduler_messages.json); and the pods waiting on a claim woken
when it, its volume or its class changes."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import claim_info, node_info, trim_pending_pod, volume_info, watched_pod
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import ClusterCache, Code, SharingPolicy, decide
from gpu_scheduler.scheduling.volumes import (
    NO_CLAIMS,
    UNBOUND_IMMEDIATE,
    StorageClass,
    VolumeCache,
    claim_names,
    claim_wait_key,
    class_wait_key,
    pre_filter,
)
from recorded import ours, reason_for_the_pinned_node

NODE = "node3"


def api_node(name: str) -> dict:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "gpu-node-name": name}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def api_pod(name: str = "train-0", uid: str = "u1", volumes: list | None = None, node: str = NODE) -> dict:
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": uid,
            "annotations": {"gpu-scheduling-map": f"0={node}:0\n"},
        },
        "spec": {
            "schedulerName": "gpu-scheduler",
            "containers": [{"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}],
            "volumes": [{"name": "scratch", "emptyDir": {}}, *(volumes or [])],
        },
    }


def uses(claim: str, volume: str = "data") -> dict:
    return {"name": volume, "persistentVolumeClaim": {"claimName": claim}}


def api_claim(
    name: str,
    volume: str = "",
    bound: bool = True,
    cls: str | None = None,
    owner: str | None = None,
    phase: str = "Bound",
    deleting: bool = False,
) -> dict:
    metadata = {"namespace": "ml", "name": name, "annotations": {}}
    if volume and bound:
        metadata["annotations"]["pv.kubernetes.io/bind-completed"] = "yes"
    if owner:
        metadata["ownerReferences"] = [{"kind": "Pod", "name": "x", "uid": owner, "controller": True}]
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    spec = {"volumeName": volume} if volume else {}
    if cls is not None:
        spec["storageClassName"] = cls
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase if volume and bound else "Pending"}}


def api_volume(name: str, on: str | None = None) -> dict:
    spec: dict = {"capacity": {"storage": "1Gi"}}
    if on is not None:
        requirement = {"key": "kubernetes.io/hostname", "operator": "In", "values": [on]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}
    return {"metadata": {"name": name}, "spec": spec}


@pytest.fixture
def cache() -> ClusterCache:
    cache = ClusterCache()
    for name in ("node2", NODE):
        cache.upsert_node(node_info(api_node(name)))
    return cache


def refusal(cache: ClusterCache, pod: dict):
    decision = decide(trim_pending_pod(pod), cache)
    assert decision.code is Code.UNSCHEDULABLE, decision  # retried, and woken when its claims change
    return decision


# -- kube-scheduler's words, as recorded --------------------------------------------------------


def test_a_claim_bound_to_a_volume_of_another_node_is_refused_in_kube_schedulers_recorded_words(cache):
    cache.volumes.upsert_claim(claim_info(api_claim("data", "pv-node2", cls="")))
    cache.volumes.upsert_volume(volume_info(api_volume("pv-node2", on="node2")))
    decision = refusal(cache, api_pod(volumes=[uses("data")]))
    assert decision.plugin == "VolumeBinding"
    assert decision.reason == ours(reason_for_the_pinned_node("pv-of-another-node"), "VolumeBinding")
    assert decision.waiting_on == (claim_wait_key("ml/data"),)
    # The same claim under a map naming node2 binds.
    assert decide(trim_pending_pod(api_pod(volumes=[uses("data")], node="node2")), cache).bind


def test_a_claim_that_does_not_exist_makes_the_pod_wait_in_kube_schedulers_recorded_words(cache):
    decision = refusal(cache, api_pod(volumes=[uses("no-such-claim")]))
    reason = reason_for_the_pinned_node("missing-claim")
    assert reason == 'persistentvolumeclaim "no-such-claim" not found'
    assert decision.reason == ours(reason, "VolumeBinding", pre_filter=True)
    assert decision.plugin == "VolumeBinding"


@pytest.mark.parametrize(
    "claim",
    [
        api_claim("data", cls="fast"),  # an Immediate class nobody provisions
        api_claim("data"),  # no class at all
        api_claim("data", cls="no-such-class"),  # a class that does not exist: Immediate
        api_claim("data", volume="pv-1", bound=False, cls="wffc"),  # names its PV, binding not completed
    ],
    ids=["immediate-class", "no-class", "missing-class", "prebound"],
)
def test_an_unbound_immediate_claim_makes_the_pod_wait_in_kube_schedulers_recorded_words(cache, claim):
    cache.volumes.upsert_class(StorageClass("fast", "Immediate", "example.com/nobody"))
    cache.volumes.upsert_class(StorageClass("wffc", "WaitForFirstConsumer", "example.com/nobody"))
    cache.volumes.upsert_volume(volume_info(api_volume("pv-1")))
    cache.volumes.upsert_claim(claim_info(claim))
    decision = refusal(cache, api_pod(volumes=[uses("data")]))
    for case in ("unbound-immediate", "prebound-to-missing-pv"):
        assert reason_for_the_pinned_node(case) == UNBOUND_IMMEDIATE
    assert decision.reason == ours(UNBOUND_IMMEDIATE, "VolumeBinding", pre_filter=True)
    assert claim_wait_key("ml/data") in decision.waiting_on


# -- the rest of kube-scheduler's rules -------------------------------------------------------------


def test_a_bound_claim_whose_volume_admits_the_node_or_has_no_affinity_binds(cache):
    cache.volumes.upsert_claim(claim_info(api_claim("here", "pv-node3")))
    cache.volumes.upsert_claim(claim_info(api_claim("anywhere", "pv-any")))
    cache.volumes.upsert_volume(volume_info(api_volume("pv-node3", on=NODE)))
    cache.volumes.upsert_volume(volume_info(api_volume("pv-any")))
    assert decide(trim_pending_pod(api_pod(volumes=[uses("here", "a"), uses("anywhere", "b")])), cache).bind


def test_a_bound_claim_whose_volume_is_gone_is_refused_as_kube_scheduler_words_it(cache):
    cache.volumes.upsert_claim(claim_info(api_claim("data", "gone")))
    decision = refusal(cache, api_pod(volumes=[uses("data")]))
    assert decision.reason == ours(
        "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)", "VolumeBinding"
    )


def test_a_volumes_affinity_on_the_nodes_name_never_matches_as_in_kube():
    # kube's CheckNodeAffinity matches a node made of the labels only.
    pv = api_volume("pv")
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
    pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [by_name]}}
    assert not volume_info(pv).admits(node_info(api_node(NODE)))


@pytest.mark.parametrize(
    ("claim", "words"),
    [
        (
            api_claim("data", "pv", phase="Lost"),
            'persistentvolumeclaim "data" bound to non-existent persistentvolume "pv"',
        ),
        (api_claim("data", "pv", deleting=True), 'persistentvolumeclaim "data" is being deleted'),
    ],
)
def test_a_lost_or_deleted_claim_makes_the_pod_wait(cache, claim, words):
    cache.volumes.upsert_claim(claim_info(claim))
    cache.volumes.upsert_volume(volume_info(api_volume("pv")))
    assert refusal(cache, api_pod(volumes=[uses("data")])).reason == ours(words, "VolumeBinding", pre_filter=True)


def test_a_generic_ephemeral_volume_uses_the_claim_named_after_the_pod_and_owned_by_it(cache):
    pod = api_pod(volumes=[{"name": "scratch2", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
    assert claim_names(trim_pending_pod(pod)) == (("train-0-scratch2", True),)
    words = 'waiting for ephemeral volume controller to create the persistentvolumeclaim "train-0-scratch2"'
    assert refusal(cache, pod).reason == ours(words, "VolumeBinding", pre_filter=True)
    cache.volumes.upsert_claim(claim_info(api_claim("train-0-scratch2", "pv", owner="someone-else")))
    cache.volumes.upsert_volume(volume_info(api_volume("pv", on=NODE)))
    words = "PVC ml/train-0-scratch2 was not created for pod ml/train-0 (pod is not owner)"
    assert refusal(cache, pod).reason == ours(words, "VolumeBinding", pre_filter=True)
    cache.volumes.upsert_claim(claim_info(api_claim("train-0-scratch2", "pv", owner="u1")))
    assert decide(trim_pending_pod(pod), cache).bind


def test_an_unbound_wait_for_first_consumer_claim_passes_the_prefilter_for_its_volume_to_be_provisioned(cache):
    cache.volumes.upsert_class(StorageClass("local", "WaitForFirstConsumer", "example.com/local"))
    cache.volumes.upsert_claim(claim_info(api_claim("data", cls="local")))
    claims = pre_filter(trim_pending_pod(api_pod(volumes=[uses("data")])), cache.volumes)
    assert claims.refusal is None
    assert [c.name for c in claims.delayed] == ["data"]
    assert claims.wait_keys == (claim_wait_key("ml/data"), class_wait_key("local"))


def test_the_prefilter_speaks_before_the_nodes_filters_as_in_kube_scheduler(cache):
    cordoned = api_node(NODE)
    cordoned["spec"] = {"unschedulable": True}
    cache.upsert_node(node_info(cordoned))
    decision = refusal(cache, api_pod(volumes=[uses("nope")]))
    assert decision.plugin == "VolumeBinding"


def test_a_pod_without_claims_costs_nothing_and_keeps_no_volumes():
    trimmed = trim_pending_pod(api_pod())
    assert "volumes" not in trimmed["spec"]  # its emptyDir is not kept
    assert pre_filter(trimmed, VolumeCache()) is NO_CLAIMS


def test_claims_keep_only_what_volume_binding_reads():
    claim = claim_info(
        {
            "metadata": {
                "namespace": "ml",
                "name": "c",
                "annotations": {
                    "volume.beta.kubernetes.io/storage-class": "beta",
                    "kubectl.kubernetes.io/x": "y" * 9000,
                },
            },
            "spec": {"storageClassName": "field", "volumeName": "pv"},
        }
    )
    assert (claim.storage_class, claim.bound, claim.volume_name) == ("beta", False, "pv")  # the beta annotation wins


# -- waking: a change to a claim, its volume or its class tries the pods waiting on it again -------


@pytest.fixture
def state() -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY)
    state.nodes_listed([node_info(api_node(n)) for n in ("node2", NODE)])
    for listed in (state.claims_listed, state.volumes_listed, state.storage_classes_listed):
        listed([])
    return state


def refused_in_backoff(state: SchedulerState, pod: dict) -> str:
    state.pod_changed(watched_pod(pod, "gpu-scheduler"))
    uid, taken = state.pop(0.0)
    decision = state.decide(uid, taken)
    assert not decision.bind, decision
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state(uid) == BACKOFF
    return uid


def test_a_pod_waiting_for_its_claim_is_woken_when_the_claim_appears_and_binds_when_it_is_bound(state):
    uid = refused_in_backoff(state, api_pod(volumes=[uses("data")]))
    assert state.claim_changed(claim_info(api_claim("other"))) is False  # another claim: nothing wakes
    assert state.queue_state(uid) == BACKOFF
    assert state.claim_changed(claim_info(api_claim("data", cls="fast"))) is True
    assert state.queue_state(uid) == ACTIVE
    uid, taken = state.pop(0.0)
    state.refused(uid, state.decide(uid, taken), now=0.0, jitter=0.5)  # unbound immediate: waits
    state.volume_changed(volume_info(api_volume("pv", on=NODE)))
    assert state.claim_changed(claim_info(api_claim("data", "pv", cls="fast"))) is True
    uid, taken = state.pop(0.0)
    assert state.decide(uid, taken).bind


def test_a_pod_refused_for_its_claims_volume_is_woken_when_the_volume_changes(state):
    state.claim_changed(claim_info(api_claim("data", "pv")))
    state.volume_changed(volume_info(api_volume("pv", on="node2")))
    uid = refused_in_backoff(state, api_pod(volumes=[uses("data")]))
    assert state.volume_changed(volume_info(api_volume("pv", on="node2"))) is False  # no change
    assert state.volume_changed(volume_info(api_volume("unrelated", on=NODE))) is False
    assert state.volume_changed(volume_info(api_volume("pv", on=NODE))) is True
    assert state.queue_state(uid) == ACTIVE
    _, taken = state.pop(0.0)
    assert state.decide(uid, taken).bind


def test_a_pod_waiting_on_a_missing_class_is_woken_when_it_appears_and_lists_wake_what_changed(state):
    state.claim_changed(claim_info(api_claim("data", cls="local")))
    uid = refused_in_backoff(state, api_pod(volumes=[uses("data")]))  # class unknown: Immediate, waits
    assert state.storage_classes_listed([StorageClass("local", "WaitForFirstConsumer", "example.com/x")]) is True
    assert state.queue_state(uid) == ACTIVE
    _, taken = state.pop(0.0)
    state.refused(uid, state.decide(uid, taken), now=0.0, jitter=0.5)
    assert state.claims_listed([claim_info(api_claim("data", cls="local"))]) is False  # unchanged
    assert state.claims_listed([]) is True  # deleted while the watch was away
    assert state.queue_state(uid) == ACTIVE


def test_a_volume_named_by_a_claim_is_indexed_once_and_forgotten_with_it():
    volumes = VolumeCache()
    volumes.upsert_claim(claim_info(api_claim("a", "pv")))
    volumes.upsert_claim(claim_info(api_claim("b", "pv")))
    assert volumes.upsert_volume(volume_info(api_volume("pv"))) == [claim_wait_key("ml/a"), claim_wait_key("ml/b")]
    volumes.delete_claim("ml/a")
    volumes.upsert_claim(claim_info(api_claim("b", "pv2")))
    assert volumes.delete_volume("pv") == []
