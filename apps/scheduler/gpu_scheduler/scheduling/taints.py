"""kube-scheduler's TaintToleration and NodeUnschedulable filters, on plain data.

A pod may go to a node only if it tolerates every taint whose effect is
NoSchedule or NoExecute (PreferNoSchedule is a preference, not a filter). A
cordoned node (spec.unschedulable) refuses pods unless they tolerate the
node.kubernetes.io/unschedulable:NoSchedule taint, as DaemonSet pods do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .nodes import Taint

FILTERED_EFFECTS = ("NoSchedule", "NoExecute")
UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


def tolerates(toleration: Mapping, taint: Taint) -> bool:
    """Whether one toleration of the pod tolerates the taint (the API's rules: an empty effect
    matches every effect, an empty key with Exists matches every key, Equal compares values)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if operator == "Equal":
        return (toleration.get("value") or "") == taint.value
    return False


def tolerated(tolerations: Iterable[Mapping], taint: Taint) -> bool:
    return any(isinstance(t, Mapping) and tolerates(t, taint) for t in tolerations)


def untolerated_taint(taints: Iterable[Taint], tolerations: Iterable[Mapping]) -> Taint | None:
    """The first NoSchedule/NoExecute taint the pod does not tolerate, or None."""
    tolerations = list(tolerations)
    for taint in taints:
        if taint.effect in FILTERED_EFFECTS and not tolerated(tolerations, taint):
            return taint
    return None


def taint_reason(taint: Taint) -> str:
    """kube-scheduler's words for it."""
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"
