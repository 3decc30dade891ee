"""Lines that ask for a number of GPUs: the grammar, and the node and GPUs the scheduler
chooses for them (scheduling.dynamic), on plain data."""

import json

import pytest
from gpu_scheduler.kube.objects import node_info
from gpu_scheduler.placement import (
    PLACEMENT_ANNOTATION,
    GpuRequest,
    InvalidMapError,
    MapEntry,
    MissingEntryError,
    bind_annotations,
    bind_env_entry,
    parse_map_uncached,
    placement_for,
)
from gpu_scheduler.scheduling import AssignedPod, ClusterCache, Code, SharingPolicy, decide
from gpu_scheduler.scheduling.dynamic import best_set, free_gpus
from gpu_scheduler.scheduling.inventory import INVENTORY_ANNOTATION, Gpu, Inventory, Link

NVLINK_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7))


def eight_gpus(node_name: str) -> Inventory:
    """Eight GPUs joined by NVLink in pairs (0-1, 2-3, 4-5, 6-7); the rest one NUMA node apart."""
    gpus = tuple(
        Gpu(i, f"GPU-{node_name[-1]:0>8}-0000-4000-8000-{i:012d}", f"0000:{i:02x}:00.0", "A100", 40960)
        for i in range(8)
    )
    links = tuple(
        Link(a, b, 12 if (a, b) in NVLINK_PAIRS else 0, "NVLINK" if (a, b) in NVLINK_PAIRS else "NODE")
        for a in range(8)
        for b in range(a + 1, 8)
    )
    return Inventory("550.54.15", gpus, links)


