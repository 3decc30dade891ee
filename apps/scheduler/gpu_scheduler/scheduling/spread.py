"""kube-scheduler's PodTopologySpread filter, whenUnsatisfiable: DoNotSchedule constraints only,
on the one node the map names.

For each constraint, the domains are the values of its topologyKey on the eligible nodes:
those with every constraint's key, and (nodeAffinityPolicy Honor, the default) that pass the
pod's nodeSelector and required node affinity; with nodeTaintsPolicy Honor, also those whose
NoSchedule/NoExecute taints the pod tolerates. A domain counts the pods on its nodes, in the
pod's namespace and not being deleted, that match the constraint's selector (its labelSelector
and, for each matchLabelKeys key the pod has, that key equal to the pod's value: the API
server merges them into the selector already, so this repeats it harmlessly). Placing the pod
on the node must leave its domain at most maxSkew above the least populated domain (taken
as 0 while fewer domains exist than minDomains). A node without a constraint's key is refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .affinity import matches_node_affinity
from .cache import AssignedPod
from .nodes import NodeInfo
from .selectors import selector_matches
from .taints import untolerated_taint

POD_TOPOLOGY_SPREAD = "PodTopologySpread"
REASON = "node(s) didn't match pod topology spread constraints"
MISSING_LABEL_REASON = REASON + " (missing required label)"


def hard_constraints(spec: Mapping) -> list[Mapping]:
    """The pod's DoNotSchedule constraints (API JSON); [] for most pods."""
    return [
        c
        for c in spec.get("topologySpreadConstraints") or ()
        if isinstance(c, Mapping) and c.get("whenUnsatisfiable") == "DoNotSchedule"
    ]


def _selector(constraint: Mapping, labels: Mapping[str, str]) -> Mapping | None:
    selector = constraint.get("labelSelector")
    keys = [k for k in constraint.get("matchLabelKeys") or () if isinstance(k, str) and k in labels]
    if not keys or not isinstance(selector, Mapping):
        return selector
    extra = [{"key": k, "operator": "In", "values": [labels[k]]} for k in keys]
    return {**selector, "matchExpressions": [*(selector.get("matchExpressions") or ()), *extra]}


def _max_skew(constraint: Mapping) -> int:
    value = constraint.get("maxSkew")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


def _eligible(node: NodeInfo, keys: list[str], spec: Mapping, constraint: Mapping) -> bool:
    if any(k not in node.labels for k in keys):
        return False
    if constraint.get("nodeAffinityPolicy", "Honor") == "Honor" and not matches_node_affinity(spec, node):
        return False
    if constraint.get("nodeTaintsPolicy") == "Honor":
        return untolerated_taint(node.taints, spec.get("tolerations") or ()) is None
    return True


def topology_spread_reason(
    spec: Mapping,
    namespace: str,
    labels: Mapping[str, str],
    constraints: list[Mapping],
    node: NodeInfo,
    nodes: Iterable[NodeInfo],
    pods: Iterable[AssignedPod],
) -> str | None:
    """Why the node fails the pod's DoNotSchedule constraints, or None."""
    keys = [str(c.get("topologyKey") or "") for c in constraints]
    if any(k not in node.labels for k in keys):
        return MISSING_LABEL_REASON
    nodes = list(nodes)
    on_node: dict[str, list[AssignedPod]] = {}
    for pod in pods:
        if pod.namespace == namespace and not pod.terminating:
            on_node.setdefault(pod.node, []).append(pod)
    for constraint, key in zip(constraints, keys, strict=True):
        selector = _selector(constraint, labels)
        counts: dict[str, int] = {}
        for other in nodes:
            if not _eligible(other, keys, spec, constraint):
                continue
            value = other.labels[key]
            matched = sum(1 for p in on_node.get(other.name, ()) if selector_matches(selector, p.labels))
            counts[value] = counts.get(value, 0) + matched
        least = min(counts.values()) if counts else 0
        min_domains = constraint.get("minDomains")
        if isinstance(min_domains, int) and not isinstance(min_domains, bool) and len(counts) < min_domains:
            least = 0
        itself = 1 if selector_matches(selector, labels) else 0
        if counts.get(node.labels[key], 0) + itself - least > _max_skew(constraint):
            return REASON
    return None
