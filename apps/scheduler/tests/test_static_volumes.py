"""WaitForFirstConsumer claims given an existing volume of the map's node, as kube-scheduler's
VolumeBinding gives them (recorded: testdata/kube_scheduler_messages.json, cases
"static-volume" and "no-static-volume"): the smallest volume that fits and admits the node is
chosen, its claimRef written as kube-scheduler writes it on the volume as read, the pod waits
until the PV controller has bound the claim; no match and no provisioner is refused in
kube-scheduler's words; two pods never get one volume; a volume changed during the write is
left alone."""

from __future__ import annotations

import json

import pytest
from gpu_scheduler.kube.claims import claim_volume
from gpu_scheduler.kube.objects import claim_info, node_info, volume_info, watched_pod
from gpu_scheduler.scheduler.metrics import SchedulerMetrics
from gpu_scheduler.scheduler.queue import ACTIVE
from gpu_scheduler.scheduler.runner import Scheduler, SchedulerConfig
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import SharingPolicy
from gpu_scheduler.scheduling.gangs import GangPlan
from gpu_scheduler.scheduling.provisioning import WAITING_FOR_VOLUMES, BindVolume, SelectNode
from gpu_scheduler.scheduling.volumes import StorageClass
from recorded import KUBE_SCHEDULER, ours, reason_for_the_pinned_node
from test_binding_reports import FakeConditions, FakeRecorder
from test_provisioning import api_node, api_pod

NODE = "node3"
LOCAL = StorageClass("local", "WaitForFirstConsumer", "kubernetes.io/no-provisioner")
RECORDED = KUBE_SCHEDULER["cases"]["static-volume"]
# The volumes the recorder offered kube-scheduler: (name, node, size)
RECORDED_VOLUMES = (
    ("local-node3-5gi", NODE, "5Gi"),
    ("local-node3-2gi", NODE, "2Gi"),
    ("local-node2-1gi", "node2", "1Gi"),
)


def api_claim(name: str = "data", size: str = "1Gi", uid: str = "c1", rv: str = "7", volume: str = "", **spec) -> dict:
    annotations = {"pv.kubernetes.io/bind-completed": "yes"} if volume else {}
    body = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
        "storageClassName": "local",
        **({"volumeName": volume} if volume else {}),
        **spec,
    }
    metadata = {"namespace": "ml", "name": name, "uid": uid, "resourceVersion": rv, "annotations": annotations}
    return {"metadata": metadata, "spec": body}


def api_volume(name: str, on: str = NODE, size: str = "2Gi", rv: str = "100", claim: tuple | None = None, **extra):
    requirement = {"key": "kubernetes.io/hostname", "operator": "In", "values": [on]}
    spec = {
        "capacity": {"storage": size},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "local",
        "local": {"path": f"/mnt/disks/{name}"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}},
        **extra.pop("spec", {}),
    }
    if claim is not None:
        spec["claimRef"] = dict(zip(("namespace", "name", "uid"), claim, strict=True))
    # Labelled as the claims with a selector ask (test_a_volume_that_does_not_fit_the_claim_is_not_chosen)
    metadata = {"name": name, "resourceVersion": rv, "labels": {"disk": "nvme"}, **extra.pop("metadata", {})}
    phase = "Bound" if claim is not None and claim[2] else "Available"
    return {"metadata": metadata, "spec": spec, "status": {"phase": extra.pop("phase", phase)}}


def new_state(*volumes: dict, claims: tuple[dict, ...] = (api_claim(),)) -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY, volume_timeout=600)
    state.nodes_listed([node_info(api_node(n)) for n in ("node2", NODE)])
    state.storage_classes_listed([LOCAL])
    state.claims_listed([claim_info(c) for c in claims])
    state.volumes_listed([volume_info(v) for v in volumes])
    return state


def attempt(state: SchedulerState):
    uid, pod = state.pop(0.0)
    return uid, state.decide(uid, pod, 1000.0)


def recorded_volumes() -> list[dict]:
    return [api_volume(name, node, size) for name, node, size in RECORDED_VOLUMES]


def test_the_recorded_volumes_are_the_ones_these_tests_offer():
    for name, node, size in RECORDED_VOLUMES:
        assert f"{name} ({size} on {node})" in KUBE_SCHEDULER["recorded"]