def gpu_node(name: str, labels: dict | None = None, inventory: bool = True, gpus: int = 8):
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    annotations = {INVENTORY_ANNOTATION: eight_gpus(name).to_annotation()} if inventory else {}
    return node_info(
        {
            "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


def pod(name: str, map_text: str, env=None, owner: str | None = None):
    meta = {"name": name, "namespace": "ml", "uid": f"uid-{name}", "annotations": {"gpu-scheduling-map": map_text}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x", "controller": True, "uid": "o"}]
    containers = [{"name": "main", "env": [bind_env_entry()] if env is None else env}]
    return {"metadata": meta, "spec": {"containers": containers}}


def holding(cache: ClusterCache, name: str, node: str, devices: tuple[str, ...]) -> None:
    cache.add_pod(AssignedPod(f"uid-{name}", f"ml/{name}", node, (), devices))


@pytest.fixture
def cache():
    cache = ClusterCache()
    for name in ("node1", "node2", "node3"):
        # As the node watch stores it: the ledger then keys each GPU by its UUID.
        cache.upsert_node(gpu_node(name, labels={"pool": "a100" if name != "node3" else "h100"}))
    return cache


# -- the grammar ----------------------------------------------------------------------------------


def test_a_pinned_map_means_what_it_meant():
    parsed = parse_map_uncached("0=node1:0,1\n1=node2:2\n")
    assert dict(parsed) == {0: MapEntry(0, "node1", ("0", "1"), 1), 1: MapEntry(1, "node2", ("2",), 2)}
    assert parsed.requests == {}


def test_counts_selectors_and_the_line_of_every_pod_are_read():
    parsed = parse_map_uncached("0=node1:0\n1=*:gpus=2\n2=*[pool=a100, rack in (r1,r2), !spot]:gpus=4\n*=*:gpus=1\n")
    assert parsed.line_for(0) == MapEntry(0, "node1", ("0",), 1)
    two = parsed.line_for(1)
    assert isinstance(two, GpuRequest) and (two.count, two.selector, two.line) == (2, (), 2)
    four = parsed.line_for(2)
    assert four.admits({"pool": "a100", "rack": "r2"})
    assert not four.admits({"pool": "a100", "rack": "r2", "spot": "yes"})
    assert not four.admits({"pool": "h100", "rack": "r1"})
    assert parsed.line_for(9) == parsed.line_for(None) == GpuRequest(None, 1, (), "", 4)
    assert parsed.to_json()["*"] == {"node": "*", "node_selector": "", "gpus": 1}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0=*:2", "asks for a number of GPUs, `gpus=<count>`"),
        ("0=*:gpus=0", "the count must be a whole number from 1 to 1024"),
        ("0=*:gpus=99999999999999999999", "the count must be a whole number"),
        ("0=*[]:gpus=1", "empty node selector"),
        ("0=*[pool==]:gpus=1", None),  # an empty value is a valid label value
        ("0=*[a b]:gpus=1", "'a b' in the node selector"),
        ("0=*[pool in (a b)]:gpus=1", "'pool in (a b)' in the node selector"),
        ("0=*pool:gpus=1", "is neither a node nor `*`"),
        ("*=node1:0", "the line of every pod (`*`) must leave the node to the scheduler"),
        ("0=*:gpus=1\n0=node1:1", "line 2: index 0 is already given on line 1"),
        ("*=*:gpus=1\n*=*:gpus=2", "line 2: index * is already given on line 1"),
    ],
)
def test_a_wrong_count_line_is_refused_saying_where(text, says):
    if says is None:
        parse_map_uncached(text)
        return
    with pytest.raises(InvalidMapError) as refused:
        parse_map_uncached(text)
    assert says in str(refused.value)
    assert str(refused.value).startswith("line ")


def test_a_pod_without_an_index_takes_the_line_of_every_pod_and_only_that():
    deployment_pod = pod("web-7d9f-abcde", "*=*:gpus=1\n", owner="ReplicaSet")
    assert placement_for(deployment_pod) == GpuRequest(None, 1, (), "", 1)
    with pytest.raises(MissingEntryError, match="a line `\\*=\\*:gpus=<count>` places every pod"):
        placement_for(pod("ranks-5", "0=*:gpus=1\n"))


# -- the choice -----------------------------------------------------------------------------------


def test_a_pod_goes_where_gpus_are_in_use_and_untouched_nodes_stay_whole(cache):
    holding(cache, "a", "node2", ("0",))
    decision = decide(pod("p-0", "0=*:gpus=1\n"), cache)
    assert decision.code is Code.SUCCESS and decision.node == "node2"
    # GPU 1, NVLink partner of the busy GPU 0: no free NVLink pair is broken.
    assert decision.devices == "1"
    assert "node2 was already in use (7 of 8 GPUs free)" in decision.chosen


def test_two_gpus_get_an_nvlink_pair(cache):
    holding(cache, "a", "node1", ("0", "2", "4", "6"))  # every pair of node1 broken
    holding(cache, "b", "node2", ("0",))
    decision = decide(pod("p-0", "0=*:gpus=2\n"), cache)
    assert (decision.node, decision.devices) == ("node2", "2,3")
    assert "joined by NVLink" in decision.chosen


def test_without_a_free_nvlink_pair_the_closest_pair_is_said(cache):
    for name in ("node1", "node2", "node3"):
        holding(cache, f"h-{name}", name, ("0", "2", "4", "6"))
    decision = decide(pod("p-0", "0=*:gpus=2\n"), cache)
    assert decision.code is Code.SUCCESS
    assert "no NVLink set was free" in decision.chosen


def test_a_whole_node_request_finds_the_untouched_node(cache):
    holding(cache, "a", "node1", ("3",))
    decision = decide(pod("p-0", "0=*[pool=a100]:gpus=8\n"), cache)
    assert (decision.node, decision.devices) == ("node2", "0,1,2,3,4,5,6,7")


def test_held_gpus_are_never_chosen_whatever_the_sharing_policy(cache):
    for name in ("node1", "node2", "node3"):
        holding(cache, f"h-{name}", name, tuple(str(i) for i in range(7)))
    for policy in SharingPolicy:
        decision = decide(pod("p-0", "0=*:gpus=2\n"), cache, policy)
        assert decision.code is Code.UNSCHEDULABLE, policy
        assert (
            decision.reason
            == "0/3 nodes are available for line 1 (2 GPUs on any node): 3 node(s) had fewer than 2 free GPUs."
        )


def test_a_pinned_pending_pod_keeps_what_it_names(cache):
    holding(cache, "a", "node1", ("0", "1", "2", "3", "4", "5"))
    kept = {("node1", cache.ledger.key("node1", "6")): "pod ml/pinned-0"}
    decision = decide(pod("p-0", "0=*[pool=a100]:gpus=1\n"), cache, pinned=lambda: kept)
    assert (decision.node, decision.devices) == ("node1", "7")


def test_the_selector_and_kube_schedulers_filters_narrow_the_nodes(cache):
    decision = decide(pod("p-0", "0=*[pool=h100]:gpus=1\n"), cache)
    assert decision.node == "node3"
    cache.upsert_node(_tainted(gpu_node("node3", {"pool": "h100"})))
    refused = decide(pod("p-0", "0=*[pool=h100]:gpus=1\n"), cache)
    assert refused.code is Code.UNSCHEDULABLE
    assert "1 node(s) had untolerated taint" in refused.reason
    assert "2 node(s) didn't match the line's node selector" in refused.reason


def _tainted(info):
    from dataclasses import replace

    from gpu_scheduler.scheduling.nodes import Taint

    return replace(info, taints=(Taint("gpu", "reserved", "NoSchedule"),))


def test_a_node_without_inventory_gives_ordinals_of_its_capacity():
    cache = ClusterCache()
    cache.nodes.upsert(gpu_node("plain1", inventory=False, gpus=4))
    holding(cache, "a", "plain1", ("0",))
    decision = decide(pod("p-0", "0=*:gpus=2\n"), cache)
    assert (decision.node, decision.devices) == ("plain1", "1,2")


def test_a_container_with_its_own_value_or_none_is_refused_for_good(cache):
    literal = decide(pod("p-0", "0=*:gpus=1\n", env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]), cache)
    missing = decide(pod("p-0", "0=*:gpus=1\n", env=[]), cache)
    for decision in (literal, missing):
        assert decision.code is Code.UNRESOLVABLE
        assert "every container must read the GPUs the bind gives it" in decision.reason


