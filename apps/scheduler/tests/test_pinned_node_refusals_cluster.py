"""On the real local control plane, pods the map pins to node3 that node3 cannot run: a claim
bound to a volume of node2, a hostPort another pod holds there, a ReadWriteOncePod claim a pod
on node2 uses, a CSI volume past its driver's count on node3's CSINode, a required pod
anti-affinity a pod there breaks, a DoNotSchedule topology spread it would skew, DRA
resourceClaims. Each is refused with kube-scheduler's recorded words
(testdata/kube_scheduler_messages.json) or, for DRA, ours, as a FailedScheduling Event and the
PodScheduled condition; the port's, the claim's, the CSI volume's and the anti-affinity's pods
are bound once the pod in their way is gone, the spread's once the other nodes have as many.
(A volume's node affinity cannot be changed, so the volume's pod stays refused; the unit tests
wake it with a changed volume.) And a claim of a WaitForFirstConsumer class: it gets node3 from
the map, and its pod is bound once the claim is bound to a volume there; a gang's claims each get
their member's node, and no member is bound before every claim is."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kubernetes import client
from recorded import ours, reason_for_the_pinned_node
from test_scheduler_cluster import core, make_pod, node_of, refused_with, start_scheduler, wait_until

pytestmark = pytest.mark.cluster

__all__ = ["core", "start_scheduler"]  # fixtures, from the scheduler's cluster tests

NODE = "node3"


def test_a_claim_bound_to_a_volume_of_node2_is_refused_on_node3(start_scheduler, core, api_client, namespace):
    volume = f"pv-{uuid.uuid4().hex[:6]}"

    core.create_persistent_volume(
        {
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "",
                "hostPath": {"path": "/tmp/data"},
                "nodeAffinity": affinity_of(("node2",)),
            },
        }
    )
    try:
        claim = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": volume,
        }
        core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "data"}, "spec": claim})
        wait_until(
            lambda: core.read_namespaced_persistent_volume_claim("data", namespace).status.phase == "Bound",
            30,
            "the PV controller to bind the claim",
            interval=0.5,
        )
        start_scheduler("--leader-elect=false")
        make_pod(
            core,
            namespace,
            "train-0",
            start_scheduler.scheduler_name,
            f"0={NODE}:0\n",
            spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
        )
        refused_with(
            api_client,
            core,
            namespace,
            "train-0",
            ours(reason_for_the_pinned_node("pv-of-another-node"), "VolumeBinding", NODE),
        )
    finally:
        core.delete_persistent_volume(volume)


def affinity_of(nodes: tuple[str, ...]) -> dict:
    requirement = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}}


def test_a_host_port_held_on_node3_is_refused_until_its_holder_is_gone(start_scheduler, core, api_client, namespace):
    ports = [{"containerPort": 80, "hostPort": 18080, "protocol": "TCP"}]
    # The holder is on node3 from its creation: no scheduler's, as a DaemonSet's pod would be.
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "holder"},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "busybox", "ports": ports}]},
        },
    )
    start_scheduler("--leader-elect=false")
    make_pod(
        core,
        namespace,
        "web-0",
        start_scheduler.scheduler_name,
        f"0={NODE}:1\n",
        spec={"containers": [{"name": "main", "image": "busybox", "ports": ports}]},
    )
    refused_with(api_client, core, namespace, "web-0", ours(reason_for_the_pinned_node("port-taker"), "NodePorts"))
    core.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
    assert wait_until(lambda: node_of(core, namespace, "web-0"), 20, "web-0 to be bound") == NODE


def static_volume(core, name: str, modes: list[str], source: dict) -> None:
    spec = {"capacity": {"storage": "1Gi"}, "accessModes": modes, "storageClassName": "", **source}
    core.create_persistent_volume({"metadata": {"name": name}, "spec": spec})


def bound_claim(core, namespace: str, name: str, volume: str, modes: list[str]) -> None:
    spec = {
        "accessModes": modes,
        "resources": {"requests": {"storage": "1Gi"}},
        "storageClassName": "",
        "volumeName": volume,
    }
    core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": name}, "spec": spec})
    wait_until(
        lambda: core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound",
        30,
        f"the PV controller to bind {name}",
        interval=0.5,
    )


def uses(claim: str) -> dict:
    return {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}


def holder_on(core, namespace: str, node: str, claim: str) -> None:
    """A pod on the node from its creation (no scheduler's) using the claim."""
    spec = {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}], **uses(claim)}
    core.create_namespaced_pod(namespace, {"metadata": {"name": "holder"}, "spec": spec})


