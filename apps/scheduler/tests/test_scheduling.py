"""Decisions on plain data: node resolution, node health, the GPU ledger and the sharing policy."""

import json

import pytest
from gpu_scheduler.kube.objects import assigned_pod, node_info, trim_pending_pod
from gpu_scheduler.placement import (
    DEVICES_ANNOTATION,
    TOTAL_ANNOTATION_BYTES,
    annotation_bytes,
    bind_annotations,
    bind_env_entry,
    placement_for,
)
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


# A container's entry that reads the devices the bind writes (the default).
BIND = "<from the bind>"


def pod(name, map_text, injected=BIND, uid=None, annotated=None):
    """A pending pod as admission leaves it: by default its container reads the bind's devices;
    `injected` a literal CUDA_VISIBLE_DEVICES (the user's, or an earlier version's webhook's, and
    then, unless `annotated` says otherwise, in the placement annotation too), None no entry at all."""
    annotations = {"gpu-scheduling-map": map_text}
    recorded = injected if annotated is None and injected is not BIND else annotated
    if recorded:
        annotations["gpu-scheduler/placement"] = json.dumps({"cudaVisibleDevices": recorded})
    env = [env_entry(injected)] if injected is not None else []
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}", "annotations": annotations},
        "spec": {"containers": [{"name": "main", "env": env}]},
    }


def env_entry(value):
    return bind_env_entry() if value is BIND else {"name": "CUDA_VISIBLE_DEVICES", "value": value}


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


def test_a_pod_whose_container_has_no_entry_is_refused_for_good_saying_what_to_add(cache):
    # Fails closed: the container would see every GPU of node1.
    decision = decide(pod("check-0", "0=node1:0", injected=None), cache)
    assert not decision.bind and not decision.retryable
    assert decision.reason.startswith("container(s) main of the pod have no CUDA_VISIBLE_DEVICES entry")
    assert "fieldPath: \"metadata.annotations['gpu-scheduler/cuda-visible-devices']\"" in decision.reason


def big_pod(spare: int) -> dict:
    """A pending pod as the informer trims it, whose annotations leave `spare` bytes under
    Kubernetes' limit once the Binding's are set."""
    full = pod("check-0", "0=node1:0,1")
    filler_key = "example.com/notes"
    bind = annotation_bytes(bind_annotations(placement_for(full)))
    used = annotation_bytes(full["metadata"]["annotations"]) + len(filler_key) + bind
    full["metadata"]["annotations"][filler_key] = "x" * (TOTAL_ANNOTATION_BYTES - used - spare)
    full["spec"]["schedulerName"] = "gpu-scheduler"
    return trim_pending_pod(full)


def test_a_pod_the_bindings_annotations_would_push_past_the_limit_is_refused_for_good(cache):
    """Seen on kube-apiserver 1.37: the Binding's annotations are stored unchecked, and the pod
    is then refused every update, the kubelet's status included."""
    assert decide(big_pod(spare=0), cache).bind
    decision = decide(big_pod(spare=-1), cache)
    assert not decision.bind and not decision.retryable
    assert decision.reason == (
        f"the pod's annotations would be {TOTAL_ANNOTATION_BYTES + 1} bytes with the "
        "gpu-scheduler/cuda-visible-devices and gpu-scheduler/placement annotations its Binding would add; "
        "Kubernetes allows 262144: shorten the "
        "gpu-scheduling-map annotation (drop comments and lines of other indexes) or other annotations"
    )


def test_devices_written_on_the_pod_before_its_bind_are_not_counted_twice():
    """The Binding replaces them: what counts is the pod's other annotations plus the Binding's."""
    plain = pod("check-0", "0=node1:0,1")
    written = pod("check-0", "0=node1:0,1")
    written["metadata"]["annotations"][DEVICES_ANNOTATION] = "7" * 1000
    assert trim_pending_pod(written)["annotationBytes"] == trim_pending_pod(plain)["annotationBytes"]
    assert trim_pending_pod(plain)["annotationBytes"] == annotation_bytes(plain["metadata"]["annotations"])


def test_a_pod_reading_the_bind_binds_without_warnings(cache):
    decision = decide(pod("check-0", "0=node1:0,1"), cache)
    assert decision.bind and decision.warnings == () and decision.devices == "0,1"


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


# -- issue 16: deny means deny --------------------------------------------------------------------

GPU_UUID = "GPU-8a2b4c6d-1e2f-3a4b-5c6d-7e8f9a0b1c2d"
MIG_UUID = "MIG-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d"