def test_the_binding_says_why(cache):
    decision = decide(pod("p-0", "0=*:gpus=2\n"), cache)
    written = json.loads(bind_annotations(decision.entry, decision.chosen)[PLACEMENT_ANNOTATION])
    assert written["chosen"] == decision.chosen and written["node"] == decision.node


def test_the_best_set_is_exhaustive_for_small_nodes_and_grown_for_large_ones():
    closeness = {frozenset(p): 5 for p in NVLINK_PAIRS}
    assert best_set([0, 2, 3, 5], 2, closeness) == ((2, 3), 5)
    sixteen = {frozenset((a, a + 1)): 5 for a in range(0, 16, 2)}
    chosen, quality = best_set(list(range(16)), 2, sixteen)
    assert quality == 5 and chosen[1] == chosen[0] + 1


# -- gangs of count lines -------------------------------------------------------------------------


def gang_pod(owner: str, index: int, count: int, members: int, topology: str | None = None, uid: str = "") -> dict:
    annotations = {
        "gpu-scheduling-map": "".join(f"{i}=*:gpus={count}\n" for i in range(members)),
        "gpu-scheduler/gang": "true",
    }
    if topology:
        annotations["gpu-scheduler/gang-topology"] = topology
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{owner}-{index}",
            "uid": uid or f"{owner}-{index}-uid",
            "creationTimestamp": "2027-01-15T08:00:00Z",
            "labels": {"apps.kubernetes.io/pod-index": str(index)},
            "annotations": annotations,
            "ownerReferences": [{"kind": "StatefulSet", "name": owner, "uid": f"{owner}-sts", "controller": True}],
        },
        "spec": {"schedulerName": "gpu-scheduler", "containers": [{"name": "main", "env": [bind_env_entry()]}]},
    }