def test_a_read_write_once_pod_claim_used_on_node2_is_refused_until_its_pod_is_gone(
    start_scheduler, core, api_client, namespace
):
    volume = f"pv-{uuid.uuid4().hex[:6]}"
    static_volume(core, volume, ["ReadWriteOncePod"], {"hostPath": {"path": "/tmp/solo"}})
    try:
        bound_claim(core, namespace, "solo", volume, ["ReadWriteOncePod"])
        holder_on(core, namespace, "node2", "solo")
        start_scheduler("--leader-elect=false")
        make_pod(core, namespace, "train-0", start_scheduler.scheduler_name, f"0={NODE}:0\n", spec=uses("solo"))
        reason = reason_for_the_pinned_node("rwop-taker")
        refused_with(api_client, core, namespace, "train-0", ours(reason, "VolumeRestrictions", NODE))
        core.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
        assert wait_until(lambda: node_of(core, namespace, "train-0"), 20, "train-0 to be bound") == NODE
    finally:
        core.delete_persistent_volume(volume)


def test_csi_volumes_past_the_drivers_count_on_node3_are_refused_until_a_pod_leaves(
    start_scheduler, core, api_client, namespace
):
    driver = "csi.test.example.com"  # no such driver runs: only its count on node3's CSINode is read
    storage = client.StorageV1Api(core.api_client)
    volumes = [f"pv-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    storage.create_csi_node(
        {
            "metadata": {"name": NODE},
            "spec": {"drivers": [{"name": driver, "nodeID": NODE, "allocatable": {"count": 1}}]},
        }
    )
    try:
        for index, volume in enumerate(volumes):
            static_volume(core, volume, ["ReadWriteOnce"], {"csi": {"driver": driver, "volumeHandle": volume}})
            bound_claim(core, namespace, f"disk-{index}", volume, ["ReadWriteOnce"])
        holder_on(core, namespace, NODE, "disk-0")
        start_scheduler("--leader-elect=false")
        make_pod(core, namespace, "train-0", start_scheduler.scheduler_name, f"0={NODE}:0\n", spec=uses("disk-1"))
        reason = reason_for_the_pinned_node("csi-taker")
        refused_with(api_client, core, namespace, "train-0", ours(reason, "NodeVolumeLimits", NODE))
        core.delete_namespaced_pod("holder", namespace, grace_period_seconds=0)
        assert wait_until(lambda: node_of(core, namespace, "train-0"), 20, "train-0 to be bound") == NODE
    finally:
        storage.delete_csi_node(NODE)
        for volume in volumes:
            core.delete_persistent_volume(volume)


BUSYBOX = {"name": "main", "image": "busybox"}


def on_node(core, namespace: str, name: str, node: str, labels: dict) -> None:
    """A pod on the node from its creation (no scheduler's, as a DaemonSet's pod would be)."""
    body = {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node, "containers": [BUSYBOX]}}
    core.create_namespaced_pod(namespace, body)