def test_the_smallest_volume_of_the_node_that_fits_is_chosen_as_kube_scheduler_chose():
    state = new_state(*recorded_volumes())
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, decision = attempt(state)
    assert (decision.event, decision.plugin, decision.bind) == (WAITING_FOR_VOLUMES, "VolumeBinding", False)
    assert decision.provision == (BindVolume(RECORDED["chosen volume"], "100", "ml", "data", "c1", "7"),)
    assert decision.reason == (
        f"waiting for the PV controller to bind persistentvolumeclaims data to persistentvolume "
        f"{RECORDED['chosen volume']}, chosen on node {NODE}; the pod is bound once they are"
    )
    # kube-scheduler wrote nothing on the claim: no node is asked of a provisioner.
    assert not any(isinstance(w, SelectNode) for w in decision.provision)
    assert not any(k.startswith("volume.") for k in RECORDED["claim annotations"])


def test_the_claim_ref_is_written_as_kube_scheduler_writes_it_on_the_volume_as_read():
    class Client:
        def __init__(self) -> None:
            self.calls = []

        def request(self, method, path, **kwargs):
            self.calls.append((method, path, kwargs))
            return 200, json.dumps(api_volume("v", claim=("ml", "data", "c1"), rv="101")).encode()

    client = Client()
    written = claim_volume(client, BindVolume("v", "100", "ml", "data", "c1", "7"))
    assert volume_info(written).resource_version == "101"
    ((method, path, kwargs),) = client.calls
    assert (method, path, kwargs["content_type"]) == (
        "PATCH",
        "/api/v1/persistentvolumes/v",
        "application/merge-patch+json",
    )
    body = kwargs["body"]
    assert body["metadata"]["resourceVersion"] == "100"  # a precondition: a volume changed since is refused
    # The fields and annotations kube-scheduler wrote, and nothing else.
    (fields,) = [w["fields"] for w in RECORDED["written by kube-scheduler"]]
    ref = body["spec"]["claimRef"]
    assert {f"f:{k}" for k in ref} == set(fields["f:spec"]["f:claimRef"]) - {"."}
    assert {f"f:{k}" for k in body["metadata"]["annotations"]} == set(fields["f:metadata"]["f:annotations"]) - {"."}
    assert body["metadata"]["annotations"] == RECORDED["volume annotations"]
    recorded_ref = RECORDED["volume claimRef"]
    assert (ref["kind"], ref["apiVersion"], ref["name"]) == (
        recorded_ref["kind"],
        recorded_ref["apiVersion"],
        recorded_ref["name"].replace("local", "data"),
    )
    assert recorded_ref["namespace is the claim's"] and recorded_ref["uid is the claim's"]
    assert (ref["namespace"], ref["uid"], ref["resourceVersion"]) == ("ml", "c1", "7")


def test_the_pod_waits_for_the_pv_controller_and_is_bound_once_the_claim_is_bound():
    state = new_state(*recorded_volumes())
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, decision = attempt(state)
    state.refused(uid, decision, now=0.0, jitter=0.5)
    chosen = RECORDED["chosen volume"]
    # The write's answer: the volume claimed. The pod waits on, without writing again.
    assert state.volume_written(volume_info(api_volume(chosen, rv="101", claim=("ml", "data", "c1"))))
    assert state.queue_state(uid) == ACTIVE
    uid, decision = attempt(state)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == ()
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.claim_changed(claim_info(api_claim(volume=chosen, rv="8")))
    assert state.queue_state(uid) == ACTIVE
    _, decision = attempt(state)
    assert decision.bind and decision.node == NODE == RECORDED["pod bound"]


def test_no_volume_on_the_node_and_no_provisioner_is_refused_in_kube_schedulers_words():
    state = new_state(api_volume("other", on="node2"), api_volume("small", size="512Mi"))
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, decision = attempt(state)
    assert decision.reason == ours(reason_for_the_pinned_node("no-static-volume"), "VolumeBinding")
    assert decision.event == "FailedScheduling" and decision.provision == ()
    # Retried when a volume of its class comes.
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.volume_changed(volume_info(api_volume("new")))
    assert state.queue_state(uid) == ACTIVE
    _, decision = attempt(state)
    assert [w.volume for w in decision.provision] == ["new"]


