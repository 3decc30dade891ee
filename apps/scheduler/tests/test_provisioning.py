"""WaitForFirstConsumer claims on the map's node: the node is chosen for them once every other
check passes (volume.kubernetes.io/selected-node, as kube-scheduler recorded writes it), the
pod waits with Events until they are bound and is bound then, a wait past the timeout says so,
a restart resumes from the claims, and a gang's volumes are asked for before any member binds."""

from __future__ import annotations

import pytest
from gpu_scheduler.kube.claims import select_node
from gpu_scheduler.kube.objects import claim_info, node_info, volume_info, watched_pod
from gpu_scheduler.placement import bind_env_entry
from gpu_scheduler.scheduler.queue import ACTIVE, BACKOFF
from gpu_scheduler.scheduler.state import SchedulerState
from gpu_scheduler.scheduling import AssignedPod, SharingPolicy
from gpu_scheduler.scheduling.gangs import GangPlan
from gpu_scheduler.scheduling.provisioning import WAITING_FOR_VOLUMES, SelectNode
from gpu_scheduler.scheduling.volumes import SELECTED_NODE_ANNOTATION, StorageClass
from recorded import KUBE_SCHEDULER

NODE = "node3"
LOCAL = StorageClass("local", "WaitForFirstConsumer", "rancher.io/local-path")


