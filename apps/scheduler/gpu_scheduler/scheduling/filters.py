"""The filters a pinned node must pass before the pod is bound there, in kube-scheduler's order
and with its plugin names and words.

The map chooses the node; these only say whether it can take the pod now, so
that the kubelet does not reject it later. kube-scheduler runs every plugin's
PreFilter (here: VolumeBinding's, whatever the node) before any Filter, stops at
the first filter that fails for a node and reports that filter's reasons; so
does this. Every failure here can be cured by a change to the node, to the pods
on it (for a ReadWriteOncePod claim, to the pods using it on any node), or to the
pod's claims and their volumes, so the pod is retried (on backoff, and at once
when what it waits on changes).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .affinity import REASON as AFFINITY_REASON
from .affinity import matches_node_affinity
from .cache import AssignedPod, ClusterCache
from .interpod import INTER_POD_AFFINITY, inter_pod_affinity_reason
from .nodes import GPU_RESOURCE, NodeInfo
from .ports import EMPTY_PORTS, NODE_PORTS, HostPort, UsedPorts
from .ports import REASON as PORTS_REASON
from .resources import NodeUsage, Requests, insufficient
from .selectors import pod_terms, required_terms
from .spread import POD_TOPOLOGY_SPREAD, hard_constraints, topology_spread_reason
from .taints import UNSCHEDULABLE_TAINT, taint_reason, tolerated, untolerated_taint
from .volume_limits import MAX_VOLUME_COUNT_EXCEEDED, NODE_VOLUME_LIMITS
from .volume_restrictions import READ_WRITE_ONCE_POD_CONFLICT, VOLUME_RESTRICTIONS
from .volumes import NO_CLAIMS, VOLUME_BINDING, PodClaims, claim_wait_key, filter_node

NODE_READY = "NodeReady"
NODE_UNSCHEDULABLE = "NodeUnschedulable"
TAINT_TOLERATION = "TaintToleration"
NODE_AFFINITY = "NodeAffinity"
NODE_RESOURCES_FIT = "NodeResourcesFit"
GPU_DEVICES = "GPUDevices"


@dataclass(frozen=True, slots=True)
class FilterFailure:
    plugin: str  # kube-scheduler's plugin name (ours for NodeReady and GPUDevices)
    reasons: tuple[str, ...]
    # A PreFilter's refusal, whatever the node: kube-scheduler says it once, not counted per node.
    pre_filter: bool = False
    # What else than the node may let the pod on when it changes (claims, StorageClasses).
    wait_keys: tuple[str, ...] = ()


def pre_filter_failure(claims: PodClaims) -> FilterFailure | None:
    """VolumeBinding's PreFilter refusal (scheduling.volumes.pre_filter), if it refused."""
    if claims.refusal is None:
        return None
    return FilterFailure(VOLUME_BINDING, (claims.refusal,), pre_filter=True, wait_keys=claims.wait_keys)


def _ordinal_beyond(device: str, count: int) -> bool:
    """Whether an ordinal device token names a GPU the node does not have. Compared as text
    first: a token may have thousands of digits, too many for int()."""
    digits = device.lstrip("0") or "0"
    if len(digits) > len(str(count)):
        return True
    return int(digits) >= count


def gpu_reasons(devices: tuple[str, ...], node: NodeInfo) -> list[str]:
    """Devices the node does not have. Where it publishes its inventory, any device the
    inventory cannot resolve (ordinal, GPU or MIG UUID), the node's GPUs listed; else
    ordinals at or beyond its nvidia.com/gpu capacity, when it advertises one (UUIDs
    cannot be checked against anything else the node object says and pass)."""
    if node.inventory is not None:
        unknown = [d for d in devices if node.inventory.resolve(d) is None]
        if not unknown:
            return []
        return [f"node(s) had no GPU {', '.join(unknown)} (its GPUs: {node.inventory.describe()})"]
    if not node.gpus_advertised:
        return []
    beyond = [d for d in devices if d.isascii() and d.isdigit() and _ordinal_beyond(d, node.gpus)]
    if not beyond:
        return []
    have = f"GPUs 0-{node.gpus - 1}" if node.gpus > 1 else ("GPU 0" if node.gpus == 1 else "no GPU")
    return [f"node(s) had {have} ({GPU_RESOURCE}: {node.gpus}), not GPU {', '.join(beyond)}"]


