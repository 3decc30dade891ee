"""Gang placement (docs/gangs.md): how pods are grouped, the all-or-none decision, the GPUs
reserved for a waiting gang under deny and the order gangs are served in, the timeout, a
gang partly bound (a failed binding, a pod deleted, a restart), and what /validate refuses.
Driven on SchedulerState directly, with time given explicitly."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.objects import node_info, trim_pending_pod, watched_pod
from gpu_scheduler.placement.gang import GangError, gang_of
from gpu_scheduler.scheduler.queue import BACKOFF, IN_FLIGHT
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import AssignedPod, Decision, SharingPolicy
from gpu_scheduler.scheduling.gangs import GANG_PARTIAL, GANG_TIMEOUT, GANG_WAITING, GangPlan
from gpu_scheduler.webhook.admission import validate
from test_scheduler_state import api_node
from test_webhook_admission import SCHEDULER, review, workload

NODES = ("node1", "node2", "node3")
T0 = 1_800_000_000.0  # a Unix time: the pods' creationTimestamp
TIMEOUT = 300.0


def stamp(epoch: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gang_map(lines: dict[int, str]) -> str:
    return "".join(f"{i}={where}\n" for i, where in sorted(lines.items()))


def api_gang_pod(owner: str, index: int, lines: dict[int, str], created: float = T0, bound_to: str = "") -> dict:
    """Pod `index` of StatefulSet `owner` in gang mode, admitted by the webhook."""
    device = lines[index].split(":", 1)[1]
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{owner}-{index}",
            "uid": f"{owner}-{index}-uid",
            "creationTimestamp": stamp(created),
            "labels": {"apps.kubernetes.io/pod-index": str(index)},
            "annotations": {"gpu-scheduling-map": gang_map(lines), "gpu-scheduler/gang": "true"},
            "ownerReferences": [{"kind": "StatefulSet", "name": owner, "uid": f"{owner}-sts", "controller": True}],
        },
        "spec": {
            "schedulerName": "gpu-scheduler",
            "nodeName": bound_to,
            "containers": [{"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": device}]}],
        },
    }


def small_pod(name: str, where: str) -> dict:
    """A bare pod of no gang wanting one GPU (`where`: node:device)."""
    return trim_pending_pod(
        {
            "metadata": {
                "namespace": "ml",
                "name": f"{name}-0",
                "uid": f"{name}-uid",
                "annotations": {"gpu-scheduling-map": f"0={where}\n"},
            },
            "spec": {
                "schedulerName": "gpu-scheduler",
                "containers": [
                    {"name": "main", "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": where.split(":")[1]}]}
                ],
            },
        }
    )


@pytest.fixture
def state() -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY, gang_timeout=TIMEOUT)
    state.nodes_listed([node_info(api_node(n)) for n in NODES])
    return state


def add(state: SchedulerState, pod: dict) -> str:
    state.pending_upsert(trim_pending_pod(pod))
    return pod["metadata"]["uid"]


def hold(state: SchedulerState, uid: str, node: str, device: str) -> None:
    """A pod of no gang on a node holding one GPU (as the pod watch reports it)."""
    state.assigned_upsert(AssignedPod(uid, f"ml/{uid}", node, (), (device,)))


def decide(state: SchedulerState, uid: str, wall: float = T0 + 1):
    """Takes this pod off the queue (whatever it waits for) and decides it."""
    pod = state.claim(uid)
    assert pod is not None, f"{uid} is not waiting ({state.queue_state(uid)})"
    return state.decide(uid, pod, wall)


def held(state: SchedulerState) -> dict:
    return state.holders()


LINES = {0: "node1:0", 1: "node2:0", 2: "node3:0"}


# -- grouping -------------------------------------------------------------------------------------


def test_a_gang_is_the_pods_of_one_owner_or_of_one_value_of_the_label_a_bare_pod_names():
    pod = api_gang_pod("train", 0, LINES)
    assert gang_of(pod) == "ml/StatefulSet/train"
    pod["metadata"]["ownerReferences"][0].update(kind="Job", name="run")
    assert gang_of(pod) == "ml/Job/run"
    bare = {
        "metadata": {
            "namespace": "ml",
            "name": "w-0",
            "labels": {"job": "a"},
            "annotations": {"gpu-scheduler/gang": "true", "gpu-scheduler/gang-label": "job"},
        }
    }
    assert gang_of(bare) == "ml/job=a"
    # The label it names survives the trimming of pending pods, so the scheduler groups alike.
    assert gang_of(trim_pending_pod(bare)) == "ml/job=a"
    assert gang_of({"metadata": {"annotations": {"gpu-scheduler/gang": "false"}}}) is None
    assert gang_of({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("annotations", "labels", "message"),
    [
        ({"gpu-scheduler/gang": "yes"}, {}, 'write "true"'),
        ({"gpu-scheduler/gang": "true"}, {}, "name the label whose value groups its gang"),
        ({"gpu-scheduler/gang": "true", "gpu-scheduler/gang-label": "job"}, {}, "which the pod does not have"),
    ],
)
def test_a_gang_that_cannot_be_told_is_an_error_that_says_what_to_write(annotations, labels, message):
    with pytest.raises(GangError, match=message):
        gang_of({"metadata": {"namespace": "ml", "name": "w-0", "annotations": annotations, "labels": labels}})


# -- all or none ----------------------------------------------------------------------------------


def test_no_pod_of_a_gang_is_assumed_until_every_index_of_its_map_has_a_pod(state):
    first = add(state, api_gang_pod("train", 0, LINES))
    add(state, api_gang_pod("train", 1, LINES))
    decision = decide(state, first)
    assert isinstance(decision, Decision) and not decision.bind and decision.retryable
    assert decision.event == GANG_WAITING
    assert "waits for its pods of index 2: its map names 3 (2 pending, 0 bound)" in decision.reason
    assert held(state) == {}
    # Any change on a node of the gang's map wakes it, not only its own line's node.
    state.refused(first, decision, now=0.0, jitter=0.5)
    assert set(state.waiting_on(first)) >= set(NODES)

    last = add(state, api_gang_pod("train", 2, LINES))
    plan = decide(state, last)
    assert isinstance(plan, GangPlan) and plan.complete
    assert [uid for uid, _, _ in plan.members] == [last, "train-0-uid", "train-1-uid"]
    assert held(state) == {("node1", "0"): ["train-0-uid"], ("node2", "0"): ["train-1-uid"], ("node3", "0"): [last]}
    # Every member was taken off the queue with it: no other worker can take one meanwhile.
    assert {state.queue_state(uid) for uid, _, _ in plan.members} == {IN_FLIGHT}


def test_one_pod_that_cannot_go_keeps_the_whole_gang_waiting_and_assumes_nothing(state):
    hold(state, "holder", "node2", "0")
    uids = [add(state, api_gang_pod("train", i, LINES)) for i in LINES]
    decision = decide(state, uids[0])
    assert not decision.bind
    assert "its pod ml/train-1 (index 1) cannot go yet: GPUs already held (on node node2, GPU 0 by ml/holder)" in (
        decision.reason
    )
    assert held(state) == {("node2", "0"): ["holder"]}  # nothing of the gang assumed


# -- reservations and order -----------------------------------------------------------------------


def test_the_free_gpus_of_a_waiting_gang_are_reserved_so_small_pods_cannot_take_them(state):
    hold(state, "holder", "node2", "0")
    uids = [add(state, api_gang_pod("train", i, LINES)) for i in LINES]
    assert state.reservations(T0 + 1) == {
        ("node1", "0"): "ml/StatefulSet/train",
        ("node3", "0"): "ml/StatefulSet/train",
    }
    state.pending_upsert(small_pod("small", "node1:0"))
    refused = decide(state, "small-uid")
    assert not refused.bind and "GPUs reserved (on node node1, GPU 0 for gang ml/StatefulSet/train" in refused.reason
    # A GPU no gang needs is not held back.
    state.pending_upsert(small_pod("other", "node1:1"))
    assert decide(state, "other-uid").bind

    # The holder goes: its GPU is the gang's before anyone else's, and the whole gang goes.
    state.assigned_delete(AssignedPod("holder", "ml/holder", "node2"))
    assert state.reservations(T0 + 1)[("node2", "0")] == "ml/StatefulSet/train"
    assert isinstance(decide(state, uids[1]), GangPlan)


def test_two_gangs_wanting_one_gpu_are_served_oldest_first_and_never_both_half_placed(state):
    hold(state, "holder", "node1", "0")
    older = {0: "node1:0", 1: "node2:0"}
    younger = {0: "node1:0", 1: "node3:0"}
    a = [add(state, api_gang_pod("a", i, older, created=T0)) for i in older]
    b = [add(state, api_gang_pod("b", i, younger, created=T0 + 5)) for i in younger]
    # Each reserves what it alone needs; the shared GPU, once free, goes to the older one.
    assert state.reservations(T0 + 10) == {("node2", "0"): "ml/StatefulSet/a", ("node3", "0"): "ml/StatefulSet/b"}
    state.assigned_delete(AssignedPod("holder", "ml/holder", "node1"))
    assert state.reservations(T0 + 10)[("node1", "0")] == "ml/StatefulSet/a"
    waiting = decide(state, b[0], T0 + 10)
    assert not waiting.bind and "reserved" in waiting.reason and held(state) == {}
    plan = decide(state, a[1], T0 + 10)
    assert isinstance(plan, GangPlan) and len(plan.members) == 2
    # b waits whole until a is gone; none of it was bound meanwhile.
    assert all(state.held_by(uid) is None for uid in b)


def test_a_gang_past_its_timeout_reserves_nothing_and_says_what_blocked_it(state):
    hold(state, "holder", "node2", "0")
    uids = [add(state, api_gang_pod("train", i, LINES, created=T0)) for i in LINES]
    late = T0 + TIMEOUT + 1
    assert state.reservations(late) == {}
    decision = decide(state, uids[0], late)
    assert decision.event == GANG_TIMEOUT
    assert "GPU 0 by ml/holder" in decision.reason and "no longer reserved" in decision.reason
    assert state.gang_counts(late) == {"waiting": 0, "partial": 0, "timed-out": 1}
    state.pending_upsert(small_pod("small", "node1:0"))
    assert decide(state, "small-uid", late).bind
    # It is still placed all at once if its GPUs come free.
    state.bind_failed("small-uid", "node1", maybe_stored=False, now=0.0, jitter=0.5)
    state.assigned_delete(AssignedPod("holder", "ml/holder", "node2"))
    state.refused(uids[0], decision, now=0.0, jitter=0.5)
    assert isinstance(decide(state, uids[0], late), GangPlan)


# -- partly bound ----------------------------------------------------------------------------------


def test_a_binding_that_fails_mid_gang_leaves_the_rest_reserved_and_retried_alone(state):
    uids = [add(state, api_gang_pod("train", i, LINES)) for i in LINES]
    plan = decide(state, uids[0])
    assert isinstance(plan, GangPlan)
    state.bound(uids[0], now=1.0)
    state.bound(uids[1], now=1.0)
    state.bind_failed(uids[2], "node3", maybe_stored=False, now=1.0, jitter=0.5)  # a 4xx: not stored
    for uid in uids[:2]:
        state.pending_delete(uid)  # the watch shows them bound
        state.assigned_upsert(
            watched_pod(
                api_gang_pod("train", int(uid[6]), LINES, bound_to=LINES[int(uid[6])][:5]), "gpu-scheduler"
            ).assigned
        )
    assert state.queue_state(uids[2]) == BACKOFF
    assert state.gang_counts(T0 + 1)["partial"] == 1
    # Its GPU stays the gang's: a partly bound gang is served first, and never times out.
    assert state.reservations(T0 + TIMEOUT * 10) == {("node3", "0"): "ml/StatefulSet/train"}
    state.pending_upsert(small_pod("small", "node3:0"))
    assert not decide(state, "small-uid").bind
    plan = decide(state, uids[2])
    assert isinstance(plan, GangPlan) and [uid for uid, _, _ in plan.members] == [uids[2]]


def test_a_pod_deleted_mid_gang_puts_the_gang_back_to_waiting_for_its_replacement(state):
    for i in (0, 1):
        state.pod_changed(watched_pod(api_gang_pod("train", i, LINES, bound_to=LINES[i][:5]), "gpu-scheduler"))
    gone = add(state, api_gang_pod("train", 2, LINES))
    state.pending_delete(gone)  # deleted before it was bound: the gang waits for its replacement
    assert not state.reservations(T0 + 1)  # nothing pending, nothing to reserve for
    replacement = api_gang_pod("train", 2, LINES, created=T0 + 30)
    replacement["metadata"]["uid"] = "train-2-new"
    plan = decide(state, add(state, replacement))
    assert isinstance(plan, GangPlan) and [u for u, _, _ in plan.members] == ["train-2-new"]


def test_a_new_leader_rebuilds_a_partly_bound_gang_from_the_pods_alone_and_finishes_it():
    # What a scheduler started after a kill -9 mid-gang lists: two pods bound, one pending.
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY, gang_timeout=TIMEOUT)
    state.nodes_listed([node_info(api_node(n)) for n in NODES])
    listed = [watched_pod(api_gang_pod("train", i, LINES, bound_to=LINES[i][:5]), "gpu-scheduler") for i in (0, 1)]
    listed.append(watched_pod(api_gang_pod("train", 2, LINES), "gpu-scheduler"))
    state.pods_listed(listed, listed_at=0.0)
    assert state.gang_counts(T0 + 1) == {"waiting": 0, "partial": 1, "timed-out": 0}
    uid, pod = state.pop(0.0)
    waiting = state.decide(uid, pod, T0 + 1)
    assert isinstance(waiting, GangPlan) and [u for u, _, _ in waiting.members] == ["train-2-uid"]


def test_a_partly_bound_gang_that_cannot_finish_yet_says_so(state):
    for i in (0, 1):
        state.pod_changed(watched_pod(api_gang_pod("train", i, LINES, bound_to=LINES[i][:5]), "gpu-scheduler"))
    hold(state, "holder", "node3", "0")
    uid = add(state, api_gang_pod("train", 2, LINES))
    decision = decide(state, uid)
    assert decision.event == GANG_PARTIAL and "is partly bound (index 0, 1 bound" in decision.reason


# -- /validate ---------------------------------------------------------------------------------------

GANG_TEMPLATE = {"gpu-scheduling-map": "0=node1:0\n1=node2:0\n", "gpu-scheduler/gang": "true"}


@pytest.mark.parametrize("policy", [None, "OrderedReady"])
def test_validate_refuses_a_gang_statefulset_that_creates_its_pods_one_by_one(policy):
    spec = {"replicas": 2, **({"podManagementPolicy": policy} if policy else {})}
    sts = workload("StatefulSet", spec, annotations=GANG_TEMPLATE)
    decision = validate(review(sts, kind=("apps", "v1", "StatefulSet")), SCHEDULER)
    response = decision.review["response"]
    assert not response["allowed"]
    assert "podManagementPolicy OrderedReady" in response["status"]["message"]
    assert "set podManagementPolicy: Parallel" in response["status"]["message"]


def test_validate_admits_a_parallel_gang_and_reports_indexes_no_pod_can_have():
    sts = workload("StatefulSet", {"replicas": 1, "podManagementPolicy": "Parallel"}, annotations=GANG_TEMPLATE)
    response = validate(review(sts, kind=("apps", "v1", "StatefulSet")), SCHEDULER).review["response"]
    assert response["allowed"]
    assert response["warnings"] == [
        "StatefulSet ml/train is a gang whose map names index 1, which no pod of it can have (replicas 1): "
        "the gang will wait for those pods and never start; give the map one line per pod"
    ]
    sts["spec"]["replicas"] = 2
    assert "warnings" not in validate(review(sts, kind=("apps", "v1", "StatefulSet")), SCHEDULER).review["response"]


def test_validate_refuses_a_gang_job_whose_pods_never_all_exist_at_once():
    job = workload("Job", {"completionMode": "Indexed", "completions": 2, "parallelism": 1}, annotations=GANG_TEMPLATE)
    response = validate(review(job, kind=("batch", "v1", "Job")), SCHEDULER).review["response"]
    assert not response["allowed"] and "set parallelism to completions" in response["status"]["message"]