def api_pod(name, map_text, given, annotated=None, node_name="", bound=None):
    """A pod of ours as the API server returns it. `given`: container name -> its
    CUDA_VISIBLE_DEVICES (None: unset, BIND: from the bind); a name starting with "init" is an
    init container. `bound`: the devices annotation its Binding wrote."""

    def container(name, value):
        return {"name": name, "image": "x", "env": [env_entry(value)] if value else []}

    annotations = {"gpu-scheduling-map": map_text}
    if annotated is not None:
        annotations["gpu-scheduler/placement"] = json.dumps(
            {"index": 0, "node": "node1", "cudaVisibleDevices": annotated}
        )
    if bound is not None:
        annotations[DEVICES_ANNOTATION] = bound
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": annotations},
        "spec": {
            "schedulerName": "gpu-scheduler",
            "nodeName": node_name,
            "initContainers": [container(n, v) for n, v in given.items() if n.startswith("init")],
            "containers": [container(n, v) for n, v in given.items() if not n.startswith("init")],
        },
    }


def test_overwriting_the_placement_annotation_frees_no_gpu_under_deny(cache):
    # Point 3: `kubectl annotate --overwrite gpu-scheduler/placement=...` moved the ledger's
    # hold of a running pod to GPU 3, and GPU 0, which its container still uses, went to another.
    holder = api_pod("a-0", "0=node1:0", {"main": "0"}, annotated="3", node_name="node1")
    cache.add_pod(assigned_pod(holder, "gpu-scheduler"))
    assert cache.pod("uid-a-0").devices == ("0",)
    decision = decide(trim_pending_pod(api_pod("b-0", "0=node1:0", {"main": "0"})), cache, SharingPolicy.DENY)
    assert not decision.bind and "GPU 0 by ml/a-0" in decision.reason


def test_a_pending_pod_whose_annotation_was_removed_after_its_map_changed_is_not_bound(cache):
    # Point 3: without the annotation the scheduler took the pod for one the webhook never saw
    # and bound it with the map's GPU 1 while its container has GPU 0.
    edited = api_pod("c-0", "0=node1:1", {"main": "0"})
    decision = decide(trim_pending_pod(edited), cache)
    assert not decision.bind and not decision.retryable
    assert "the pod's containers were created with CUDA_VISIBLE_DEVICES=0" in decision.reason


def test_containers_given_different_devices_are_refused_naming_each(cache):
    mixed = api_pod("d-0", "0=node1:0", {"init-setup": "0", "main": "1", "sidecar": BIND})
    decision = decide(trim_pending_pod(mixed), cache)
    assert not decision.bind and not decision.retryable
    assert "different CUDA_VISIBLE_DEVICES (init-setup='0', main='1', sidecar from the bind)" in decision.reason
    # What to do instead: the entry that reads the bind (no webhook of ours writes literals).
    assert "metadata.annotations['gpu-scheduler/cuda-visible-devices']" in decision.reason


def test_a_pod_is_refused_while_any_container_lacks_the_entry(cache):
    # A pod that set the map's devices itself sees exactly them.
    own = decide(trim_pending_pod(api_pod("e-0", "0=node1:0", {"main": "0"})), cache)
    assert own.bind and own.warnings == ()
    mixed = decide(trim_pending_pod(api_pod("e-0", "0=node1:0", {"init": BIND, "main": BIND, "side": None})), cache)
    assert not mixed.bind and mixed.reason.startswith("container(s) side of the pod have no CUDA_VISIBLE_DEVICES")
    both = decide(trim_pending_pod(api_pod("e-0", "0=node1:0", {"init": "0", "main": BIND})), cache)
    assert both.bind  # a literal equal to the map's line and an entry from the bind see the same


def test_a_bound_pod_reading_the_bind_holds_what_the_binding_wrote():
    def held(given, bound, map_text="0=node1:2"):
        pod = api_pod("f-0", map_text, given, annotated="3", node_name="node1", bound=bound)
        return assigned_pod(pod, "gpu-scheduler").devices

    assert held({"main": BIND}, "2,3") == ("2", "3")
    assert held({"init": BIND, "main": "1"}, "2") == ("2", "1")  # every device any container sees
    # A binding without the annotation (an older scheduler, a broken build): the containers see
    # "" and hold nothing, whatever the map says.
    assert held({"main": BIND}, None) == ()


