"""Decisions on plain data: node resolution, node health, the GPU ledger and the sharing policy."""

import json

import pytest
from gpu_scheduler.kube.objects import node_info
from gpu_scheduler.scheduling import (
    AmbiguousAliasError,
    AssignedPod,
    ClusterCache,
    GpuLedger,
    NodeNotFoundError,
    SharingPolicy,
    decide,
)


def node(name, alias=None, ready=True, unschedulable=False, gpus=4, labels=None):
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return node_info(
        {
            "metadata": {"name": name, "labels": {**({"gpu-node-name": alias} if alias else {}), **(labels or {})}},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True" if ready else "False", "message": "kubelet stopped"}],
            },
        }
    )


def pod(name, map_text, injected=None, uid=None):
    annotations = {"gpu-scheduling-map": map_text}
    if injected is not None:
        annotations["gpu-scheduler/placement"] = json.dumps({"cudaVisibleDevices": injected})
    return {"metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}", "annotations": annotations}}


@pytest.fixture
def cache():
    cache = ClusterCache()
    for n in (node("node1"), node("kind-worker", alias="node2"), node("kind-worker2", alias="node3")):
        cache.nodes.upsert(n)
    return cache


@pytest.fixture
def nodes(cache):
    return cache.nodes


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


def test_a_node_named_like_another_nodes_alias_wins_over_the_alias(cache):
    # Precedence with a conflict: node "node2" exists by name, and kind-worker carries the
    # alias label node2. The map's "node2" means the node of that name.
    cache.nodes.upsert(node("node2"))
    decision = decide(pod("check-1", "1=node2:2", injected="2"), cache)
    assert (decision.bind, decision.node) == (True, "node2")
    cache.nodes.delete("node2")
    assert decide(pod("check-1", "1=node2:2", injected="2"), cache).node == "kind-worker"


def test_binds_to_the_resolved_node(cache):
    decision = decide(pod("check-1", "1=node2:2", injected="2"), cache)
    assert (decision.bind, decision.node, decision.index, decision.devices) == (True, "kind-worker", 1, "2")
    assert decision.warnings == ()


@pytest.mark.parametrize(
    ("change", "reason", "plugin"),
    [
        (
            node("node1", ready=False),
            "0/1 nodes are available: 1 node(s) were not Ready (kubelet stopped). "
            "The map (line 1) pins the pod to node node1, which NodeReady refused.",
            "NodeReady",
        ),
        (
            node("node1", unschedulable=True),
            "0/1 nodes are available: 1 node(s) were unschedulable. "
            "The map (line 1) pins the pod to node node1, which NodeUnschedulable refused.",
            "NodeUnschedulable",
        ),
    ],
)
def test_not_ready_or_cordoned_node_is_refused_with_a_retryable_reason(cache, change, reason, plugin):
    cache.nodes.upsert(change)
    decision = decide(pod("check-0", "0=node1:0", injected="0"), cache)
    assert (decision.bind, decision.reason, decision.retryable, decision.plugin) == (False, reason, True, plugin)


def test_missing_node_is_retryable_and_invalid_map_is_not(cache):
    missing = decide(pod("check-0", "0=node9:0"), cache)
    assert not missing.bind and missing.retryable and "node9 not found" in missing.reason
    invalid = decide(pod("check-0", "0=node1"), cache)
    assert not invalid.bind and not invalid.retryable and invalid.reason.startswith("line 1: ")


def test_map_changed_after_injection_is_refused(cache):
    decision = decide(pod("check-0", "0=node1:1", injected="0"), cache)
    assert not decision.bind and "CUDA_VISIBLE_DEVICES=0" in decision.reason


def test_pod_without_injected_env_binds_with_a_warning(cache):
    decision = decide(pod("check-0", "0=node1:0"), cache)
    assert decision.bind
    assert [w.reason for w in decision.warnings] == ["CUDAEnvNotInjected"]
    assert "webhook installed" in decision.warnings[0].message


@pytest.mark.parametrize(
    ("policy", "bind", "mentions_holder"),
    [(SharingPolicy.ALLOW, True, False), (SharingPolicy.WARN, True, True), (SharingPolicy.DENY, False, True)],
)
def test_sharing_policy(cache, policy, bind, mentions_holder):
    cache.add_pod(AssignedPod("uid-check-3", "ml/check-3", "node1", (), ("3",)))
    decision = decide(pod("check-4", "4=node1:3,1", injected="3,1"), cache, policy)
    assert decision.bind is bind
    text = " ".join(w.message for w in decision.warnings) + (decision.reason or "")
    assert ("GPU 3 by ml/check-3" in text) is mentions_holder
    assert ("GPUShared" in [w.reason for w in decision.warnings]) is (policy is SharingPolicy.WARN)