def racked_state(policy=SharingPolicy.DENY):
    """Four 8-GPU nodes in two racks: node1, node2 in r1; node3, node4 in r2."""
    from gpu_scheduler.scheduler.state import SchedulerState

    state = SchedulerState("gpu-node-name", policy, gang_timeout=300.0)
    racks = {"node1": "r1", "node2": "r1", "node3": "r2", "node4": "r2"}
    state.nodes_listed([gpu_node(n, labels={"rack": r}) for n, r in racks.items()])
    return state


def queue_gang(state, pods):
    from gpu_scheduler.kube.objects import trim_pending_pod

    for p in pods:
        state.pending_upsert(trim_pending_pod(p))
    uid = pods[0]["metadata"]["uid"]
    return state.decide(uid, state.claim(uid), 1_800_000_001.0)


def test_a_gang_of_count_lines_goes_whole_into_one_rack_the_tightest_that_fits():
    from gpu_scheduler.scheduling.gangs import GangPlan

    state = racked_state()
    # r2 has the fewest free GPUs that still take 3 x 4 (node3 is half used): the gang goes there.
    state.assigned_upsert(AssignedPod("u-a", "ml/a", "node3", (), ("0", "1", "2", "3")))
    plan = queue_gang(state, [gang_pod("train", i, 4, 3, topology="rack") for i in range(3)])
    assert isinstance(plan, GangPlan), plan
    nodes = sorted(decision.node for _, _, decision in plan.members)
    assert nodes == ["node3", "node4", "node4"], nodes
    assert all("with its gang on nodes with rack=r2" in d.chosen for _, _, d in plan.members)


def test_a_gang_that_fits_in_no_rack_spans_racks_and_one_that_fits_nowhere_binds_nothing():
    from gpu_scheduler.scheduling.gangs import GangPlan

    state = racked_state()
    for node in ("node1", "node3"):
        state.assigned_upsert(AssignedPod(f"u-{node}", f"ml/{node}", node, (), tuple(str(i) for i in range(6))))
    # Each rack has 2 + 8 free: 3 x 4 fits in neither, but across them (node2, node4).
    plan = queue_gang(state, [gang_pod("train", i, 4, 3, topology="rack") for i in range(3)])
    assert isinstance(plan, GangPlan), plan
    state2 = racked_state()
    for node in ("node1", "node2", "node3", "node4"):
        state2.assigned_upsert(AssignedPod(f"u-{node}", f"ml/{node}", node, (), tuple(str(i) for i in range(6))))
    refused = queue_gang(state2, [gang_pod("train", i, 4, 2, topology="rack") for i in range(2)])
    assert not isinstance(refused, GangPlan)
    assert "cannot go yet" in refused.reason and "fewer than 4 free GPUs" in refused.reason
    # Nothing stays assumed: only the pods on the nodes hold GPUs.
    assert all(uid.startswith("u-") for uids in state2.holders().values() for uid in uids)