def test_a_live_pod_holds_every_device_its_containers_were_given():
    def held(given, map_text="0=node1:2"):
        return assigned_pod(api_pod("f-0", map_text, given, annotated="3", node_name="node1"), "gpu-scheduler").devices

    assert held({"main": "0,1"}) == ("0", "1")
    assert held({"init": "0", "main": "1", "side": "01"}) == ("0", "1")  # disagreeing: all of them, once
    assert held({"main": " 1 ,all,-1"}) == ("1",)  # what no map line can name is no GPU of the ledger
    assert held({"main": None}) == ("2",)  # given none: the map's line, never the annotation
    with_source = api_pod("f-0", "0=node1:2", {"main": None}, annotated="3", node_name="node1")
    with_source["spec"]["containers"][0]["env"] = [
        {"name": "CUDA_VISIBLE_DEVICES", "value": "1"},
        {"name": "CUDA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "list"}}},
    ]
    assert assigned_pod(with_source, "gpu-scheduler").devices == ("2",)  # the last entry wins, and is unreadable


@pytest.mark.parametrize(
    ("held", "asked"),
    [
        ("0", GPU_UUID),
        (GPU_UUID, "0"),
        (GPU_UUID, MIG_UUID),
        ("3", MIG_UUID),
        (MIG_UUID, "1"),
        (f"MIG-{GPU_UUID}/1/0", MIG_UUID),  # the names drivers before and after R470 give one MIG device
    ],
)
def test_under_deny_devices_spelled_another_way_than_a_live_pods_on_its_node_are_refused(cache, held, asked):
    # Point 2: GPU 0, its GPU-<uuid> and a MIG-<uuid> on it were three devices to the ledger.
    cache.add_pod(AssignedPod("uid-a-0", "ml/a-0", "node1", (), (held,)))
    decision = decide(pod("b-0", f"0=node1:{asked}", injected=asked), cache, SharingPolicy.DENY)
    assert not decision.bind and decision.retryable
    assert f"on node node1, ml/b-0 asks for {asked}, ml/a-0 holds {held}" in decision.reason
    assert decision.reason.endswith("and --gpu-sharing=deny")


@pytest.mark.parametrize(
    ("held", "asked", "node"),
    [
        ("0", "1", "node1"),
        (GPU_UUID, GPU_UUID[:-1] + "e", "node1"),
        (MIG_UUID, MIG_UUID[:-1] + "e", "node1"),  # two MIG slices: the point of MIG
        ("0", GPU_UUID, "node2"),  # another node
    ],
)
def test_under_deny_devices_spelled_alike_or_on_another_node_are_compared_as_before(cache, held, asked, node):
    cache.add_pod(AssignedPod("uid-a-0", "ml/a-0", "node1", (), (held,)))
    assert decide(pod("b-0", f"0={node}:{asked}", injected=asked), cache, SharingPolicy.DENY).bind


def test_a_pod_is_never_refused_for_its_own_spelling_and_a_freed_spelling_is_forgotten(cache):
    cache.add_pod(AssignedPod("uid-b-0", "ml/b-0", "node1", (), ("0",)))  # b-0 itself, e.g. assumed
    assert decide(pod("b-0", f"0=node1:{GPU_UUID}", injected=GPU_UUID), cache, SharingPolicy.DENY).bind
    cache.add_pod(AssignedPod("uid-a-0", "ml/a-0", "node1", (), ("0",)))
    assert not decide(pod("c-0", f"0=node1:{GPU_UUID}", injected=GPU_UUID), cache, SharingPolicy.DENY).bind
    cache.remove_pod("uid-a-0")
    cache.remove_pod("uid-b-0")
    assert decide(pod("c-0", f"0=node1:{GPU_UUID}", injected=GPU_UUID), cache, SharingPolicy.DENY).bind


@pytest.mark.parametrize(("policy", "warned"), [(SharingPolicy.WARN, True), (SharingPolicy.ALLOW, False)])
def test_under_warn_devices_spelled_another_way_bind_with_a_gpushared_warning(cache, policy, warned):
    cache.add_pod(AssignedPod("uid-a-0", "ml/a-0", "node1", (), ("0",)))
    decision = decide(pod("b-0", f"0=node1:{GPU_UUID}", injected=GPU_UUID), cache, policy)
    assert decision.bind
    messages = [w.message for w in decision.warnings if w.reason == "GPUShared"]
    assert bool(messages) is warned
    if warned:
        assert messages[0].startswith(
            f"maybe sharing GPUs with running pods: on node node1, ml/b-0 asks for {GPU_UUID}"
        )
