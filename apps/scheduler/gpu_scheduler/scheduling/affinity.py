"""kube-scheduler's NodeAffinity filter, on plain data: spec.nodeSelector and the required
node affinity (requiredDuringSchedulingIgnoredDuringExecution).

Both must hold. nodeSelector: every label equal. Required affinity: at least one
nodeSelectorTerm matches; a term matches when all its matchExpressions (on the
node's labels) and matchFields (metadata.name only) do; a term with neither
matches nothing. Operators as the API defines them: In, NotIn, Exists,
DoesNotExist, Gt, Lt (integers).
"""

from __future__ import annotations

from collections.abc import Mapping

from .nodes import NodeInfo

REASON = "node(s) didn't match Pod's node affinity/selector"


def _integer(text: object) -> int | None:
    # Label values are at most 63 characters, so int() is cheap; anything else never matches.
    if not isinstance(text, str) or not text.strip() or len(text) > 63:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(requirement: Mapping, values_of: Mapping[str, str]) -> bool:
    key = requirement.get("key") or ""
    operator = requirement.get("operator")
    values = [v for v in requirement.get("values") or () if isinstance(v, str)]
    present = key in values_of
    value = values_of.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        have, bound = _integer(value), _integer(values[0])
        if have is None or bound is None:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False  # unknown operator: the API server would not have accepted it


def term_matches(term: Mapping, labels: Mapping[str, str], name: str) -> bool:
    """One nodeSelectorTerm against a node's labels and name (a PersistentVolume's node
    affinity is matched with an empty name, as kube does: scheduling.volumes)."""
    if not isinstance(term, Mapping):
        return False
    expressions = [e for e in term.get("matchExpressions") or () if isinstance(e, Mapping)]
    fields = [f for f in term.get("matchFields") or () if isinstance(f, Mapping)]
    if not expressions and not fields:
        return False
    return all(requirement_matches(e, labels) for e in expressions) and all(
        requirement_matches(f, {"metadata.name": name}) for f in fields
    )


def matches_node_affinity(pod_spec: Mapping, node: NodeInfo) -> bool:
    """Whether the node satisfies the pod's nodeSelector and required node affinity."""
    selector = pod_spec.get("nodeSelector") or {}
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    if required is None:
        return True
    terms = [t for t in required.get("nodeSelectorTerms") or () if isinstance(t, Mapping)]
    return any(term_matches(term, node.labels, node.name) for term in terms)
