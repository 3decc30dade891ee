"""The scheduler's state (queue + cache) driven event by event: how a GPU hold is taken, confirmed,
forgotten and expired, and a hypothesis state machine against a model of the API server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_scheduler.kube.objects import WatchedPod, node_info, trim_pending_pod, watched_pod
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF, IN_FLIGHT
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import AssignedPod, SharingPolicy
from gpu_scheduler.scheduling.cache import APISERVER_REQUEST_TIMEOUT_SECONDS
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

NODES = ("node1", "node2")
# What kube-apiserver's watches deliver, recorded from a real one (test_watch_shapes_cluster.py).
RECORDED = json.loads((Path(__file__).parent / "testdata" / "watch_shapes.json").read_text())


def api_node(name: str, unschedulable: bool = False) -> dict:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": name, "labels": {"gpu-node-name": name}},
        "spec": {"unschedulable": unschedulable},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def api_pod(
    name: str,
    uid: str,
    node: str,
    device: str,
    bound_to: str = "",
    scheduler: str = "gpu-scheduler",
    namespace: str = "ml",
) -> dict:
    """A pod as kube-apiserver sends it, admitted by the webhook; its map's one line is for
    the index its name ends with, so that every such pod can be placed."""
    index = name.rsplit("-", 1)[1]
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": uid,
            "annotations": {
                "gpu-scheduling-map": f"{index}={node}:{device}\n",
                "gpu-scheduler/placement": json.dumps({"cudaVisibleDevices": device}),
            },
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": bound_to,
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": device}],
                    "resources": {"requests": {"cpu": "1"}},
                }
            ],
        },
    }


def pending(name: str, uid: str, node: str, device: str, bound_to: str = "") -> dict:
    """A pending pod of this scheduler as the pod watch hands it over (trimmed)."""
    return trim_pending_pod(api_pod(name, uid, node, device, bound_to))


def watched(*args, scope: str | None = None, **kwargs) -> WatchedPod:
    """api_pod(...) as the pod watch hands it over to a scheduler named gpu-scheduler."""
    return watched_pod(api_pod(*args, **kwargs), "gpu-scheduler", scope)


def on_node(uid: str, name: str, node: str, device: str) -> AssignedPod:
    return AssignedPod(uid, f"ml/{name}", node, (), (device,))


@pytest.fixture
def state() -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY)
    state.nodes_listed([node_info(api_node(n)) for n in NODES])
    return state


def attempt(state: SchedulerState, now: float = 0.0):
    uid, pod = state.pop(now)
    return uid, state.decide(uid, pod)


def held(state: SchedulerState) -> dict:
    return state.holders()


def test_a_hold_assumed_for_a_pod_deleted_during_a_watch_gap_is_dropped_at_the_relist(state):
    # Bug 2: bound, then deleted while the pods-on-nodes watch was away (it never saw the pod
    # bound, nor deleted); the watch ends in 410 and lists again. The old scheduler kept the
    # assumed hold for ever; under deny, the next pod for that GPU waited for ever.
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, decision = attempt(state)
    assert decision.bind and held(state) == {("node1", "0"): ["ua"]}
    state.bound(uid, now=1.0)
    state.pending_delete("ua")  # left the pending set: bound
    assert held(state) == {("node1", "0"): ["ua"]}  # still held: nothing says it is gone

    state.assigned_replace([], listed_at=2.0)  # the re-list after 410, without the pod
    assert held(state) == {}
    state.pending_upsert(pending("b-0", "ub", "node1", "0"))
    assert attempt(state, 3.0)[1].bind


def test_a_relist_started_before_the_binding_ended_keeps_the_assumed_hold(state):
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, _ = attempt(state)
    state.assigned_replace([], listed_at=0.5)  # in flight: the list cannot know
    state.bound(uid, now=1.0)
    state.assigned_replace([], listed_at=0.9)  # started before the binding's answer
    assert held(state) == {("node1", "0"): ["ua"]}
    state.assigned_replace([on_node("ua", "a-0", "node1", "0")], listed_at=1.5)  # confirmed
    assert "ua" not in state.assumed() and held(state) == {("node1", "0"): ["ua"]}
    state.assigned_replace([], listed_at=5.0)  # and later gone
    assert held(state) == {}


def test_an_attempt_that_raises_during_its_binding_keeps_its_hold_until_a_list_after_it_settles(state):
    # Bug 2 of an earlier stop: the catch-all error path never freed the hold. Freeing it at
    # once (as before this change) could give the GPU away while the binding it may have sent
    # lands: it is kept in doubt, like a lost answer, and a list ends it.
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, decision = attempt(state)
    assert decision.bind and held(state)
    state.attempt_failed(uid, now=0.1, jitter=0.5)
    assert held(state) == {("node1", "0"): ["ua"]} and state.queue_state("ua") == BACKOFF
    assert state.next_relist() == 0.1 + APISERVER_REQUEST_TIMEOUT_SECONDS
    state.assigned_replace([], listed_at=1.0)  # the apiserver may still be storing it
    assert held(state) == {("node1", "0"): ["ua"]}
    state.assigned_replace([], listed_at=0.2 + APISERVER_REQUEST_TIMEOUT_SECONDS)
    assert held(state) == {} and state.next_relist() is None


def test_a_bound_pod_keeps_its_hold_when_the_pending_watch_says_it_left(state):
    # Issue 16, point 1: kube-apiserver reports a pod leaving the pending watch's selector
    # (spec.nodeName=) as DELETED with the object as it was before: nodeName empty, as for a
    # pod deleted unbound (testdata/watch_shapes.json). The hold was dropped on it, and the
    # next pod for the GPU was bound before the pods-on-nodes watch delivered the first one.
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    state.pending_upsert(pending("b-1", "ub", "node1", "0"))
    uid, decision = attempt(state)
    other, refused = attempt(state)
    assert decision.bind and not refused.bind
    state.refused(other, refused, now=0.0, jitter=0.5)
    state.bound(uid, now=1.0)
    state.pending_delete("ua")  # left the selector: nodeName ""
    assert held(state) == {("node1", "0"): ["ua"]}
    assert state.pop(now=100.0)[0] == "ub" and not state.decide("ub", pending("b-1", "ub", "node1", "0")).bind


def test_a_stale_pending_event_of_a_bound_pod_does_not_queue_it_again(state):
    # Issue 16, point 7: our own PodScheduled patch (or a list taken before the binding)
    # delivered after bound() queued the pod again: a second decision and binding, answered 409.
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, _ = attempt(state)
    state.bound(uid, now=1.0)
    late = pending("a-0", "ua", "node1", "0")
    late["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    assert state.pending_upsert(late) is False and "ua" not in state
    state.pending_replace([late])
    assert "ua" not in state
    # Seen on its node by the watch: the same.
    state.assigned_upsert(on_node("ua", "a-0", "node1", "0"))
    assert state.pending_upsert(late) is False and "ua" not in state


def test_a_binding_whose_outcome_is_unknown_keeps_its_hold_until_a_list_says(state):
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, _ = attempt(state)
    state.bind_failed(uid, "node1", maybe_stored=True, now=1.0, jitter=0.5)
    assert held(state) == {("node1", "0"): ["ua"]}
    state.assigned_replace([], listed_at=2.0)  # the apiserver may still be working on it
    assert held(state) == {("node1", "0"): ["ua"]}
    state.assigned_replace([], listed_at=2.0 + APISERVER_REQUEST_TIMEOUT_SECONDS)  # settled: not bound
    assert held(state) == {}
    # With an answer that proves nothing was stored (a 4xx), the hold goes at once.
    state.pending_upsert(pending("b-0", "ub", "node2", "1"))
    uid, _ = attempt(state, 100.0)
    state.bind_failed(uid, "node2", maybe_stored=False, now=100.0, jitter=0.5)
    assert held(state) == {}


def test_a_refusal_after_a_lost_answer_keeps_the_hold_the_binding_may_have_taken(state):
    # The binding was stored but its answer lost; the pending watch has not said so yet, and
    # the retry is refused (node cordoned meanwhile). Dropping the hold here would let another
    # pod take the GPU the first one really has.
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, _ = attempt(state)
    state.bind_failed(uid, "node1", maybe_stored=True, now=1.0, jitter=0.5)
    state.node_changed(node_info(api_node("node1", unschedulable=True)))
    uid, decision = attempt(state, 10.0)
    assert decision.plugin == "NodeUnschedulable"
    state.refused(uid, decision, now=10.0, jitter=0.5)
    # Another pod, one that tolerates the cordon (as DaemonSet pods do), wants the same GPU.
    other = pending("b-0", "ub", "node1", "0")
    other["spec"]["tolerations"] = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    state.pending_upsert(other)
    uid, decision = attempt(state, 10.5)
    assert uid == "ub" and not decision.bind
    assert "GPU 0 by ml/a-0" in decision.reason


def test_a_failed_binding_waits_out_its_backoff_after_the_list_it_asked_for_drops_its_hold(state):
    # Found by the fault suite: a binding refused with a 5xx asks for a list; the list drops
    # the hold; had that woken the pod itself, it would retry at once, again and again.
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    state.assigned_upsert(on_node("holder", "h-0", "node1", "1"))
    state.pending_upsert(pending("w-0", "uw", "node1", "1"))  # waits for GPU 1
    uid, _ = attempt(state)
    other, decision = attempt(state)
    state.refused(other, decision, now=0.0, jitter=0.5)
    state.bind_failed(uid, "node1", maybe_stored=True, now=1.0, jitter=0.5)
    state.assigned_replace([], listed_at=2.0 + APISERVER_REQUEST_TIMEOUT_SECONDS)  # holder gone, a-0 never bound
    assert held(state) == {}
    assert state.queue_state("ua") == BACKOFF  # not woken by its own hold leaving
    assert state.queue_state("uw") == ACTIVE  # woken: GPU 1 is free


def test_a_pod_deleted_while_pending_drops_a_hold_left_by_a_lost_answer_at_the_list_after_it_settles(state):
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    uid, _ = attempt(state)
    state.bind_failed(uid, "node1", maybe_stored=True, now=1.0, jitter=0.5)
    state.pending_delete("ua")  # deleted, or bound: it cannot say
    assert held(state) == {("node1", "0"): ["ua"]} and "ua" not in state
    settles = state.next_relist()
    assert settles == 1.0 + APISERVER_REQUEST_TIMEOUT_SECONDS
    state.assigned_replace([], listed_at=settles - 1)  # kube-apiserver may still store it
    assert held(state) == {("node1", "0"): ["ua"]}
    state.assigned_replace([], listed_at=settles + 1)
    assert held(state) == {}


def test_the_late_deleted_event_of_an_old_pod_does_not_free_its_namesakes_gpus(state):
    # Bug 2: holds were keyed by name.
    state.assigned_upsert(on_node("old", "web-0", "node1", "0"))
    state.pending_upsert(pending("web-0", "new", "node1", "1"))
    uid, decision = attempt(state)
    assert uid == "new" and decision.bind
    state.assigned_delete(on_node("old", "web-0", "node1", "0"))
    assert held(state) == {("node1", "1"): ["new"]}
    state.pending_upsert(pending("other-0", "other", "node1", "1"))
    assert not attempt(state)[1].bind


def test_freed_gpus_and_node_changes_wake_the_pods_waiting_on_them(state):
    state.assigned_upsert(on_node("holder", "h-0", "node1", "0"))
    state.pending_upsert(pending("w-0", "uw", "node1", "0"))
    uid, decision = attempt(state)
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state("uw") == BACKOFF
    assert state.assigned_delete(on_node("holder", "h-0", "node1", "0")) is True
    assert state.queue_state("uw") == ACTIVE
    uid, decision = attempt(state)
    assert decision.bind
    # A cordoned node: the pod waits, and the uncordon wakes it.
    state.pending_upsert(pending("c-0", "uc", "node2", "0"))
    state.node_changed(node_info(api_node("node2", unschedulable=True)))
    uid, decision = attempt(state)
    assert decision.plugin == "NodeUnschedulable"
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.node_changed(node_info(api_node("node2", unschedulable=True))) is False  # no change
    assert state.node_changed(node_info(api_node("node2"))) is True
    assert state.queue_state("uc") == ACTIVE


# -- the pod watch's events, as the runner applies them ---------------------------------------------


def test_a_pod_the_watch_shows_on_a_node_leaves_the_queue_and_holds_its_gpus(state):
    assert state.pod_changed(watched("a-0", "ua", "node1", "0")) is True
    assert "ua" in state
    state.pod_changed(watched("a-0", "ua", "node1", "0", bound_to="node1"))  # bound by someone else
    assert "ua" not in state
    assert held(state) == {("node1", "0"): ["ua"]}
    state.pod_changed(watched("b-1", "ub", "node1", "0"))  # wants the same GPU
    assert not attempt(state)[1].bind


def test_the_binding_event_confirms_the_hold_assumed_for_it(state):
    state.pod_changed(watched("a-0", "ua", "node1", "0"))
    uid, decision = attempt(state)
    assert decision.bind
    state.bound(uid, now=1.0)
    assert state.assumed() == {"ua"}
    state.pod_changed(watched("a-0", "ua", "node1", "0", bound_to="node1"))
    assert not state.assumed()
    assert held(state) == {("node1", "0"): ["ua"]}


def test_a_pod_deleted_on_its_node_frees_its_gpus_and_wakes_the_pods_waiting_for_them(state):
    state.pod_changed(watched("h-0", "holder", "node1", "0", bound_to="node1"))
    state.pod_changed(watched("w-0", "uw", "node1", "0"))
    uid, decision = attempt(state)
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state("uw") == BACKOFF
    assert state.pod_deleted(watched("h-0", "holder", "node1", "0", bound_to="node1")) is True
    assert state.queue_state("uw") == ACTIVE
    assert held(state) == {}
    state.pod_deleted(watched("w-0", "uw", "node1", "0"))
    assert "uw" not in state


def test_the_pod_watch_queues_only_this_schedulers_pods_in_its_scope_but_counts_every_pod_on_a_node(state):
    assert state.pod_changed(watched("o-0", "uo", "node1", "0", scheduler="default-scheduler")) is False
    assert state.pod_changed(watched("n-0", "un", "node1", "0", namespace="other", scope="ml")) is False
    assert "uo" not in state and "un" not in state
    state.pod_changed(watched("o-0", "uo", "node1", "0", bound_to="node1", scheduler="default-scheduler"))
    state.pod_changed(watched("n-0", "un", "node1", "0", bound_to="node1", namespace="other", scope="ml"))
    assert held(state) == {("node1", "0"): ["un"]}  # another scheduler's pod holds no GPU of ours
    assert state.held_by("uo").node == state.held_by("un").node == "node1"


def test_a_list_of_the_pod_watch_replaces_the_pods_on_nodes_and_the_pending_ones(state):
    state.pod_changed(watched("h-0", "holder", "node2", "0", bound_to="node2"))
    state.pod_changed(watched("w-0", "uw", "node2", "0"))  # waits for the holder's GPU
    uid, decision = attempt(state)
    state.refused(uid, decision, now=0.0, jitter=0.5)
    state.pod_changed(watched("a-0", "ua", "node1", "0"))
    woke, dropped = state.pods_listed(
        [
            watched("w-0", "uw", "node2", "0"),
            watched("b-1", "ub", "node1", "1"),
            watched("c-0", "uc", "node2", "1", bound_to="node2"),
        ],
        listed_at=1.0,
    )
    assert dropped == ["ml/a-0"]
    assert woke is True and state.queue_state("uw") == ACTIVE  # the holder is gone
    assert "ub" in state and "ua" not in state
    assert held(state) == {("node2", "1"): ["uc"]}


def test_a_relist_of_pending_pods_names_the_ones_it_dropped():
    state = SchedulerState("gpu-node-name", SharingPolicy.WARN)
    state.pending_upsert(pending("a-0", "ua", "node1", "0"))
    state.pending_upsert(pending("b-0", "ub", "node1", "1"))
    assert state.pending_replace([pending("b-0", "ub", "node1", "1")]) == ["ml/a-0"]


# -- the state machine ---------------------------------------------------------------------------


class SchedulerStateMachine(RuleBasedStateMachine):
    """The scheduler's state against a model of the API server under --gpu-sharing=deny.

    The model holds the truth: pods (pending, bound or deleted) and nodes. Bindings change it
    when they are sent; the pod watch delivers its changes later, in order, or is lost and
    replaced by a list (410), as the runner applies them (pod_changed, pod_deleted,
    pods_listed). Invariants: every pod in one queue state, the queue's structures agree; no
    GPU bound to two live pods, and none held twice in the ledger; a popped pod is neither
    deleted (as far as the watch said) nor already in flight; and once every event is
    delivered and the pods are listed, the ledger holds exactly what the bound pods hold."""

    def __init__(self) -> None:
        super().__init__()
        self.state = SchedulerState("gpu-node-name", SharingPolicy.DENY, initial_backoff=1.0, max_backoff=8.0)
        self.state.nodes_listed([node_info(api_node(n)) for n in NODES])
        self.now = 0.0
        self.pods: dict[str, dict] = {}  # uid -> {"name", "node", "device", "bound": node | "", "deleted"}
        self.events: list[tuple[str, WatchedPod]] = []  # the pod watch's, not delivered yet
        self.deleted_seen: set[str] = set()  # uids whose DELETED event was delivered, or a list left out
        self.in_flight: dict[str, object] = {}  # uid -> decision, between pop and the binding's end
        self.count = 0

    # -- the world ---------------------------------------------------------------------------

    def _watched(self, uid: str) -> WatchedPod:
        """The pod as the watch delivers it now (kube.objects.watched_pod's shapes)."""
        pod = self.pods[uid]
        key = f"ml/{pod['name']}"
        if pod["bound"]:
            return WatchedPod(uid, key, True, assigned=on_node(uid, pod["name"], pod["bound"], pod["device"]))
        return WatchedPod(uid, key, True, pending=pending(pod["name"], uid, pod["node"], pod["device"]))

    def _store_binding(self, uid: str, node: str) -> None:
        """The apiserver stores a binding: the watch says so in one MODIFIED event carrying the
        pod with its node, as recorded from a real one in testdata/watch_shapes.json, which
        this reads."""
        self.pods[uid]["bound"] = node
        on_binding = RECORDED["bound, then deleted"]["pod watch"]["bound"]
        assert (on_binding["type"], on_binding["nodeName"]) == ("MODIFIED", "<node>")
        self.events.append(("changed", self._watched(uid)))

    @rule(node=st.sampled_from(NODES), device=st.sampled_from("01"), reuse_name=st.booleans())
    def create_pod(self, node, device, reuse_name):
        gone = [p["name"] for p in self.pods.values() if p["deleted"]]
        name = gone[0] if reuse_name and gone else f"p-{self.count}"
        self.count += 1
        uid = f"uid-{self.count}"
        self.pods[uid] = {"name": name, "node": node, "device": device, "bound": "", "deleted": False}
        self.events.append(("changed", self._watched(uid)))

    @rule(data=st.data())
    def delete_pod(self, data):
        live = sorted(u for u, p in self.pods.items() if not p["deleted"])
        if not live:
            return
        uid = data.draw(st.sampled_from(live))
        self.pods[uid]["deleted"] = True
        self.events.append(("deleted", self._watched(uid)))

    # -- the watches -----------------------------------------------------------------------------

    @rule()
    def deliver_event(self):
        if self.events:
            kind, pod = self.events.pop(0)
            if kind == "changed":
                self.state.pod_changed(pod)
            else:
                self.state.pod_deleted(pod)
                self.deleted_seen.add(pod.uid)

    @rule()
    def relist(self):
        self.events.clear()
        self.now += 0.01
        live = [u for u, p in self.pods.items() if not p["deleted"]]
        self.deleted_seen |= {u for u, p in self.pods.items() if p["deleted"]}
        self.state.pods_listed([self._watched(u) for u in live], listed_at=self.now)

    @rule(node=st.sampled_from(NODES), unschedulable=st.booleans())
    def change_node(self, node, unschedulable):
        self.state.node_changed(node_info(api_node(node, unschedulable)))

    @rule(seconds=st.floats(0.1, 10))
    def time_passes(self, seconds):
        self.now += seconds

    # -- the workers -------------------------------------------------------------------------------

    @rule()
    def take_a_pod(self):
        popped = self.state.pop(self.now)
        if popped is None:
            return
        uid, pod = popped
        assert uid not in self.in_flight, f"{uid} popped while in flight"
        assert uid not in self.deleted_seen, f"{uid} popped after its deletion was seen"
        decision = self.state.decide(uid, pod)
        if decision is None:
            return
        if decision.bind:
            self.in_flight[uid] = decision
        else:
            self.state.refused(uid, decision, self.now, 0.5)

    @precondition(lambda self: self.in_flight)
    @rule(data=st.data(), answer=st.sampled_from(["answered", "refused", "lost", "lost-after-storing", "raised"]))
    def binding_ends(self, data, answer):
        uid = data.draw(st.sampled_from(sorted(self.in_flight)))
        decision = self.in_flight.pop(uid)
        pod = self.pods[uid]
        self.now += 0.01
        if answer == "raised":
            self.state.attempt_failed(uid, self.now, 0.5)
            return
        if answer == "refused":  # a 4xx: nothing stored
            self.state.bind_failed(uid, decision.node, maybe_stored=False, now=self.now, jitter=0.5)
            return
        if answer == "answered":
            if pod["deleted"]:
                self.state.pod_gone(uid)
                return
            if not pod["bound"]:
                self._store_binding(uid, decision.node)  # stored: 201
            self.state.bound(uid, self.now)  # 201, or 409 "already assigned"
            return
        if answer == "lost-after-storing" and not pod["deleted"] and not pod["bound"]:
            self._store_binding(uid, decision.node)
        self.state.bind_failed(uid, decision.node, maybe_stored=True, now=self.now, jitter=0.5)

    # -- invariants --------------------------------------------------------------------------------

    @invariant()
    def the_queue_is_consistent(self):
        self.state.check_queue()
        still_queued = [u for u in self.in_flight if u in self.state]
        assert all(self.state.queue_state(u) == IN_FLIGHT for u in still_queued)
        assert self.state.queue_counts()[IN_FLIGHT] == len(still_queued)

    @invariant()
    def no_gpu_is_given_twice(self):
        bound = [(p["bound"], p["device"]) for p in self.pods.values() if p["bound"] and not p["deleted"]]
        assert len(bound) == len(set(bound)), f"two live pods bound to one GPU: {sorted(bound)}"
        for where, uids in self.state.holders().items():
            assert len(uids) == 1, f"{where} held by {sorted(uids)}"

    @rule()
    def settle(self):
        """Every event delivered, the pods listed, nothing in flight: the cache agrees
        with the world (no hold leaked, none missing)."""
        if self.in_flight:
            return
        while self.events:
            self.deliver_event()
        self.now += APISERVER_REQUEST_TIMEOUT_SECONDS  # every binding in doubt has settled
        self.relist()
        truth = {(p["bound"], p["device"]): {u} for u, p in self.pods.items() if p["bound"] and not p["deleted"]}
        assert {w: set(u) for w, u in self.state.holders().items()} == truth
        assert not self.state.assumed()


TestSchedulerStateMachine = SchedulerStateMachine.TestCase
TestSchedulerStateMachine.settings = settings(
    max_examples=300, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
