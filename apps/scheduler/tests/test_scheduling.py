"""Decisions on plain data: node resolution, node health, the GPU ledger and the sharing policy."""

import json

import pytest
from gpu_scheduler.scheduling import (
    AmbiguousAliasError,
    GpuLedger,
    NodeIndex,
    NodeNotFoundError,
    SharingPolicy,
    decide,
)


def node(name, alias=None, ready=True, unschedulable=False, gpus=4):
    return {
        "metadata": {"name": name, "labels": {"gpu-node-name": alias} if alias else {}},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False", "message": "kubelet stopped"}],
        },
    }


def pod(name, map_text, injected=None):
    annotations = {"gpu-scheduling-map": map_text}
    if injected is not None:
        annotations["gpu-scheduler/placement"] = json.dumps({"cudaVisibleDevices": injected})
    return {"metadata": {"name": name, "namespace": "ml", "annotations": annotations}, "spec": {}}


@pytest.fixture
def nodes():
    index = NodeIndex()
    for n in (node("node1"), node("kind-worker", alias="node2"), node("kind-worker2", alias="node3")):
        index.upsert(n)
    return index


def test_name_wins_then_alias(nodes):
    assert nodes.resolve("node1").name == "node1"
    assert nodes.resolve("node2").name == "kind-worker"


def test_missing_node_says_name_and_alias_label(nodes):
    with pytest.raises(NodeNotFoundError) as caught:
        nodes.resolve("node9")
    assert str(caught.value) == "node node9 not found: no node has that name or the label gpu-node-name=node9"


def test_two_nodes_with_one_alias_is_an_error(nodes):
    nodes.upsert(node("kind-worker3", alias="node3"))
    with pytest.raises(AmbiguousAliasError) as caught:
        nodes.resolve("node3")
    assert "kind-worker2, kind-worker3" in str(caught.value)


def test_relabel_and_delete_keep_the_alias_index_current(nodes):
    nodes.upsert(node("kind-worker", alias="node5"))
    with pytest.raises(NodeNotFoundError):
        nodes.resolve("node2")
    assert nodes.resolve("node5").name == "kind-worker"
    nodes.delete("kind-worker")
    with pytest.raises(NodeNotFoundError):
        nodes.resolve("node5")
    assert nodes.matches("node3", "kind-worker2") and not nodes.matches("node2", "kind-worker2")


def test_binds_to_the_resolved_node(nodes):
    decision = decide(pod("check-1", "1=node2:2", injected="2"), nodes, GpuLedger())
    assert (decision.bind, decision.node, decision.index, decision.devices) == (True, "kind-worker", 1, "2")
    assert decision.warnings == ()


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (node("node1", ready=False), "node node1 is not Ready (kubelet stopped)"),
        (node("node1", unschedulable=True), "node node1 is cordoned (spec.unschedulable=true)"),
    ],
)
def test_not_ready_or_cordoned_node_is_refused_with_a_retryable_reason(nodes, change, reason):
    nodes.upsert(change)
    decision = decide(pod("check-0", "0=node1:0", injected="0"), nodes, GpuLedger())
    assert (decision.bind, decision.reason, decision.retryable) == (False, reason, True)


def test_missing_node_is_retryable_and_invalid_map_is_not(nodes):
    missing = decide(pod("check-0", "0=node9:0"), nodes, GpuLedger())
    assert not missing.bind and missing.retryable and "node9 not found" in missing.reason
    invalid = decide(pod("check-0", "0=node1"), nodes, GpuLedger())
    assert not invalid.bind and not invalid.retryable and invalid.reason.startswith("line 1: ")


def test_map_changed_after_injection_is_refused(nodes):
    decision = decide(pod("check-0", "0=node1:1", injected="0"), nodes, GpuLedger())
    assert not decision.bind and "CUDA_VISIBLE_DEVICES=0" in decision.reason


def test_pod_without_injected_env_binds_with_a_warning(nodes):
    decision = decide(pod("check-0", "0=node1:0"), nodes, GpuLedger())
    assert decision.bind
    assert [w.reason for w in decision.warnings] == ["CUDAEnvNotInjected"]
    assert "webhook installed" in decision.warnings[0].message


@pytest.mark.parametrize(
    ("policy", "bind", "mentions_holder"),
    [(SharingPolicy.ALLOW, True, False), (SharingPolicy.WARN, True, True), (SharingPolicy.DENY, False, True)],
)
def test_sharing_policy(nodes, policy, bind, mentions_holder):
    ledger = GpuLedger()
    ledger.hold("ml/check-3", "node1", ("3",))
    decision = decide(pod("check-4", "4=node1:3,1", injected="3,1"), nodes, ledger, policy)
    assert decision.bind is bind
    text = " ".join(w.message for w in decision.warnings) + (decision.reason or "")
    assert ("GPU 3 by ml/check-3" in text) is mentions_holder
    assert ("GPUShared" in [w.reason for w in decision.warnings]) is (policy is SharingPolicy.WARN)


def test_ledger_release_frees_gpus_and_counts_per_node():
    ledger = GpuLedger()
    ledger.hold("a/p-0", "node1", ("0", "1"))
    ledger.hold("a/p-1", "node1", ("1",))
    ledger.hold("a/p-2", "node2", ("0",))
    assert ledger.held_per_node() == {"node1": 2, "node2": 1}
    assert ledger.conflicts("a/p-9", "node1", ("1",)) == [("a/p-0", "1"), ("a/p-1", "1")]
    assert ledger.conflicts("a/p-0", "node1", ("0",)) == []  # a pod never conflicts with itself
    assert ledger.node_of("a/p-2") == "node2" and ledger.node_of("a/p-9") is None
    assert ledger.release("a/p-0") and not ledger.release("a/p-0")
    assert ledger.held_per_node() == {"node1": 1, "node2": 1}


def test_sharing_policy_parse_names_the_choices():
    assert SharingPolicy.parse("DENY") is SharingPolicy.DENY
    with pytest.raises(ValueError, match="allow|warn|deny"):
        SharingPolicy.parse("maybe")
