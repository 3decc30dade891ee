"""kube-scheduler's InterPodAffinity filter, required terms only, on the one node the map names.

For the incoming pod (kube-scheduler's PreFilter counts, then Filter, in its order):
- its required pod affinity: for every term, the node has the term's topologyKey and some pod
  in that topology domain matches all of the pod's affinity terms. When no pod anywhere
  matches them and the pod matches its own terms, it may go (the first pod of a group);
- its required anti-affinity: for no term does a pod matching it run in the node's domain;
- the existing pods' required anti-affinity (symmetry): no pod in a domain of the node has a
  term that matches the incoming pod.

Pods count on nodes the scheduler knows (their labels give the domains); a pod being deleted
still counts, as in kube-scheduler's snapshot. Nothing is computed for a pod without terms
while no pod on a node has anti-affinity terms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from .cache import AssignedPod
from .nodes import NodeInfo
from .selectors import PodTerm

INTER_POD_AFFINITY = "InterPodAffinity"
AFFINITY_REASON = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY_REASON = "node(s) didn't satisfy existing pods anti-affinity rules"

NodeOf = Callable[[str], NodeInfo | None]


def _domain(pod: AssignedPod, key: str, node_of: NodeOf) -> str | None:
    info = node_of(pod.node)
    return None if info is None else info.labels.get(key)


def _affinity_satisfied(
    terms: tuple[PodTerm, ...],
    namespace: str,
    labels: Mapping[str, str],
    node: NodeInfo,
    pods: Iterable[AssignedPod],
    node_of: NodeOf,
) -> bool:
    # kube-scheduler counts, per term's (key, value), the pods that match all the terms; the
    # node must have every term's key, and needs a count in its domain for every term.
    values = [node.labels.get(t.topology_key) for t in terms]
    if any(v is None for v in values):
        return False
    counted: set[tuple[str, str]] = set()
    for pod in pods:
        if not all(t.matches(pod.namespace, pod.labels) for t in terms):
            continue
        for term in terms:
            domain = _domain(pod, term.topology_key, node_of)
            if domain is not None:
                counted.add((term.topology_key, domain))
    if all((t.topology_key, v) in counted for t, v in zip(terms, values, strict=True)):
        return True
    # The first pod of a group: no pod matches anywhere, and the pod matches its own terms.
    return not counted and all(t.matches(namespace, labels) for t in terms)


def _anti_affinity_violated(
    terms: tuple[PodTerm, ...], node: NodeInfo, pods: Iterable[AssignedPod], node_of: NodeOf
) -> bool:
    for term in terms:
        value = node.labels.get(term.topology_key)
        if value is None:
            continue
        for pod in pods:
            if term.matches(pod.namespace, pod.labels) and _domain(pod, term.topology_key, node_of) == value:
                return True
    return False


def _existing_anti_affinity_violated(
    namespace: str, labels: Mapping[str, str], node: NodeInfo, holders: Iterable[AssignedPod], node_of: NodeOf
) -> bool:
    for holder in holders:
        for term in holder.anti_affinity:
            value = node.labels.get(term.topology_key)
            if value is None or not term.matches(namespace, labels):
                continue
            if _domain(holder, term.topology_key, node_of) == value:
                return True
    return False


def inter_pod_affinity_reason(
    namespace: str,
    labels: Mapping[str, str],
    affinity: tuple[PodTerm, ...],
    anti_affinity: tuple[PodTerm, ...],
    node: NodeInfo,
    pods: Callable[[], Iterable[AssignedPod]],
    holders: Iterable[AssignedPod],
    node_of: NodeOf,
) -> str | None:
    """Why the node fails the pod's InterPodAffinity, or None. `pods`: every pod on a node
    (called only when the pod has terms); `holders`: the pods on nodes with anti-affinity terms."""
    if affinity and not _affinity_satisfied(affinity, namespace, labels, node, pods(), node_of):
        return AFFINITY_REASON
    if anti_affinity and _anti_affinity_violated(anti_affinity, node, pods(), node_of):
        return ANTI_AFFINITY_REASON
    if _existing_anti_affinity_violated(namespace, labels, node, holders, node_of):
        return EXISTING_ANTI_AFFINITY_REASON
    return None
