"""What the benchmark creates: KWOK nodes bn-<j>, pods p-<i>, a StatefulSet. Pure data, no I/O.

Every pod is the same for every runner but for spec.schedulerName (and, for
gpu-scheduler's bind mode, the env entries of in_bind_mode()): it carries
the map annotation that places it (read by gpu-scheduler and its webhook) and
the equivalent required node affinity (read by kube-scheduler and by the
ceiling binder), so each runner places the same pods on the same nodes.

Pods come in groups that share one map text, the way a StatefulSet's or an
Indexed Job's pods do: group g holds the pods p-<g*size> .. p-<g*size+size-1>
and its map has one line per member. That is what production looks like
(one map per workload, not one per pod), and it exercises the parse cache of
the scheduler and the webhook as a real workload would.
"""

from __future__ import annotations

import copy

MAP_ANNOTATION = "gpu-scheduling-map"
# The GPUs the pinned maps name on each node (pod i gets GPU i % 8).
GPUS_PER_NODE = 8
# The nvidia.com/gpu each KWOK node advertises: twice what the pinned maps name, so that a burst of pods
# that each take a free GPU of their own (the count-line runners: dynamic_pods) fits with room to spare at
# every size the bench runs (1,000 pods on 100 nodes, QUICK's 200 on 20, the scale run's 10,000 on 5,000),
# instead of filling the last free GPU, which would measure the search for it rather than a placement.
NODE_GPUS = 16
GPU_RESOURCE = "nvidia.com/gpu"
# The map of every count-line pod: one line for any pod, one GPU on any node (docs/placement.md, "Lines that ask
# for a count"); one text shared by all, as a Deployment's pods share their template's.
COUNT_MAP = "*=*:gpus=1\n"
PODS_PER_NODE = 1000
NODE_PREFIX = "bn-"
BENCH_LABEL = "gpu-bench"  # on every node and pod the benchmark creates, for cleanup
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def node_name(j: int) -> str:
    return f"{NODE_PREFIX}{j}"


def placement(index: int, nodes: int) -> tuple[str, int]:
    """(node, GPU) of pod `index`: round-robin over nodes, then over GPUs.

    With more pods than nodes * GPUs_PER_NODE, GPUs are shared; the runs use
    --gpu-sharing=allow so that sharing is neither refused nor reported.
    """
    return node_name(index % nodes), index % GPUS_PER_NODE


def map_line(index: int, nodes: int) -> str:
    node, gpu = placement(index, nodes)
    return f"{index}={node}:{gpu}"


def map_text(indexes: range, nodes: int) -> str:
    return "\n".join(map_line(i, nodes) for i in indexes) + "\n"


def kwok_node(j: int, now: str) -> dict:
    """A KWOK fake node with GPUs_PER_NODE GPUs, created Ready (now: RFC 3339 time).

    The Ready condition is written at creation (the apiserver keeps a new
    node's status) instead of waiting for kwok to report it, which takes
    minutes for hundreds of nodes on a busy 2-core machine; kwok keeps it
    fresh afterwards. The node lifecycle controller then lifts the
    not-ready taint the apiserver puts on every new node.
    """
    resources = {"cpu": "64", "memory": "512Gi", "pods": str(PODS_PER_NODE), GPU_RESOURCE: str(NODE_GPUS)}
    name = node_name(j)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            # The ttl annotation keeps kwok from renewing a lease per node.
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                BENCH_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kwok fake node",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


def node_affinity(node: str) -> dict:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        }
    }