def test_a_waiting_gang_of_count_lines_reserves_free_gpus_under_deny():
    state = racked_state()
    for node in ("node1", "node2", "node3", "node4"):
        state.assigned_upsert(AssignedPod(f"u-{node}", f"ml/{node}", node, (), tuple(str(i) for i in range(5))))
    # Two members of 3 GPUs fit (3 free on each node) but the third of 4 does not: the gang
    # waits, and the GPUs its first members would take are reserved for it.
    pods = [gang_pod("train", 0, 3, 2), gang_pod("train", 1, 3, 2)]
    pods[1]["metadata"]["annotations"]["gpu-scheduling-map"] = "0=*:gpus=3\n1=*:gpus=4\n"
    pods[0]["metadata"]["annotations"]["gpu-scheduling-map"] = "0=*:gpus=3\n1=*:gpus=4\n"
    refused = queue_gang(state, pods)
    assert "cannot go yet" in refused.reason
    reserved = state.reservations(1_800_000_001.0)
    assert sorted(set(reserved.values())) == ["ml/StatefulSet/train"]
    assert len(reserved) == 3
    loner = pod("loner-0", "*=*:gpus=1\n")
    loner["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z"
    decision = decide(loner, state._cache, SharingPolicy.DENY, reserved)
    taken = (decision.node, state._cache.ledger.key(decision.node, decision.devices))
    assert taken not in reserved


# -- failover of pinned lines ---------------------------------------------------------------------


def waited(p: dict, seconds: float, now: float) -> dict:
    """The pod as the scheduler left it after its first refusal, `seconds` before `now`."""
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(now - seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    p["status"] = {"conditions": [{"type": "PodScheduled", "status": "False", "lastTransitionTime": stamp}]}
    return p


NOW = 1_800_000_000.0


def test_a_pinned_pod_whose_node_is_gone_waits_then_takes_its_fallback(cache):
    from gpu_scheduler.scheduling.decide import Failover

    failover = Failover(NOW, 300.0)
    early = decide(waited(pod("p-0", "0=node9:0,1|*[pool=a100]\n"), 100, NOW), cache, failover=failover)
    assert early.code is Code.UNSCHEDULABLE
    assert "node node9 not found" in early.reason
    assert "falls back to 2 GPUs on nodes with pool=a100 once the pod has waited 300 s" in early.reason
    late = decide(waited(pod("p-0", "0=node9:0,1|*[pool=a100]\n"), 400, NOW), cache, failover=failover)
    assert late.code is Code.SUCCESS and late.node in ("node1", "node2")
    assert late.devices == "0,1"
    assert late.chosen.startswith("node node9 not found")
    assert "so line 1's fallback: chosen for line 1 (2 GPUs on nodes with pool=a100)" in late.chosen


def test_a_not_ready_node_fails_over_and_a_line_without_fallback_waits(cache):
    from dataclasses import replace

    from gpu_scheduler.scheduling.decide import Failover

    cache.upsert_node(replace(cache.nodes.get("node1"), ready=False, not_ready_message="kubelet stopped posting"))
    failover = Failover(NOW, 300.0)
    fell = decide(waited(pod("p-0", "0=node1:3|*\n"), 301, NOW), cache, failover=failover)
    assert fell.code is Code.SUCCESS and fell.node != "node1"
    assert "node node1 is not Ready (kubelet stopped posting)" in fell.chosen
    stays = decide(waited(pod("p-0", "0=node1:3\n"), 3000, NOW), cache, failover=failover)
    assert stays.code is Code.UNSCHEDULABLE and "falls back" not in stays.reason
    literal = [{"name": "CUDA_VISIBLE_DEVICES", "value": "3"}]
    own = decide(waited(pod("p-0", "0=node1:3|*\n", env=literal), 3000, NOW), cache, failover=failover)
    assert own.code is Code.UNSCHEDULABLE and own.node == "node1"


def test_the_lazy_rank_order_is_the_full_rank_order():
    """in_rank_order chooses sets only as far as it must; it must yield what sorting every
    candidate by its full rank yields (random nodes, holdings and counts, seeded)."""
    import random

    from gpu_scheduler.scheduling.dynamic import candidate, in_rank_order
    from gpu_scheduler.scheduling.ledger import GpuLedger

    rng = random.Random(50)
    for _ in range(200):
        cache = ClusterCache()
        for n in range(rng.randint(1, 6)):
            linked = rng.random() < 0.7
            name = f"node{n}"
            cache.upsert_node(gpu_node(name, inventory=linked, gpus=8))
            held = rng.sample(range(8), rng.randint(0, 7))
            if held:
                holding(cache, f"h{n}", name, tuple(map(str, held)))
        count = rng.choice((1, 2, 3, 4))
        request = GpuRequest(None, count, (), "", 1)
        ledger: GpuLedger = cache.ledger
        fitting = [c for n in cache.nodes.all() if not isinstance(c := candidate(request, n, "", ledger, {}), str)]
        packed = sorted(fitting, key=lambda c: c.packing)
        lazy = [c.node.name for c in in_rank_order(lambda packed=packed: iter(packed), count)]
        full = [c.node.name for c in sorted(fitting, key=lambda c: c.rank)]
        assert lazy == full, (count, lazy, full)
        top = cache.free_index.best_link()
        assert [c.node.name for c in in_rank_order(lambda packed=packed: iter(packed), count, top)] == full
        # The index reads the nodes in the packing order a look at every node gives.
        indexed = [n.name for n in cache.free_index.in_packing_order(count)]
        assert indexed == [c.node.name for c in packed], (count, indexed)


def test_the_scheduler_keeps_what_pending_pinned_pods_name_and_frees_it_when_they_go():
    from gpu_scheduler.kube.objects import trim_pending_pod

    state = racked_state()
    # node1's GPUs 0-5 are held; a pinned pod waits for node1:6 (its line names it).
    state.assigned_upsert(AssignedPod("u-a", "ml/a", "node1", (), tuple(str(i) for i in range(6))))
    pinned = pod("pinned-0", "0=node1:6\n")
    state.pending_upsert(trim_pending_pod(pinned))
    counted = pod("count-0", "*=*[rack=r1]:gpus=2\n")
    state.pending_upsert(trim_pending_pod(counted))
    decision = state.decide("uid-count-0", state.claim("uid-count-0"), 1_800_000_001.0)
    assert (decision.node, decision.devices) == ("node2", "0,1")  # not node1's 6,7: 6 is wanted
    state.pending_delete("uid-pinned-0")
    state.pending_upsert(trim_pending_pod(pod("count-1", "*=*[rack=r1]:gpus=2\n")))
    again = state.decide("uid-count-1", state.claim("uid-count-1"), 1_800_000_001.0)
    assert (again.node, again.devices) == ("node1", "6,7")


def test_a_gang_workload_is_warned_at_apply_of_a_line_for_every_pod_and_not_of_count_lines():
    from gpu_scheduler.webhook.admission import validate
    from test_webhook_admission import SCHEDULER, review, workload

    def warnings(text: str) -> list[str]:
        annotations = {"gpu-scheduling-map": text, "gpu-scheduler/gang": "true"}
        obj = workload("StatefulSet", {"replicas": 2, "podManagementPolicy": "Parallel"}, annotations=annotations)
        decision = validate(review(obj, kind=("apps", "v1", "StatefulSet")), SCHEDULER)
        return decision.review["response"].get("warnings") or []

    assert warnings("0=*:gpus=4\n1=*[pool=a]:gpus=4\n") == []
    assert "no pod of it can have" in " ".join(warnings("0=*:gpus=4\n1=*:gpus=4\n2=*:gpus=4\n"))
    assert "has a line for every pod" in " ".join(warnings("*=*:gpus=4\n"))


def test_the_free_index_follows_holds_releases_and_node_changes():
    import random

    rng = random.Random(7)
    cache = ClusterCache()
    names = [f"node{i}" for i in range(8)]
    for name in names:
        cache.upsert_node(gpu_node(name, inventory=rng.random() < 0.5, gpus=8))
    held: dict[str, str] = {}
    for step in range(300):
        action = rng.random()
        if action < 0.5:
            uid = f"p{step}"
            node = rng.choice(names)
            cache.add_pod(
                AssignedPod(uid, f"ml/{uid}", node, (), tuple(map(str, rng.sample(range(8), rng.randint(1, 3)))))
            )
            held[uid] = node
        elif action < 0.85 and held:
            uid = rng.choice(sorted(held))
            cache.remove_pod(uid)
            del held[uid]
        else:
            cache.upsert_node(gpu_node(rng.choice(names), inventory=rng.random() < 0.5, gpus=rng.choice((4, 8))))
        for name in names:
            node = cache.nodes.get(name)
            expected = free_gpus(node, cache.ledger)
            assert cache.free_index.free(name) == expected, (step, name)