def api_node(name: str, cpu: str = "8") -> dict:
    resources = {"cpu": cpu, "memory": "32Gi", "pods": "110", "nvidia.com/gpu": "4"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def api_pod(name: str = "train-0", uid: str = "u1", claim: str = "data", cpu: str = "1", gang: bool = False) -> dict:
    index = int(name.rsplit("-", 1)[1])
    metadata = {
        "namespace": "ml",
        "name": name,
        "uid": uid,
        "annotations": {"gpu-scheduling-map": f"0={NODE}:0\n1={NODE}:1\n"},
    }
    if gang:
        metadata["annotations"]["gpu-scheduler/gang"] = "true"
        metadata["labels"] = {"apps.kubernetes.io/pod-index": str(index)}
        metadata["ownerReferences"] = [{"kind": "StatefulSet", "name": "train", "controller": True, "uid": "s"}]
    return {
        "metadata": metadata,
        "spec": {
            "schedulerName": "gpu-scheduler",
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": "CUDA_VISIBLE_DEVICES", "value": str(index)}],
                    "resources": {"requests": {"cpu": cpu}},
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def api_claim(name: str = "data", selected: str = "", volume: str = "", rv: str = "7") -> dict:
    annotations = {SELECTED_NODE_ANNOTATION: selected} if selected else {}
    if volume:
        annotations["pv.kubernetes.io/bind-completed"] = "yes"
    spec = {"storageClassName": "local", **({"volumeName": volume} if volume else {})}
    return {
        "metadata": {"namespace": "ml", "name": name, "resourceVersion": rv, "annotations": annotations},
        "spec": spec,
    }


def api_volume(name: str, on: str) -> dict:
    requirement = {"key": "kubernetes.io/hostname", "operator": "In", "values": [on]}
    return {
        "metadata": {"name": name},
        "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}},
    }


@pytest.fixture
def state() -> SchedulerState:
    state = SchedulerState("gpu-node-name", SharingPolicy.DENY, volume_timeout=600)
    state.nodes_listed([node_info(api_node(n)) for n in ("node2", NODE)])
    state.storage_classes_listed(
        [LOCAL, StorageClass("static", "WaitForFirstConsumer", "kubernetes.io/no-provisioner")]
    )
    state.claims_listed([claim_info(api_claim())])
    state.volumes_listed([])
    return state


def attempt(state: SchedulerState, wall: float = 1000.0):
    uid, pod = state.pop(0.0)
    decision = state.decide(uid, pod, wall)
    return uid, decision


def test_the_node_is_selected_for_an_unbound_claim_and_the_pod_is_bound_once_the_claim_is(state):
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, decision = attempt(state)
    assert not decision.bind
    assert (decision.event, decision.plugin) == (WAITING_FOR_VOLUMES, "VolumeBinding")
    assert decision.provision == (SelectNode("ml", "data", "7", NODE),)
    assert decision.reason == (
        "waiting for the provisioner to bind persistentvolumeclaims data (StorageClass local) to volumes on node "
        f"node3 ({SELECTED_NODE_ANNOTATION}); the pod is bound once they are"
    )
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.held_by(uid) is None  # nothing is held while it waits
    # The annotation written comes back as a claim event: the pod waits on, without asking again.
    assert state.claim_changed(claim_info(api_claim(selected=NODE, rv="8"))) is True
    uid, decision = attempt(state)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == ()
    state.refused(uid, decision, now=0.0, jitter=0.5)
    # The provisioner made a volume on node3 and the PV controller bound the claim to it.
    state.volume_changed(volume_info(api_volume("pvc-1", on=NODE)))
    assert state.claim_changed(claim_info(api_claim(selected=NODE, volume="pvc-1", rv="9"))) is True
    assert state.queue_state(uid) == ACTIVE
    uid, decision = attempt(state)
    assert decision.bind and decision.node == NODE


def test_kube_scheduler_writes_the_same_annotation_and_binds_nothing_before_the_claim_is_bound():
    recorded = KUBE_SCHEDULER["cases"]["wait-for-first-consumer"]
    assert recorded["claim annotations"][SELECTED_NODE_ANNOTATION] == KUBE_SCHEDULER["node"]
    assert recorded["pod bound"] is None


def test_the_node_is_chosen_only_once_every_other_check_passes(state):
    state.pod_changed(watched_pod(api_pod(cpu="64"), "gpu-scheduler"))
    uid, decision = attempt(state)
    assert decision.plugin == "NodeResourcesFit" and decision.provision == ()


def test_a_claim_being_provisioned_for_another_node_is_refused_saying_so(state):
    # A claim of a class without a provisioner: tests/test_static_volumes.py.
    state.claim_changed(claim_info(api_claim(selected="node2")))
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    _, decision = attempt(state)
    assert decision.event == "FailedScheduling" and decision.provision == ()
    words = f'persistentvolumeclaim "data" is being provisioned for node node2 ({SELECTED_NODE_ANNOTATION})'
    assert words in decision.reason and decision.plugin == "VolumeBinding"


def test_a_wait_past_the_timeout_is_a_failed_scheduling_warning_and_the_wait_goes_on(state):
    state.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    uid, decision = attempt(state, wall=1000.0)
    state.refused(uid, decision, now=0.0, jitter=0.5)
    state.claim_changed(claim_info(api_claim(selected=NODE, rv="8")))
    uid, decision = attempt(state, wall=1599.0)
    assert decision.event == WAITING_FOR_VOLUMES
    state.refused(uid, decision, now=0.0, jitter=0.5)
    state.claim_changed(claim_info(api_claim(selected=NODE, rv="9")))
    uid, decision = attempt(state, wall=1601.0)
    assert decision.event == "FailedScheduling"
    assert decision.reason.startswith("timed out after 601s waiting for the provisioner to bind")
    assert "still waiting" in decision.reason
    state.refused(uid, decision, now=0.0, jitter=0.5)
    assert state.queue_state(uid) == BACKOFF  # retried, and woken by its claim
    state.claim_changed(claim_info(api_claim(selected=NODE, rv="10")))
    _, decision = attempt(state, wall=1700.0)  # the clock started again at the warning
    assert decision.event == WAITING_FOR_VOLUMES


def test_a_restarted_scheduler_resumes_from_the_claim_without_asking_again(state):
    restarted = SchedulerState("gpu-node-name", SharingPolicy.DENY)
    restarted.nodes_listed([node_info(api_node(NODE))])
    restarted.storage_classes_listed([LOCAL])
    restarted.claims_listed([claim_info(api_claim(selected=NODE))])
    restarted.pod_changed(watched_pod(api_pod(), "gpu-scheduler"))
    _, decision = attempt(restarted)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == ()


def test_a_gangs_volumes_are_all_asked_for_and_no_member_is_bound_before_they_are_bound(state):
    state.claims_listed([claim_info(api_claim("data-0")), claim_info(api_claim("data-1"))])
    state.pod_changed(watched_pod(api_pod("train-0", "g0", "data-0", gang=True), "gpu-scheduler"))
    state.pod_changed(watched_pod(api_pod("train-1", "g1", "data-1", gang=True), "gpu-scheduler"))
    uid, decision = attempt(state)
    assert not isinstance(decision, GangPlan) and not decision.bind
    assert {s.name for s in decision.provision} == {"data-0", "data-1"}
    assert "waits for the volumes of its pods of index 0, 1" in decision.reason
    assert state.assumed() == frozenset()
    state.refused(uid, decision, now=0.0, jitter=0.5)
    state.claim_changed(claim_info(api_claim("data-1", NODE)))  # the annotations, as written
    state.volumes_listed([volume_info(api_volume("pv-0", NODE)), volume_info(api_volume("pv-1", NODE))])
    state.claim_changed(claim_info(api_claim("data-0", NODE, "pv-0")))
    uid, decision = attempt(state)  # one bound, one not: still none, and nothing asked again
    assert not isinstance(decision, GangPlan) and decision.provision == ()
    assert "waits for the volumes of its pods of index 1" in decision.reason
    state.refused(uid, decision, now=0.0, jitter=0.5)
    state.claim_changed(claim_info(api_claim("data-1", NODE, "pv-1")))
    _, plan = attempt(state)
    assert isinstance(plan, GangPlan) and [d.node for _, _, d in plan.members] == [NODE, NODE]


def test_the_annotation_is_a_merge_patch_that_changes_only_the_claim_as_read():
    class Client:
        def __init__(self, status: int) -> None:
            self.status, self.calls = status, []

        def request(self, method, path, **kwargs):
            self.calls.append((method, path, kwargs))
            return self.status, b'{"reason":"Conflict"}'

    client = Client(200)
    assert select_node(client, SelectNode("ml", "data", "7", NODE)) is None
    ((method, path, kwargs),) = client.calls
    assert (method, path) == ("PATCH", "/api/v1/namespaces/ml/persistentvolumeclaims/data")
    assert kwargs["content_type"] == "application/merge-patch+json"
    assert kwargs["body"] == {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: NODE}, "resourceVersion": "7"}}
    assert select_node(Client(409), SelectNode("ml", "data", "7", NODE)).startswith("409")


def test_a_count_line_stays_on_the_node_its_claim_is_being_provisioned_for(state):
    # node2 sorts first and both nodes are untouched: a count line chooses node2 and asks for
    # the claim's volume there; once the claim says so, every later attempt keeps to node2,
    # even when packing would now prefer node3 (a pod holds one of its GPUs).
    pod = api_pod()
    pod["metadata"]["annotations"]["gpu-scheduling-map"] = "*=*:gpus=1\n"
    pod["spec"]["containers"][0]["env"] = [bind_env_entry()]
    state.pod_changed(watched_pod(pod, "gpu-scheduler"))
    uid, decision = attempt(state)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == (SelectNode("ml", "data", "7", "node2"),)
    state.refused(uid, decision, now=0.0, jitter=0.5)
    state.assigned_upsert(AssignedPod("other", "ml/other", NODE, (), ("3",)))
    state.claim_changed(claim_info(api_claim(selected="node2", rv="8")))
    uid, decision = attempt(state)
    assert decision.event == WAITING_FOR_VOLUMES and decision.provision == ()
    assert "on node node2" in decision.reason