def pinned_node(pod: dict) -> str:
    """The node a pod built by bench_pod() is pinned to (what the ceiling binds it to)."""
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return terms["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]


def pod_spec(scheduler_name: str, node: str | None) -> dict:
    spec = {
        "schedulerName": scheduler_name,
        # Deleting a pod between runs must not wait for a grace period.
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": PAUSE_IMAGE}],
    }
    if node is not None:
        spec["affinity"] = node_affinity(node)
    return spec


def bind_env() -> list[dict]:
    """What every container of a bind-mode pod carries: CUDA_VISIBLE_DEVICES read through the
    downward API from the annotation the scheduler's Binding writes, and CUDA_DEVICE_ORDER as a
    plain value (what the README's snippet has users put in their templates)."""
    # Imported here: the bare binders import this module and must not pay for gpu_scheduler's import.
    from gpu_scheduler.placement import CUDA_ORDER, CUDA_ORDER_ENV, bind_env_entry

    return [bind_env_entry(), {"name": CUDA_ORDER_ENV, "value": CUDA_ORDER}]


def in_bind_mode(pod_or_template: dict) -> dict:
    """A copy of a pod (or a pod template) whose every container and init container carries
    bind_env(): created so, it needs no admission call. The object given is left as it was."""
    made = copy.deepcopy(pod_or_template)
    for field in ("initContainers", "containers"):
        for container in made["spec"].get(field) or ():
            container["env"] = [*(container.get("env") or ()), *bind_env()]
    return made


def bench_pod(index: int, text: str, group: int, nodes: int, scheduler_name: str, namespace: str) -> dict:
    """Pod p-<index> of group `group`, whose map text (shared by its group) is `text`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"p-{index}",
            "namespace": namespace,
            "labels": {BENCH_LABEL: "true", "group": f"g{group}"},
            "annotations": {MAP_ANNOTATION: text},
        },
        "spec": pod_spec(scheduler_name, placement(index, nodes)[0]),
    }


def bench_pods(count: int, nodes: int, group_size: int, scheduler_name: str, namespace: str) -> list[dict]:
    """Pods p-0 .. p-<count-1>, in groups of group_size sharing one map text."""
    pods = []
    for start in range(0, count, group_size):
        members = range(start, min(start + group_size, count))
        text = map_text(members, nodes)
        pods += [bench_pod(i, text, start // group_size, nodes, scheduler_name, namespace) for i in members]
    return pods


def dynamic_pods(count: int, scheduler_name: str, namespace: str, request_gpu: bool) -> list[dict]:
    """Pods p-0 .. p-<count-1> pinned to nothing, each wanting one GPU: all carry COUNT_MAP (which only
    gpu-scheduler reads); with request_gpu their container also asks for nvidia.com/gpu: 1 (what
    kube-scheduler places by). gpu-scheduler's go without the request, as its users' pods do: with one, a
    device plugin would hand the container GPUs of its own choosing (docs/gpus.md)."""
    pods = []
    for index in range(count):
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p-{index}",
                "namespace": namespace,
                "labels": {BENCH_LABEL: "true"},
                "annotations": {MAP_ANNOTATION: COUNT_MAP},
            },
            "spec": pod_spec(scheduler_name, None),
        }
        if request_gpu:
            # Requests of an extended resource must equal its limits; a limit alone sets both.
            pod["spec"]["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: "1"}}
        pods.append(pod)
    return pods


def gpus_short(pods: int, nodes: int) -> str | None:
    """Why a burst of `pods` count-line pods (one GPU each) cannot all be placed on `nodes` bench nodes, or
    None when they fit."""
    if pods <= nodes * NODE_GPUS:
        return None
    return f"{pods:,} pods of one GPU each do not fit on {nodes:,} nodes of {NODE_GPUS} GPUs ({nodes * NODE_GPUS:,})"


def group_leader(group: int, group_size: int, nodes: int, scheduler_name: str, namespace: str) -> dict:
    """The first pod of group `group` (as bench_pods would make it), carrying its group's whole
    map: one pod per map, for admission requests that each bring a map the webhook has not seen."""
    start = group * group_size
    return bench_pod(start, map_text(range(start, start + group_size), nodes), group, nodes, scheduler_name, namespace)


def statefulset(
    name: str, replicas: int, nodes: int, scheduler_name: str, namespace: str, bind_mode: bool = False
) -> dict:
    """A Parallel StatefulSet whose one map has a line per replica; with bind_mode, its template's
    containers carry bind_env() (its pods are then created with no admission call)."""
    labels = {BENCH_LABEL: "true", "app": name}
    template = {
        "metadata": {"labels": labels, "annotations": {MAP_ANNOTATION: map_text(range(replicas), nodes)}},
        "spec": pod_spec(scheduler_name, None),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": in_bind_mode(template) if bind_mode else template,
        },
    }


def admission_review(pod: dict, uid: str = "bench-0000") -> dict:
    """The AdmissionReview the apiserver sends the webhook when `pod` is created."""
    meta = pod["metadata"]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": meta["name"],
            "namespace": meta["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
