"""Pod label selectors and pod affinity terms, on plain data, as kube-scheduler reads them for
InterPodAffinity and PodTopologySpread.

A label selector (matchLabels and matchExpressions) matches when every requirement does; an
absent selector matches nothing and an empty one everything (metav1.LabelSelectorAsSelector).
A pod affinity term matches a pod when the pod's namespace is among the term's and its labels
match the term's selector. The term's namespaces: those listed, plus every namespace when
namespaceSelector is empty ({}); with neither, the namespace of the pod that has the term.
A namespaceSelector with requirements would need the namespaces' labels, which the scheduler
does not watch: it adds no namespace (docs/placement.md says so).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .affinity import requirement_matches


def selector_matches(selector: Mapping | None, labels: Mapping[str, str]) -> bool:
    if not isinstance(selector, Mapping):
        return False
    wanted = selector.get("matchLabels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return False
    expressions = selector.get("matchExpressions") or ()
    return all(requirement_matches(e, labels) for e in expressions if isinstance(e, Mapping))


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A required pod (anti-)affinity term, its namespaces resolved for the pod that has it."""

    topology_key: str
    selector: Mapping | None = field(hash=False)  # API JSON
    namespaces: frozenset[str] | None  # None: every namespace

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return selector_matches(self.selector, labels)


def pod_terms(terms: Iterable | None, namespace: str) -> tuple[PodTerm, ...]:
    """The required terms of a pod in `namespace` (API JSON), resolved; () for most pods."""
    resolved = []
    for term in terms or ():
        if not isinstance(term, Mapping):
            continue
        listed = frozenset(n for n in term.get("namespaces") or () if isinstance(n, str))
        ns_selector = term.get("namespaceSelector")
        if (
            isinstance(ns_selector, Mapping)
            and not ns_selector.get("matchLabels")
            and not ns_selector.get("matchExpressions")
        ):
            namespaces = None
        elif not listed and ns_selector is None:
            namespaces = frozenset((namespace,))
        else:
            namespaces = listed
        resolved.append(PodTerm(str(term.get("topologyKey") or ""), term.get("labelSelector"), namespaces))
    return tuple(resolved)


def required_terms(spec: Mapping, kind: str) -> list | None:
    """spec.affinity.<kind>.requiredDuringSchedulingIgnoredDuringExecution (kind: podAffinity
    or podAntiAffinity), API JSON, or None."""
    affinity = spec.get("affinity") or {}
    return ((affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or None