@pytest.mark.parametrize(
    "volume",
    [
        api_volume("v", on="node2"),
        api_volume("v", size="512Mi"),
        api_volume("v", claim=("ml", "other", "c9")),
        api_volume("v", phase="Pending"),
        api_volume("v", metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"}),
        api_volume("v", spec={"storageClassName": "other"}),
        api_volume("v", spec={"accessModes": ["ReadOnlyMany"]}),
        api_volume("v", spec={"volumeMode": "Block"}),
        api_volume("v", metadata={"labels": {"disk": "hdd"}}),
    ],
    ids=["other-node", "too-small", "claimed", "not-available", "deleting", "class", "modes", "block", "selector"],
)
def test_a_volume_that_does_not_fit_the_claim_is_not_chosen(volume):
    claim = api_claim(selector={"matchLabels": {"disk": "nvme"}})
    fitting = api_volume("fits", size="100Gi")
    state = new_state(volume, fitting, claims=(claim,))
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    _, decision = attempt(state)
    assert [w.volume for w in decision.provision] == ["fits"]


def test_a_volume_whose_claim_ref_names_the_claim_is_waited_for_without_a_write():
    # A restart after the write: the volume is the claim's, and nothing is written again.
    state = new_state(api_volume("small", size="1Gi"), api_volume("mine", size="5Gi", claim=("ml", "data", "c1")))
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    _, decision = attempt(state)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == ()
    assert "persistentvolume mine" in decision.reason


def two_pods_one_volume() -> SchedulerState:
    claims = (api_claim("data-a", uid="ca"), api_claim("data-b", uid="cb"))
    state = new_state(api_volume("only"), claims=claims)
    state.pod_changed(watched_pod(api_pod("a-0", "ua", "data-a"), "gpu-scheduler"))
    state.pod_changed(watched_pod(api_pod("b-0", "ub", "data-b"), "gpu-scheduler"))
    return state


def test_two_pods_never_get_the_same_volume_while_its_write_is_in_flight():
    state = two_pods_one_volume()
    _, first = attempt(state)
    second_uid, second = attempt(state)
    assert [w.volume for w in first.provision] == ["only"]
    assert second.provision == () and second.reason == ours(
        reason_for_the_pinned_node("no-static-volume"), "VolumeBinding"
    )
    state.refused(second_uid, second, now=0.0, jitter=0.5)
    # The write is refused (the volume changed): the volume is free again and the other pod woken.
    assert state.volumes_not_written(first.provision)
    assert state.queue_state(second_uid) == ACTIVE
    _, again = attempt(state)
    assert [(w.volume, w.name) for w in again.provision] == [("only", "data-b")]


def test_a_volume_written_for_one_pod_stays_out_of_the_others_reach():
    state = two_pods_one_volume()
    _, first = attempt(state)
    (write,) = first.provision
    state.volume_written(volume_info(api_volume("only", rv="101", claim=("ml", write.name, "ca"))))
    _, second = attempt(state)
    assert second.provision == () and "didn't find available persistent volumes" in second.reason


def test_a_gangs_members_get_distinct_volumes_and_are_refused_whole_when_one_lacks_one():
    claims = (api_claim("data-0", uid="c0"), api_claim("data-1", uid="c1"))
    state = new_state(api_volume("v-a"), api_volume("v-b", size="3Gi"), claims=claims)
    for index in (0, 1):
        state.pod_changed(
            watched_pod(api_pod(f"train-{index}", f"g{index}", f"data-{index}", gang=True), "gpu-scheduler")
        )
    _, decision = attempt(state)
    assert not isinstance(decision, GangPlan) and "waits for the volumes of its pods of index 0, 1" in decision.reason
    assert sorted((w.name, w.volume) for w in decision.provision) == [("data-0", "v-a"), ("data-1", "v-b")]

    lacking = new_state(api_volume("v-a"), claims=claims)
    for index in (0, 1):
        lacking.pod_changed(
            watched_pod(api_pod(f"train-{index}", f"g{index}", f"data-{index}", gang=True), "gpu-scheduler")
        )
    _, decision = attempt(lacking)
    assert decision.provision == () and "didn't find available persistent volumes" in decision.reason
    # Nothing stays reserved for a gang that writes nothing.
    assert lacking.reserved_volumes() == {}


class VolumeApi:
    """The API server's answers to the claimRef writes: `status` and the volume it holds."""

    def __init__(self, status: int, stored: dict) -> None:
        self.status, self.stored, self.patches = status, stored, []

    def request(self, method, path, **kwargs):
        self.patches.append((path, kwargs["body"]))
        if self.status == 409:
            message = "the object has been modified; please apply your changes to the latest version"
            return 409, json.dumps({"reason": "Conflict", "message": message}).encode()
        return self.status, json.dumps(self.stored).encode()


def scheduler_with(client, *volumes: dict, leading: bool = True) -> tuple[Scheduler, FakeRecorder]:
    recorder = FakeRecorder()
    config = SchedulerConfig("gpu-scheduler", None, SharingPolicy.WARN, "gpu-node-name", 1)
    scheduler = Scheduler(client, config, recorder, SchedulerMetrics(), lambda: leading, FakeConditions())
    state = scheduler.state
    state.nodes_listed([node_info(api_node(n)) for n in ("node2", NODE)])
    state.storage_classes_listed([LOCAL])
    state.claims_listed([claim_info(api_claim())])
    state.volumes_listed([volume_info(v) for v in volumes])
    return scheduler, recorder


def test_a_volume_changed_during_the_write_is_left_alone_and_chosen_again_from_its_new_version():
    # Another writer gave the volume to its claim after the cache read it: the write is refused.
    taken = api_volume("only", rv="150", claim=("other", "theirs", "t1"))
    client = VolumeApi(409, taken)
    scheduler, recorder = scheduler_with(client, api_volume("only", rv="100"))
    scheduler.state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, pod = scheduler.state.pop(0.0)
    scheduler._schedule_one.schedule_one(uid, pod)
    ((path, body),) = client.patches
    assert path == "/api/v1/persistentvolumes/only" and body["metadata"]["resourceVersion"] == "100"
    [event] = recorder.events
    assert event["reason"] == WAITING_FOR_VOLUMES and "persistentvolume only: 409" in event["note"]
    assert scheduler.state.reserved_volumes() == {}
    # The watch brings the volume as the other writer left it: the pod is refused, nothing written.
    scheduler.state.volume_changed(volume_info(taken))
    uid, pod = scheduler.state.pop(0.0)
    scheduler._schedule_one.schedule_one(uid, pod)
    assert len(client.patches) == 1
    assert "didn't find available persistent volumes" in recorder.events[-1]["note"]


def test_a_written_volume_is_held_as_answered_and_the_pod_waits():
    client = VolumeApi(200, api_volume("only", rv="101", claim=("ml", "data", "c1")))
    scheduler, recorder = scheduler_with(client, api_volume("only", rv="100"))
    scheduler.state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, pod = scheduler.state.pop(0.0)
    scheduler._schedule_one.schedule_one(uid, pod)
    [event] = recorder.events
    assert event["reason"] == WAITING_FOR_VOLUMES and "failed" not in event["note"]
    assert scheduler.state.reserved_volumes() == {}
    # The volume is held as answered, claimed by the claim: the next attempt writes nothing.
    decision = scheduler.state.decide(uid, pod, 1000.0)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == ()


def test_a_volume_is_released_when_its_attempt_breaks_before_the_write():
    class Broken:
        def request(self, method, path, **kwargs):
            raise RuntimeError("a bug between the decision and the answer")

    scheduler, _ = scheduler_with(Broken(), api_volume("only", rv="100"))
    scheduler.state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, pod = scheduler.state.pop(0.0)
    scheduler._schedule_one(uid, pod)  # as a worker calls it: the attempt's surprise is caught
    assert scheduler.state.reserved_volumes() == {}


def test_a_replica_that_does_not_lead_writes_nothing_and_keeps_no_volume_reserved():
    client = VolumeApi(200, api_volume("only", rv="101", claim=("ml", "data", "c1")))
    scheduler, _ = scheduler_with(client, api_volume("only", rv="100"), leading=False)
    scheduler.state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, pod = scheduler.state.pop(0.0)
    scheduler._schedule_one.schedule_one(uid, pod)
    assert client.patches == [] and scheduler.state.reserved_volumes() == {}