def test_a_required_anti_affinity_broken_on_node3_is_refused_until_the_matching_pod_is_gone(
    start_scheduler, core, api_client, namespace
):
    on_node(core, namespace, "rank-a", NODE, {"app": "rank"})
    start_scheduler("--leader-elect=false")
    term = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "rank"}}}
    make_pod(
        core,
        namespace,
        "rank-0",
        start_scheduler.scheduler_name,
        f"0={NODE}:0\n",
        labels={"app": "rank"},
        spec={"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}},
    )
    reason = ours(reason_for_the_pinned_node("anti-affinity"), "InterPodAffinity", NODE)
    refused_with(api_client, core, namespace, "rank-0", reason)
    core.delete_namespaced_pod("rank-a", namespace, grace_period_seconds=0)
    assert wait_until(lambda: node_of(core, namespace, "rank-0"), 20, "rank-0 to be bound") == NODE


def test_a_topology_spread_broken_on_node3_is_refused_until_the_other_nodes_catch_up(
    start_scheduler, core, api_client, namespace
):
    on_node(core, namespace, "spread-a", NODE, {"app": "spread"})
    start_scheduler("--leader-elect=false")
    constraint = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }
    make_pod(
        core,
        namespace,
        "spread-0",
        start_scheduler.scheduler_name,
        f"0={NODE}:1\n",
        labels={"app": "spread"},
        spec={"topologySpreadConstraints": [constraint]},
    )
    reason = ours(reason_for_the_pinned_node("topology-spread"), "PodTopologySpread", NODE)
    refused_with(api_client, core, namespace, "spread-0", reason)
    # One pod on each other node: node3 then has 1 where the least has 1, and 2 is within maxSkew.
    # The last one's arrival wakes the pod.
    for other in ("node1", "node2", "node4"):
        on_node(core, namespace, f"spread-{other}", other, {"app": "spread"})
    assert wait_until(lambda: node_of(core, namespace, "spread-0"), 20, "spread-0 to be bound") == NODE


def test_a_pod_with_resource_claims_is_refused_saying_dra_is_not_supported(
    start_scheduler, core, api_client, namespace
):
    start_scheduler("--leader-elect=false")
    make_pod(
        core,
        namespace,
        "dra-0",
        start_scheduler.scheduler_name,
        f"0={NODE}:2\n",
        spec={
            "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}],
        },
    )
    condition = refused_with(
        api_client,
        core,
        namespace,
        "dra-0",
        "the pod has resourceClaims (gpu): gpu-scheduler does not support DynamicResourceAllocation claims yet, "
        "and binding the pod would start it without the devices they ask for; remove them, or let kube-scheduler "
        "place the pod",
    )
    assert condition.status == "False"
    assert client.CoreV1Api(api_client).read_namespaced_pod("dra-0", namespace).spec.node_name is None


def test_a_wait_for_first_consumer_claim_gets_node3_and_the_pod_is_bound_once_its_volume_is(
    start_scheduler, core, api_client, namespace
):
    storage = client.StorageV1Api(api_client)
    cls = f"wffc-{uuid.uuid4().hex[:6]}"
    # A provisioner nobody runs: the test makes the volume itself, as a provisioner would.
    storage.create_storage_class(
        {"metadata": {"name": cls}, "provisioner": "example.com/test", "volumeBindingMode": "WaitForFirstConsumer"}
    )
    volume = f"pv-{uuid.uuid4().hex[:6]}"
    try:
        claim = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": cls,
        }
        core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": "data"}, "spec": claim})
        start_scheduler("--leader-elect=false")
        make_pod(
            core,
            namespace,
            "ckpt-0",
            start_scheduler.scheduler_name,
            f"0={NODE}:3\n",
            spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
        )

        def selected() -> str | None:
            annotations = core.read_namespaced_persistent_volume_claim("data", namespace).metadata.annotations or {}
            return annotations.get("volume.kubernetes.io/selected-node")

        assert wait_until(selected, 15, "the claim to get the map's node") == NODE
        wait_until(lambda: waiting_for_volumes(api_client, namespace, "ckpt-0"), 15, "a WaitingForVolumes Event")
        assert node_of(core, namespace, "ckpt-0") is None  # not before its volume is there
        uid = core.read_namespaced_persistent_volume_claim("data", namespace).metadata.uid
        core.create_persistent_volume(
            {
                "metadata": {"name": volume},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": cls,
                    "hostPath": {"path": "/tmp/ckpt"},
                    "nodeAffinity": affinity_of((NODE,)),
                    "claimRef": {"namespace": namespace, "name": "data", "uid": uid},
                },
            }
        )
        assert wait_until(lambda: node_of(core, namespace, "ckpt-0"), 30, "ckpt-0 to be bound", interval=0.5) == NODE
        assert core.read_namespaced_persistent_volume_claim("data", namespace).spec.volume_name == volume
    finally:
        if any(v.metadata.name == volume for v in core.list_persistent_volume().items):
            core.delete_persistent_volume(volume)
        storage.delete_storage_class(cls)