def run_filters(
    pod_spec: Mapping,
    requests: Requests,
    devices: tuple[str, ...],
    node: NodeInfo,
    usage: NodeUsage,
    *,
    ports: tuple[HostPort, ...] = (),
    used_ports: UsedPorts = EMPTY_PORTS,
    claims: PodClaims = NO_CLAIMS,
    claims_in_use: tuple[str, ...] = (),
    over_volume_limits: bool = False,
    pod_meta: Mapping | None = None,
    cluster: ClusterCache | None = None,
) -> FilterFailure | None:
    """The first filter the node fails for this pod, or None when it can take it. `ports`: the
    host ports the pod takes (scheduling.ports.host_ports), `used_ports` those the node's pods
    take; `claims`: what VolumeBinding's PreFilter found (it passed); `claims_in_use`: the
    pod's ReadWriteOncePod claims another pod uses (scheduling.volume_restrictions);
    `over_volume_limits`: its CSI volumes exceed the node's counts (scheduling.volume_limits);
    `pod_meta` (namespace, labels) and `cluster` (the nodes and the pods on them): what
    PodTopologySpread and InterPodAffinity read, not run without a cluster."""
    tolerations = pod_spec.get("tolerations") or ()
    if not node.ready:
        # kube-scheduler learns this from the not-ready taint the node controller adds; we
        # read the condition too, so a node that just failed is refused before it is tainted.
        return FilterFailure(NODE_READY, (f"node(s) were not Ready ({node.not_ready_message})",))
    if node.unschedulable and not tolerated(tolerations, UNSCHEDULABLE_TAINT):
        return FilterFailure(NODE_UNSCHEDULABLE, ("node(s) were unschedulable",))
    taint = untolerated_taint(node.taints, tolerations)
    if taint is not None:
        return FilterFailure(TAINT_TOLERATION, (taint_reason(taint),))
    if not matches_node_affinity(pod_spec, node):
        return FilterFailure(NODE_AFFINITY, (AFFINITY_REASON,))
    if ports and used_ports.conflicts(ports):
        return FilterFailure(NODE_PORTS, (PORTS_REASON,))
    reasons = insufficient(requests, node.allocatable, usage)
    if reasons:
        return FilterFailure(NODE_RESOURCES_FIT, tuple(reasons))
    if claims_in_use:
        waits = tuple(claim_wait_key(key) for key in claims_in_use)
        return FilterFailure(VOLUME_RESTRICTIONS, (READ_WRITE_ONCE_POD_CONFLICT,), wait_keys=waits)
    if over_volume_limits:
        return FilterFailure(NODE_VOLUME_LIMITS, (MAX_VOLUME_COUNT_EXCEEDED,), wait_keys=claims.wait_keys)
    reasons = filter_node(claims, node)
    if reasons:
        return FilterFailure(VOLUME_BINDING, tuple(reasons), wait_keys=claims.wait_keys)
    if cluster is not None:
        failure = _pods_on_nodes_failure(pod_spec, pod_meta or {}, node, cluster)
        if failure is not None:
            return failure
    reasons = gpu_reasons(devices, node)
    if reasons:
        return FilterFailure(GPU_DEVICES, tuple(reasons))
    return None


# What a pod refused by PodTopologySpread or InterPodAffinity waits on: a pod added to a node,
# removed or relabelled, or a node added, removed or relabelled (scheduler/state.py wakes it).
# Not a node name (it has spaces), so it never clashes with one.
PODS_ON_NODES = "pods on nodes"


def _pods_on_nodes_failure(spec: Mapping, meta: Mapping, node: NodeInfo, cluster: ClusterCache) -> FilterFailure | None:
    """PodTopologySpread, then InterPodAffinity (kube-scheduler's order). A pod with neither
    constraints nor terms costs a look at the anti-affinity holders, none in most clusters. The
    pod's own hold, kept while its binding is in doubt, is not counted against it."""
    namespace = str(meta.get("namespace") or "")
    labels = meta.get("labels") or {}
    own = meta.get("uid")

    def others() -> Iterable[AssignedPod]:
        return (p for p in cluster.pods() if p.uid != own)

    constraints = hard_constraints(spec)
    if constraints:
        reason = topology_spread_reason(spec, namespace, labels, constraints, node, cluster.nodes.all(), others())
        if reason is not None:
            return FilterFailure(POD_TOPOLOGY_SPREAD, (reason,), wait_keys=(PODS_ON_NODES,))
    affinity = pod_terms(required_terms(spec, "podAffinity"), namespace)
    anti_affinity = pod_terms(required_terms(spec, "podAntiAffinity"), namespace)
    holders = [h for h in cluster.anti_affinity_pods() if h.uid != own]
    if not affinity and not anti_affinity and not holders:
        return None
    reason = inter_pod_affinity_reason(
        namespace, labels, affinity, anti_affinity, node, others, holders, cluster.nodes.get
    )
    if reason is None:
        return None
    return FilterFailure(INTER_POD_AFFINITY, (reason,), wait_keys=(PODS_ON_NODES,))


def unavailable_message(failure: FilterFailure, node: str, line: int) -> str:
    """kube-scheduler's FitError text for one node ("0/1 nodes are available: 1 Insufficient
    cpu."; a PreFilter's reason uncounted: "0/1 nodes are available: pod has unbound immediate
    PersistentVolumeClaims."), then which node the map pins the pod to and the filter that
    refused it."""
    if failure.pre_filter:
        counted = ", ".join(failure.reasons)
    else:
        counted = ", ".join(sorted(f"1 {reason}" for reason in failure.reasons))
    return (
        f"0/1 nodes are available: {counted}. The map (line {line}) pins the pod to node {node}, "
        f"which {failure.plugin} refused."
    )
