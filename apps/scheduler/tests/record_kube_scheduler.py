"""Records what kube-scheduler says of the pods VolumeBinding, VolumeRestrictions,
NodeVolumeLimits, NodePorts, PodTopologySpread, InterPodAffinity and DynamicResources refuse,
and what VolumeBinding writes for WaitForFirstConsumer claims (a provisioner's: selected-node;
a class without one: the static volume it chooses and the claimRef it writes there), into
testdata/kube_scheduler_messages.json, which the unit tests compare with.

Run by hand on the local control plane (no kube-scheduler runs there: gpu-scheduler is the
scheduler), with the kube-scheduler binary that `make local-up` built from cluster/local's
go.mod:

    LOCAL_APISERVER_PORT=0 make local-up
    .venv/bin/python apps/scheduler/tests/record_kube_scheduler.py

(KUBECONFIG and CACHE_DIR name another checkout's control plane and binaries, from a worktree.)

It starts kube-scheduler with a profile of its own (schedulerName kube-scheduler-recorder,
no leader election), creates each case's objects in a namespace of its own, each pod pinned
to node3 by required node affinity on metadata.name as the issue asks ("pinned by node
affinity"), waits for kube-scheduler's FailedScheduling Event or for what it writes (a
claim's selected-node annotation), and writes what it saw. Nothing is typed in by hand.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client, config

ROOT = Path(__file__).resolve().parents[3]
# The checkout's .cache, or the one CACHE_DIR names (a git worktree shares its main checkout's).
CACHE = Path(os.environ.get("CACHE_DIR") or ROOT / ".cache")
OUT = Path(__file__).resolve().parent / "testdata" / "kube_scheduler_messages.json"
SCHEDULER = "kube-scheduler-recorder"
NODE = "node3"
PV_NODE = "node2"
CSI_DRIVER = "csi.recorder.example.com"  # no such driver runs: only its count on node3's CSINode is read


def pinned(spec: dict, node: str = NODE) -> dict:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        }
    }
    return {"schedulerName": SCHEDULER, "affinity": affinity, **spec}


def container(**extra) -> dict:
    return {"name": "main", "image": "busybox", **extra}


def wait(what: str, condition, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.5)
    raise TimeoutError(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def static_volume_case(core, namespace: str, pod: str, claim_name: str) -> dict:
    """What kube-scheduler chose for a WaitForFirstConsumer claim of a class without a
    provisioner, what it wrote on that volume (its own fields, from the volume's managedFields:
    the PV controller writes there too) and on the claim, and where the pod went."""
    node = wait(f"{pod} bound", lambda: core.read_namespaced_pod(pod, namespace).spec.node_name)
    claim = core.read_namespaced_persistent_volume_claim(claim_name, namespace)
    raw = core.read_persistent_volume(claim.spec.volume_name, _preload_content=False).data
    pv = json.loads(raw)
    written = [
        {"operation": f["operation"], "fields": f.get("fieldsV1")}
        for f in pv["metadata"].get("managedFields") or ()
        if f.get("manager", "").startswith("kube-scheduler")
    ]
    claim_ref = pv["spec"]["claimRef"]
    return {
        "chosen volume": claim.spec.volume_name.removeprefix(f"{namespace}-"),
        "volume claimRef": {
            **{k: v for k, v in claim_ref.items() if k not in ("namespace", "uid", "resourceVersion")},
            "namespace is the claim's": claim_ref.get("namespace") == namespace,
            "uid is the claim's": claim_ref.get("uid") == claim.metadata.uid,
            "has resourceVersion": "resourceVersion" in claim_ref,
        },
        "volume annotations": pv["metadata"].get("annotations") or {},
        "written by kube-scheduler": written,
        "claim annotations": claim.metadata.annotations or {},
        "pod bound": node,
    }


def main() -> int:
    kubeconfig = os.environ.get("KUBECONFIG") or str(CACHE / "local-cluster/kubeconfig")
    config.load_kube_config(kubeconfig)
    core = client.CoreV1Api()
    storage = client.StorageV1Api()
    events = client.EventsV1Api()
    namespace = f"record-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    binary = CACHE / "bin/kube-scheduler"
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="kube-scheduler-recorder-"))
    (work / "config.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {kubeconfig}}}\n"
        "leaderElection: {leaderElect: false}\n"
        f"profiles: [{{schedulerName: {SCHEDULER}}}]\n"
    )
    log = (work / "kube-scheduler.log").open("w")
    scheduler = subprocess.Popen(
        [binary, "--config", str(work / "config.yaml"), "--bind-address=127.0.0.1", f"--secure-port={free_port()}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    classes = [f"{namespace}-immediate", f"{namespace}-wffc", f"{namespace}-local"]
    volumes = [f"{namespace}-on-{PV_NODE}", f"{namespace}-rwop", f"{namespace}-csi-1", f"{namespace}-csi-2"]
    # Local volumes of a class without a provisioner: two on node3 (both fit the claim), and
    # the smallest of all on node2, which node3's pod may not have.
    local_volumes = {f"{namespace}-local-{NODE}-5gi": (NODE, "5Gi"), f"{namespace}-local-{NODE}-2gi": (NODE, "2Gi")}
    local_volumes[f"{namespace}-local-{PV_NODE}-1gi"] = (PV_NODE, "1Gi")
    volumes += list(local_volumes)
    csi_node = False
    cases: dict[str, dict] = {}
    try:
        nodes = len(core.list_node().items)
        for name, mode in zip(classes[:2], ("Immediate", "WaitForFirstConsumer"), strict=True):
            # A provisioner nobody runs: its claims stay unbound.
            storage.create_storage_class(
                {"metadata": {"name": name}, "provisioner": "example.com/nobody", "volumeBindingMode": mode}
            )
        storage.create_storage_class(
            {
                "metadata": {"name": classes[2]},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
        )
        for name, (node, size) in local_volumes.items():
            core.create_persistent_volume(
                {
                    "metadata": {"name": name},
                    "spec": {
                        "capacity": {"storage": size},
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": classes[2],
                        "local": {"path": f"/mnt/disks/{name}"},
                        "nodeAffinity": {
                            "required": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                                        ]
                                    }
                                ]
                            }
                        },
                    },
                }
            )
        core.create_persistent_volume(
            {
                "metadata": {"name": volumes[0]},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "hostPath": {"path": "/tmp/recorder"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [PV_NODE]}
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )

        def claim(name: str, **spec) -> None:
            body = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec}
            core.create_namespaced_persistent_volume_claim(namespace, {"metadata": {"name": name}, "spec": body})

        def static_volume(name: str, modes: list[str], source: dict) -> None:
            spec = {"capacity": {"storage": "1Gi"}, "accessModes": modes, "storageClassName": "", **source}
            core.create_persistent_volume({"metadata": {"name": name}, "spec": spec})

        def bound(claim_name: str) -> None:
            wait(
                f"the claim {claim_name} bound",
                lambda: core.read_namespaced_persistent_volume_claim(claim_name, namespace).status.phase == "Bound",
            )

        claim("bound-to-node2", storageClassName="", volumeName=volumes[0])
        wait(
            "the claim bound to the PV of node2",
            lambda: core.read_namespaced_persistent_volume_claim("bound-to-node2", namespace).status.phase == "Bound",
        )
        claim("immediate", storageClassName=classes[0])
        claim("wffc", storageClassName=classes[1])
        claim("prebound-to-missing", storageClassName="", volumeName=f"{namespace}-missing")
        claim("local", storageClassName=classes[2])
        # Larger than every local volume: none matches on node3, and nothing can provision one.
        claim("local-too-large", storageClassName=classes[2], resources={"requests": {"storage": "100Gi"}})
        # VolumeRestrictions: a ReadWriteOncePod claim another pod uses.
        static_volume(volumes[1], ["ReadWriteOncePod"], {"hostPath": {"path": "/tmp/recorder-rwop"}})
        claim("rwop", accessModes=["ReadWriteOncePod"], storageClassName="", volumeName=volumes[1])
        bound("rwop")
        # NodeVolumeLimits: node3's CSINode allows one volume of the driver, and a pod uses one.
        storage.create_csi_node(
            {
                "metadata": {"name": NODE},
                "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": NODE, "allocatable": {"count": 1}}]},
            }
        )
        csi_node = True
        for index, name in enumerate(volumes[2:4], 1):
            static_volume(name, ["ReadWriteOnce"], {"csi": {"driver": CSI_DRIVER, "volumeHandle": f"{name}-handle"}})
            claim(f"csi-{index}", storageClassName="", volumeName=name)
            bound(f"csi-{index}")

        def pod(name: str, spec: dict, node: str = NODE) -> None:
            core.create_namespaced_pod(namespace, {"metadata": {"name": name}, "spec": pinned(spec, node)})

        def volume(claim_name: str) -> dict:
            return {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]}

        pod("pv-of-another-node", {"containers": [container()], **volume("bound-to-node2")})
        pod("missing-claim", {"containers": [container()], **volume("no-such-claim")})
        pod("unbound-immediate", {"containers": [container()], **volume("immediate")})
        pod("prebound-to-missing-pv", {"containers": [container()], **volume("prebound-to-missing")})
        pod("wait-for-first-consumer", {"containers": [container()], **volume("wffc")})
        pod("static-volume", {"containers": [container()], **volume("local")})
        pod("no-static-volume", {"containers": [container()], **volume("local-too-large")})
        # The ReadWriteOncePod claim's other pod is on node2: the conflict is cluster-wide.
        for holder, claim_name, node in (("rwop-holder", "rwop", PV_NODE), ("csi-holder", "csi-1", NODE)):
            pod(holder, {"containers": [container()], **volume(claim_name)}, node)
            wait(f"{holder} bound", lambda h=holder: core.read_namespaced_pod(h, namespace).spec.node_name)
        pod("rwop-taker", {"containers": [container()], **volume("rwop")})
        pod("csi-taker", {"containers": [container()], **volume("csi-2")})
        ports = {"ports": [{"containerPort": 80, "hostPort": 18080, "protocol": "TCP"}]}
        pod("port-holder", {"containers": [container(**ports)]})
        wait("port-holder bound", lambda: core.read_namespaced_pod("port-holder", namespace).spec.node_name)
        pod("port-taker", {"containers": [container(**ports)]})

        # InterPodAffinity and PodTopologySpread: pods on node3 first, bound by kube-scheduler.
        def pod_with(name: str, labels: dict, spec: dict) -> None:
            body = {"metadata": {"name": name, "labels": labels}, "spec": pinned({"containers": [container()], **spec})}
            core.create_namespaced_pod(namespace, body)

        def required(kind: str, key: str, **match_labels) -> dict:
            selector = {"matchLabels": match_labels}
            terms = [{"topologyKey": key, "labelSelector": selector}]
            return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": terms}}

        def with_affinity(extra: dict) -> dict:
            return {"affinity": {**pinned({})["affinity"], **extra}}

        pod_with("rank-holder", {"app": "rank"}, {})
        guard = required("podAntiAffinity", "kubernetes.io/hostname", app="guarded")
        pod_with("guard", {"role": "guard"}, with_affinity(guard))
        for holder in ("rank-holder", "guard"):
            wait(f"{holder} bound", lambda h=holder: core.read_namespaced_pod(h, namespace).spec.node_name)
        anti = required("podAntiAffinity", "kubernetes.io/hostname", app="rank")
        pod_with("anti-affinity", {"app": "other"}, with_affinity(anti))
        pod_with("existing-anti-affinity", {"app": "guarded"}, {})
        lonely = required("podAffinity", "kubernetes.io/hostname", app="absent")
        pod_with("affinity", {"app": "lonely"}, with_affinity(lonely))

        def spread(key: str, **extra) -> dict:
            constraint = {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "rank"}},
                **extra,
            }
            return {"topologySpreadConstraints": [constraint]}

        # nodeAffinityPolicy Ignore: the pin to node3 would otherwise leave node3 the only domain.
        pod_with("topology-spread", {"app": "rank"}, spread("kubernetes.io/hostname", nodeAffinityPolicy="Ignore"))
        pod_with("topology-spread-missing-label", {"app": "rank"}, spread("example.com/rack"))
        resource_claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "gpu", "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "nobody.example.com"}}]}},
        }
        subprocess.run(
            [CACHE / "bin/kubectl", "--kubeconfig", kubeconfig, "create", "-f", "-"],
            input=json.dumps(resource_claim),
            text=True,
            check=True,
        )
        for name, claim_name in (("resource-claim", "gpu"), ("missing-resource-claim", "no-such-resourceclaim")):
            pod(
                name,
                {
                    "containers": [container(resources={"claims": [{"name": "gpu"}]})],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}],
                },
            )

        def failed(name: str):
            # Raw JSON: the client's model refuses the PV controller's Events, which have no eventTime.
            listed = json.loads(events.list_namespaced_event(namespace, _preload_content=False).data)
            notes = [
                e.get("note")
                for e in listed["items"]
                if e["regarding"].get("name") == name and e.get("reason") == "FailedScheduling"
            ]
            return notes[0] if notes else None

        for name in (
            "pv-of-another-node",
            "missing-claim",
            "unbound-immediate",
            "prebound-to-missing-pv",
            "port-taker",
            "resource-claim",
            "rwop-taker",
            "csi-taker",
            "anti-affinity",
            "existing-anti-affinity",
            "affinity",
            "topology-spread",
            "topology-spread-missing-label",
            "no-static-volume",
        ):
            cases[name] = {"FailedScheduling": wait(f"a FailedScheduling Event of {name}", lambda n=name: failed(n))}
        # kube-scheduler's DynamicResources keeps a pod whose ResourceClaim does not exist out of
        # its active queue (PreEnqueue): no attempt, no Event, no condition.
        time.sleep(10)
        scheduled = [
            {"status": c.status, "reason": c.reason, "message": c.message}
            for c in core.read_namespaced_pod("missing-resource-claim", namespace).status.conditions or ()
            if c.type == "PodScheduled"
        ]
        cases["missing-resource-claim"] = {
            "FailedScheduling": failed("missing-resource-claim"),
            "PodScheduled": scheduled[0] if scheduled else None,
        }
        annotations = wait(
            "kube-scheduler to select a node for the WaitForFirstConsumer claim",
            lambda: core.read_namespaced_persistent_volume_claim("wffc", namespace).metadata.annotations,
        )
        cases["wait-for-first-consumer"] = {
            "claim annotations": {k: v for k, v in annotations.items() if k.startswith("volume.")},
            "pod bound": core.read_namespaced_pod("wait-for-first-consumer", namespace).spec.node_name,
        }
        cases["static-volume"] = static_volume_case(core, namespace, "static-volume", "local")
    finally:
        scheduler.terminate()
        scheduler.wait(20)
        log.close()
        core.delete_namespace(namespace)
        if csi_node:
            storage.delete_csi_node(NODE)
        for name in classes:
            storage.delete_storage_class(name)
        for name in volumes:
            core.delete_persistent_volume(name)
    local_described = ", ".join(
        f"{name.removeprefix(namespace + '-')} ({size} on {node})" for name, (node, size) in local_volumes.items()
    )
    OUT.write_text(
        json.dumps(
            {
                "recorded": (
                    f"by apps/scheduler/tests/record_kube_scheduler.py: {version} (built by make local-up from "
                    f"cluster/local/go.mod) on the local control plane of {nodes} KWOK nodes, each pod pinned to "
                    f"{NODE} by required node affinity on metadata.name (the other pod of the ReadWriteOncePod claim "
                    f"to {PV_NODE}); the PV's node affinity names {PV_NODE}; the local volumes of the class without a "
                    f"provisioner: {local_described}"
                ),
                "node": NODE,
                "nodes": nodes,
                "cases": cases,
            },
            indent=2,
        )
        + "\n"
    )
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