def test_ledger_release_frees_gpus_and_counts_per_node():
    ledger = GpuLedger()
    ledger.hold("u0", "a/p-0", "node1", ("0", "1"))
    ledger.hold("u1", "a/p-1", "node1", ("1",))
    ledger.hold("u2", "a/p-2", "node2", ("0",))
    assert ledger.held_per_node() == {"node1": 2, "node2": 1}
    assert ledger.conflicts("u9", "node1", ("1",)) == [("a/p-0", "1"), ("a/p-1", "1")]
    assert ledger.conflicts("u0", "node1", ("0",)) == []  # a pod never conflicts with itself
    assert ledger.node_of("u2") == "node2" and ledger.node_of("u9") is None
    assert ledger.release("u0") == "node1" and ledger.release("u0") is None
    assert ledger.held_per_node() == {"node1": 1, "node2": 1}


@pytest.mark.parametrize(
    ("held", "asked"),
    [
        ("0", "00"),
        ("007", "7"),
        ("GPU-ABCDEF01-2345-6789-abcd-ef0123456789", "gpu-abcdef01-2345-6789-ABCD-EF0123456789"),
    ],
)
def test_the_ledger_compares_devices_not_their_spelling(held, asked):
    # Bug 5: "0" and "00" (or one UUID in two letter cases) are one GPU for the grammar, but
    # the ledger compared the raw tokens, so --gpu-sharing=deny let two pods have it.
    ledger = GpuLedger()
    ledger.hold("u0", "a/p-0", "node1", (held,))
    assert ledger.conflicts("u1", "node1", (asked,)) == [("a/p-0", asked)]
    assert ledger.conflicts("u1", "node2", (asked,)) == []


def test_holds_are_per_pod_uid_so_a_recreated_pod_of_the_same_name_keeps_its_own(cache):
    # Bug 2: holds were keyed by name: the old pod's late DELETED event freed the new one's GPUs.
    cache.add_pod(AssignedPod("old", "ml/web-0", "node1", (), ("0",)))
    cache.assume(AssignedPod("new", "ml/web-0", "node1", (), ("1",)))
    cache.remove_pod("old")
    assert cache.ledger.conflicts("other", "node1", ("1",)) == [("ml/web-0", "1")]
    assert cache.ledger.conflicts("other", "node1", ("0",)) == []
    decision = decide(pod("other-0", "0=node1:1", injected="1"), cache, SharingPolicy.DENY)
    assert not decision.bind and "GPU 1 by ml/web-0" in decision.reason


def test_an_ordinal_beyond_the_nodes_gpu_capacity_is_refused(cache):
    # Bug 5: "0=node1:7" on a 4-GPU node was bound.
    decision = decide(pod("check-0", "0=node1:1,7", injected="1,7"), cache)
    assert not decision.bind and decision.retryable and decision.plugin == "GPUDevices"
    assert "1 node(s) had GPUs 0-3 (nvidia.com/gpu: 4), not GPU 7" in decision.reason
    huge = "9" * 5000  # thousands of digits: the grammar refuses it on its line, before any int()
    refused = decide(pod("check-0", f"0=node1:{huge}", injected=huge), cache)
    assert not refused.bind and not refused.retryable and "largest CUDA device ordinal" in refused.reason
    assert decide(pod("check-0", "0=node1:3", injected="3"), cache).bind
    assert decide(pod("check-0", "0=node1:0003", injected="0003"), cache).bind


def test_gpu_ordinals_are_not_checked_on_a_node_that_advertises_no_gpus(cache):
    bare = node_info(
        {
            "metadata": {"name": "cpu1"},
            "status": {"allocatable": {"pods": "10"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }
    )
    cache.nodes.upsert(bare)
    assert decide(pod("check-0", "0=cpu1:7", injected="7"), cache).bind
    cache.nodes.upsert(node("cpu1", gpus=0))
    assert "had no GPU (nvidia.com/gpu: 0), not GPU 7" in decide(pod("check-0", "0=cpu1:7", injected="7"), cache).reason


def test_sharing_policy_parse_names_the_choices():
    assert SharingPolicy.parse("DENY") is SharingPolicy.DENY
    with pytest.raises(ValueError, match="allow|warn|deny"):
        SharingPolicy.parse("maybe")