def test_a_gangs_claims_are_all_bound_before_any_member_is(start_scheduler, core, api_client, namespace):
    """All or none includes the volumes: each member's WaitForFirstConsumer claim gets its
    member's node, and no member is bound while one claim is still unbound."""
    storage = client.StorageV1Api(api_client)
    cls = f"wffc-{uuid.uuid4().hex[:6]}"
    storage.create_storage_class(
        {"metadata": {"name": cls}, "provisioner": "example.com/test", "volumeBindingMode": "WaitForFirstConsumer"}
    )
    members = {"rank-0": ("node3", "data-0"), "rank-1": ("node2", "data-1")}
    volumes = []
    try:
        claim = {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": cls,
        }
        for _, name in members.values():
            core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": name}, "spec": claim})
        start_scheduler("--leader-elect=false")
        gang = {"gpu-scheduler/gang": "true", "gpu-scheduler/gang-label": "job"}
        for pod, (_, name) in members.items():
            make_pod(
                core,
                namespace,
                pod,
                start_scheduler.scheduler_name,
                "0=node3:3\n1=node2:3\n",
                labels={"job": "ckpt"},
                annotations=gang,
                spec={"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": name}}]},
            )

        def selected() -> dict[str, str | None]:
            found = {}
            for _, name in members.values():
                annotations = core.read_namespaced_persistent_volume_claim(name, namespace).metadata.annotations or {}
                found[name] = annotations.get("volume.kubernetes.io/selected-node")
            return found if all(found.values()) else None

        assert wait_until(selected, 15, "both claims to get their member's node") == {
            "data-0": "node3",
            "data-1": "node2",
        }

        def provision(pod: str) -> None:
            """What a provisioner does for the claim of `pod`: a volume on its node, bound to it."""
            node, name = members[pod]
            uid = core.read_namespaced_persistent_volume_claim(name, namespace).metadata.uid
            volume = f"pv-{uuid.uuid4().hex[:6]}"
            volumes.append(volume)
            spec = {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": cls,
                "hostPath": {"path": f"/tmp/{name}"},
                "nodeAffinity": affinity_of((node,)),
                "claimRef": {"namespace": namespace, "name": name, "uid": uid},
            }
            core.create_persistent_volume({"metadata": {"name": volume}, "spec": spec})
            wait_until(
                lambda: core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound",
                30,
                f"{name} bound by the PV controller",
                interval=0.5,
            )

        def waiting_for_its_volumes() -> list[str]:
            # Other GangWaiting notes may come first (a member being tried by another worker).
            notes = events_of(api_client, namespace, "rank-1", "GangWaiting")
            return [note for note in notes if "waits for the volumes of its pods" in note]

        wait_until(waiting_for_its_volumes, 15, "rank-1's GangWaiting for the volumes")
        provision("rank-0")
        # rank-0's volume is there, rank-1's is not: the gang waits whole. A claim's change
        # wakes the gang at once, so 3 s hold many attempts in which rank-0 alone would pass.
        time.sleep(3)
        assert (node_of(core, namespace, "rank-0"), node_of(core, namespace, "rank-1")) == (None, None)

        provision("rank-1")
        assert wait_until(
            lambda: all(node_of(core, namespace, pod) for pod in members), 30, "both members bound", interval=0.5
        )
        assert {pod: node_of(core, namespace, pod) for pod in members} == {"rank-0": "node3", "rank-1": "node2"}
    finally:
        for volume in volumes:
            core.delete_persistent_volume(volume)
        storage.delete_storage_class(cls)


def events_of(api_client, namespace: str, pod: str, reason: str) -> list[str]:
    """The notes of the pod's Events of `reason`. Read raw: the client's model refuses the
    Events the PV controller writes about the claim, which have no eventTime."""
    listed = json.loads(client.EventsV1Api(api_client).list_namespaced_event(namespace, _preload_content=False).data)
    return [e.get("note") for e in listed["items"] if e["regarding"].get("name") == pod and e.get("reason") == reason]


def waiting_for_volumes(api_client, namespace: str, pod: str) -> list[str]:
    """The notes of the pod's WaitingForVolumes Events (Normal)."""
    return events_of(api_client, namespace, pod, "WaitingForVolumes")
